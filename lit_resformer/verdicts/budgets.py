"""A ladder's claim that a's data saving against b is constant across budgets (`data_saving_slope`, direction
`flat`; lit_resformer.verdicts.judges registers it in its JUDGING table), judged on the per-seed slope of the saving
against log2 budget (lit_resformer.measures.budget_ladder) by the suite's margin rule for a flat claim
(lit_resformer.verdicts.verdict.flat_verdict): reproduced when its interval lies within ±margin per doubling of the
budget, contradicted when it lies clear of the margin, inconclusive otherwise.
"""

from __future__ import annotations

from lit_resformer.measures.budget_ladder import data_savings, rungs, slopes
from lit_resformer.runs.claim_spec import Claim
from lit_resformer.runs.results import GridResults
from lit_resformer.verdicts.verdict import Verdict, flat_verdict


def judge_saving_slope(claim: Claim, results: GridResults) -> Verdict:
    rung = rungs(results, claim.a, claim.b, claim.over)
    savings = data_savings(rung)
    per_seed = slopes(savings.per_seed)
    notes = [f"per seed: the saving 1 - B / B' at the end of each rung's decay ({claim.b} reaches {claim.a}'s loss "
             f"at budget B' against B), its slope against log2 {claim.over} over {[f'{b:g}' for b in rung.budgets]}"]
    if savings.extrapolated:
        notes.append(f"{savings.extrapolated} saving(s) need {claim.b}'s losses extended beyond its rungs")
    if savings.left_out:
        notes.append(f"left out seed(s) {savings.left_out}: {claim.b}'s end-of-decay loss does not fall at every rung")
    not_tested = "" if len(rung.budgets) >= 2 else f"fewer than two rungs along {claim.over}"
    sides = [side for budget in rung.budgets for side in rung.runs[budget]]
    return flat_verdict(claim, per_seed, rung.all_runs(), results.name, "; ".join(notes), not_tested,
                        [{s: run for s, run in side.items() if s in rung.seeds} for side in sides])


def saving_slope_label(claim: Claim) -> str:
    bound = f", constant within ±{claim.margin:g} per doubling" if claim.margin is not None else ""
    return f"slope of data saving 1 − B/B' vs log2 {claim.over} at the end of each decay (flat{bound})"
