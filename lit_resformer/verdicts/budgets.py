"""A ladder's claim that a's data saving against b is constant across budgets (`data_saving_slope`, direction
`flat`; lit_resformer.verdicts.judges registers it in its JUDGING table), judged by the one judge of per-seed values
(lit_resformer.verdicts.verdict.judge) on the per-seed slope of the saving against log2 budget
(lit_resformer.measures.budget_ladder) and its t interval over seeds:

  contradicted  the interval excludes zero: the saving changes with the budget (the two-sided test of the trend);
  reproduced    otherwise, when the interval lies within +-margin: no trend larger than the margin per doubling of
                the budget (two one-sided tests at the same level; their larger p is the one adjusted);
  inconclusive  otherwise.
"""

from __future__ import annotations

from dataclasses import replace

from lit_resformer.measures.budget_ladder import data_savings, rungs, slopes
from lit_resformer.measures.stats import per_seed_t
from lit_resformer.runs.claim_spec import Claim
from lit_resformer.runs.results import GridResults
from lit_resformer.verdicts.verdict import Verdict, compared, judge


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
    # the test against zero, read as the trend test; the equivalence bounds are applied below
    judged = judge(replace(claim, direction="lower", margin=None), per_seed, None, rung.all_runs(), results.name,
                   "; ".join(notes), not_tested=not_tested)
    decided, p_two = judged.unadjusted, judged.p_two_sided
    if decided in ("reproduced", "contradicted"):
        decided = "contradicted"  # a trend either way: not a constant saving
    elif decided == "inconclusive" and claim.margin is not None and judged.low is not None and judged.evidence:
        if -claim.margin < judged.low and judged.high < claim.margin:
            values = list(per_seed.values())
            p_two = max(per_seed_t([v - claim.margin for v in values], "less").p,
                        per_seed_t([v + claim.margin for v in values], "greater").p)
            decided = "reproduced"
            judged = replace(judged, note=f"{judged.note}; within the margin +-{claim.margin:g} per doubling "
                                          f"(two one-sided tests, p {p_two:.3g})")
    sides = [side for budget in rung.budgets for side in rung.runs[budget]]
    return replace(judged, claim=claim, verdict=decided, unadjusted=decided, p_two_sided=p_two, p_raw=p_two,
                   **compared(claim, [{s: run for s, run in side.items() if s in rung.seeds} for side in sides]))


def saving_slope_label(claim: Claim) -> str:
    bound = f", constant within ±{claim.margin:g} per doubling" if claim.margin is not None else ""
    return f"slope of data saving 1 − B/B' vs log2 {claim.over} at the end of each decay (flat{bound})"
