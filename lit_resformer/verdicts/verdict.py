"""A verdict on one comparison of a grid's runs, and the one judge that decides it from per-seed values (`judge`):
every metric kind (lit_resformer.verdicts.judges) reads its per-seed values from the runs and ends here. The
comparisons are declared in the grid file (lit_resformer.runs.claim_spec).

Design: a comparison is paired by seed only when its runs' data seeds (`stats.run_data_seed` of each run's config)
say that a seed's two runs share one data order and different seeds have different ones; otherwise it is unpaired
(Welch's t). A slope across a matrix key is one estimate per seed (one-sample t). Each verdict carries the two-sided 95%
t interval of its design, `p_raw` (one-sided, in the claimed direction) and `p_two_sided`.

Verdict (`stats.verdict`, then `stats.adjusted_verdict`):
  reproduced    the interval excludes zero on the claimed side and the adjusted two-sided p-value is below 0.05;
  contradicted  the same on the other side;
  inconclusive  otherwise, as with n < 2, or when a run in the comparison is not past the unigram plateau (its final
                validation loss is not at least stats.PLATEAU_MARGIN nats below the unigram loss of its validation
                tokens, or it logged no unigram reference);
  not tested    a precondition failed, with the reason: a run ends above its bigram reference (early training, when
                the run recorded one), a claim that `requires: crossing` (SVFormer after vanilla overtakes it)
                has an SVFormer run that vanilla never overtook in training loss, a critical point's growth whose
                baseline never overtakes the cell at a short length in some seed, the runs lack what the metric
                reads (analysis results, an evaluation after warm-up), or a run of its cells at the grid's seeds has
                not finished (a grid merged seed by seed is judged once, on every seed it declared).
"Contradicted" needs exactly what "reproduced" needs (the two-sided test at the same alpha); the p-value that decides
is adjusted within its grid's family (lit_resformer.verdicts.judgements). A decisive verdict with its Holm p in
[ALPHA/2, ALPHA) is labelled "(fragile)". A comparison with a `margin` is tested against that bound. The evidence gate
is checked where the claim is measured (the end, the end of warm-up, or each evaluation used).
Each verdict carries the paper's own effect (`paper:`) where the claim gives it, and its grid's regime
(`grid_regime`: parameters, tokens, tokens per parameter, final losses against the unigram and bigram references).
A comparison whose runs differ in what they ran on (library versions, device, precision, code version: their
summaries' provenance) says so in its note.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from lit_resformer.measures.stats import (
    RunLosses,
    compare_seeds,
    evidence_gate,
    fragile,
    per_seed_t,
    run_data_seed,
    verdict,
)
from lit_resformer.runs import identity
from lit_resformer.runs.claim_spec import Claim
from lit_resformer.runs.results import RunResult, provenance_differences
from lit_resformer.verdicts.regime import regime_text

DOMAIN_PREFIX = "val_loss/"  # per-domain claims: sub-rows of their claim on the scoreboard


@dataclass(frozen=True)
class Verdict:
    grid: str
    claim: Claim
    verdict: str
    delta: float | None  # mean difference a − b over seeds (the mean slope for critical_point_growth)
    low: float | None  # two-sided 95% interval of the design; None when n < 2
    high: float | None
    n: int
    note: str = ""  # why a claim is inconclusive or not tested beyond its interval, and what was left out
    trained_on: str = ""  # where the grid's runs trained, from a results folder's provenance ("" if trained in place)
    design: str = ""  # paired | unpaired | per-seed ("" for a scaling fit or no runs)
    p_raw: float | None = None  # one-sided, in the claimed direction
    p_two_sided: float | None = None
    p_holm: float | None = None  # the two-sided p adjusted within the grid (the largest over the grids it is in)
    unadjusted: str = ""  # the verdict before adjustment for multiple comparisons
    grids: tuple[str, ...] = ()  # every grid the same comparison was seen in (the scoreboard's rows)
    texts: tuple[str, ...] = ()  # the comparison's words in each of those grids (how paper claims find it)
    disagree: str = ""  # the grids' verdicts when they differ (never in committed results: tests/verdicts/test_paper_claims.py)
    evidence: bool = True  # every run in the comparison is past the unigram plateau
    df: float | None = None  # degrees of freedom of a t interval (None: no interval, or not a t interval)
    regime: dict = field(default_factory=dict, compare=False)  # the grid's regime (grid_regime)
    runs: tuple | None = field(default=None, compare=False, repr=False)  # identity of the runs compared
    # the grids its a runs and its b runs trained in (from their summaries), side by side
    trained_in: tuple[frozenset, ...] = field(default=(), compare=False, repr=False)
    judged_in: str = ""  # the grid whose family judged it (Judgements.owner; "": this grid's own)
    # what its design can detect and what an inconclusive verdict rules out (lit_resformer.measures.power.power_of, at
    # its family's adjusted level): sd, mde, effect, seeds_needed, tost_p, classification; {} before it is judged
    power: dict = field(default_factory=dict, compare=False)

    @property
    def fragile(self) -> bool:
        """A decisive verdict whose adjusted p is in [ALPHA/2, ALPHA): one more comparison in its family, or a
        slightly different seed, could undo it. Shown as "(fragile)" beside the verdict."""
        return fragile(self.verdict, self.p_holm)

    @property
    def adjustable(self) -> bool:
        """Whether its test enters a family of adjusted p-values: it ran on runs that are evidence, and was tested."""
        # a p-value is NaN when both sides are identical on every seed (no variance): there is no test to adjust
        return (self.p_two_sided is not None and math.isfinite(self.p_two_sided) and self.unadjusted != "not tested"
                and self.evidence and not self.judged_in)

    def to_dict(self) -> dict:
        return {"grid": self.grid, "grids": list(self.grids or (self.grid,)), **self.claim.to_dict(),
                "verdict": self.verdict, "verdict_unadjusted": self.unadjusted, "design": self.design,
                "delta": self.delta, "ci_low": self.low, "ci_high": self.high, "n": self.n, "df": self.df,
                "p_raw": self.p_raw,
                "p_two_sided": self.p_two_sided, "p_holm": self.p_holm, "fragile": self.fragile, "note": self.note,
                "trained_on": self.trained_on, "judged_in": self.judged_in, "power": self.power, "regime": self.regime,
                "regime_text": regime_text(self.regime) if self.regime else ""}


def data_seeds(runs: dict[int, RunResult]) -> dict[int, int | None]:
    """seed -> the data order of that seed's run (stats.run_data_seed of its config; None when unknown)."""
    return {seed: run_data_seed(run.config) if run.config else None for seed, run in runs.items()}


def judge(claim: Claim, per_seed_a: dict[int, float], per_seed_b: dict[int, float] | None,
          runs: Sequence[RunResult], grid: str, note: str = "", design: str = "per-seed",
          not_tested: str = "", measured: dict[str, float] | None = None) -> Verdict:
    """The unadjusted verdict on per-seed values: a difference a − b in `design` (b given) or one estimate per seed
    (b None, per-seed). `not_tested` is the reason a precondition failed ("" when none did). `measured`: run name
    -> its loss where the claim is measured (the evidence gate is checked there; the final validation loss when
    not given). A claim with a `margin` is tested against the bound -margin (higher) / +margin (lower), by the same
    interval: its p-values are those of the shifted test."""
    claimed = "less" if claim.direction == "lower" else "greater"
    notes = [note] if note else []
    measured = measured or {}
    gate = evidence_gate([RunLosses(r.name, measured.get(r.name, r.final("val_loss")), r.unigram_loss, r.bigram_loss)
                          for r in runs])
    stuck = gate.stuck
    if gate.not_tested:
        not_tested = gate.not_tested
    elif stuck:
        notes.append(f"not past the unigram plateau: {', '.join(stuck)}")
    not_tested = not_tested or corpus_mismatch(runs)
    notes += provenance_note(runs)
    if not per_seed_a or (per_seed_b is not None and not per_seed_b):
        decided = "not tested" if not_tested else "inconclusive"
        if not_tested:
            notes.insert(0, f"not tested: {not_tested}")
        else:
            notes.append("no seed gave a value" if runs else "no finished runs")
        return Verdict(grid, claim, decided, None, None, None, 0, "; ".join(notes), unadjusted=decided)
    bound = 0.0 if claim.margin is None else (claim.margin if claim.direction == "lower" else -claim.margin)
    if per_seed_b is None:
        shifted = [v - bound for v in per_seed_a.values()]
        two_sided, one_sided = (per_seed_t(shifted, alt) for alt in ("two-sided", claimed))
    else:
        shifted_b = {s: v + bound for s, v in per_seed_b.items()}
        two_sided, one_sided = (compare_seeds(per_seed_a, shifted_b, design, alt) for alt in ("two-sided", claimed))
    if bound:
        # report a − b itself; the test (and its interval's side) is against the bound
        two_sided = replace(two_sided, estimate=two_sided.estimate + bound, low=two_sided.low + bound
                            if two_sided.low is not None else None,
                            high=two_sided.high + bound if two_sided.high is not None else None)
        notes.append(f"tested against the bound {bound:+.4f} (margin {claim.margin:g} nats), not zero")
    if two_sided.n < 2:
        notes.append("fewer than 2 seeds")
    if not_tested:
        notes.insert(0, f"not tested: {not_tested}")
        decided = "not tested"
    else:
        low, high = ((two_sided.low - bound, two_sided.high - bound) if two_sided.low is not None
                     else (None, None))
        decided = verdict(low, high, two_sided.n, claim.direction, not stuck)
    return Verdict(grid, claim, decided, two_sided.estimate, two_sided.low, two_sided.high, two_sided.n,
                   "; ".join(notes), design=two_sided.design, p_raw=one_sided.p, p_two_sided=two_sided.p,
                   unadjusted=decided, evidence=not stuck, df=two_sided.df)


def flat_verdict(claim: Claim, per_seed: dict[int, float], runs: Sequence[RunResult], grid: str, note: str,
                 not_tested: str, sides: list[dict]) -> Verdict:
    """A claim that a per-seed quantity (a slope, a difference of gaps) is zero within ±margin (direction `flat`), by
    the suite's margin rule (claim_spec's MARGIN) applied to both bounds, on the two-sided 95% interval of its mean:

      reproduced    the interval lies within ±margin (the two one-sided tests at its level; their larger p, doubled
                    to the interval's two-sided level, is the one adjusted);
      contradicted  the interval lies clear of the margin: wholly above +margin or below −margin (the test against
                    the nearer bound, two-sided); without a margin, when it excludes zero;
      inconclusive  otherwise: an interval that reaches into the margin without lying inside it is neither."""
    judged = judge(replace(claim, direction="lower", margin=None), per_seed, None, runs, grid, note,
                   not_tested=not_tested)
    decided, p_two = judged.unadjusted, judged.p_two_sided
    if decided in ("reproduced", "contradicted", "inconclusive") and judged.low is not None and judged.evidence:
        values = list(per_seed.values())
        margin = claim.margin
        if margin is None:
            decided = "contradicted" if decided != "inconclusive" else decided
        else:
            bound = margin if judged.delta > 0 else -margin
            p_clear = per_seed_t([v - bound for v in values], "two-sided").p  # against the nearer bound
            p_within = min(1.0, 2 * max(per_seed_t([v - margin for v in values], "less").p,
                                        per_seed_t([v + margin for v in values], "greater").p))
            if judged.low > margin or judged.high < -margin:
                decided, p_two, how = "contradicted", p_clear, f"clear of the margin ±{margin:g} (against {bound:+g})"
            elif -margin < judged.low and judged.high < margin:
                decided, p_two, how = "reproduced", p_within, f"within the margin ±{margin:g} (two one-sided tests)"
            else:  # neither test decides; the nearer to deciding is the one shown
                decided, p_two = "inconclusive", min(p_clear, p_within)
                how = f"the interval reaches into the margin ±{margin:g} without lying inside it"
            judged = replace(judged, note=f"{judged.note}; {how}, p {p_two:.3g}")
    return replace(judged, claim=claim, verdict=decided, unadjusted=decided, p_two_sided=p_two, p_raw=p_two,
                   **compared(claim, sides))


def corpus_mismatch(runs: Iterable[RunResult]) -> str:
    """Why runs of different corpora cannot be compared ("" when they can): each run records its corpus's content
    hash (summary `corpus_hash`, lit_resformer.runs.run_dir's corpus.json); a run that recorded none (trained
    before runs did) pairs with any."""
    hashes = sorted({h for r in runs if (h := r.summary.get("corpus_hash"))})
    if len(hashes) < 2:
        return ""
    return (f"runs trained on different corpora (content hashes {', '.join(h[:12] for h in hashes)}), which no "
            "comparison pairs")


def provenance_note(runs: Iterable[RunResult]) -> list[str]:
    """The notes of a comparison whose runs ran on different things (versions, device, precision, code), or
    rest on runs that recorded no provenance block ("provenance unknown")."""
    runs = list(runs)
    differences, _ = provenance_differences(runs)  # runs that recorded none: "provenance unknown" below
    notes = []
    dirty = [r.name for r in runs if r.provenance.get("git_dirty") and not r.provenance.get("git_diff_sha256")]
    if dirty:
        notes.append(f"rests on {len(dirty)} run(s) trained from a checkout with uncommitted changes it did not record "
                     f"({', '.join(dirty)}): to be re-derived from a clean commit (docs/rederivation/pending.md)")
    if differences:
        shown = "; ".join(f"{field} {' vs '.join(values)}" for field, values in differences.items())
        notes.append(f"runs differ in what they ran on: {shown}")
    unknown = [r.name for r in runs if not r.provenance]
    if unknown:
        notes.append(f"provenance unknown: {len(unknown)} run(s) recorded no provenance block ({', '.join(unknown)}), "
                     "listed in docs/rederivation/pending.md")
    return notes


@dataclass(frozen=True)
class SideValues:
    """Per-seed values of a claim's two cells, what to say about them, and what keeps the claim from a verdict."""

    a: dict[int, float]
    b: dict[int, float]
    notes: list[str]
    not_tested: str = ""  # a precondition that failed ("" when none did)
    against: bool = False  # a point of the curve where the claimed side does not hold (at: throughout)
    measured: dict[str, float] | None = None  # run name -> its loss where the claim is measured (evidence gate)


def compared(claim: Claim, sides: Sequence[dict[int, RunResult]]) -> dict:
    """The Verdict fields that say which runs a comparison compared: their identity (`runs`) and the grids they
    trained in (`trained_in`, from their summaries; a run summarised before runs named their grid: its own)."""
    return {"runs": _identity(claim, sides),
            "trained_in": tuple(frozenset(run.recorded.get("grid") or run.grid for run in side.values())
                                for side in sides)}


def _identity(claim: Claim, sides: Sequence[dict[int, RunResult]]) -> tuple | None:
    """What makes two comparisons the same: what is tested (metric, direction, where on the run, the bound, the
    precondition) and the run identities (lit_resformer.runs.identity.run_identity: the resolved config, seed
    included, where a run trained and wrote left out) of the runs on each side; None when a run has no recorded
    config (then it is only itself)."""
    configs = []
    for side in sides:
        resolved = [run.resolved_config for run in side.values()]
        if any(config is None for config in resolved):
            return None
        configs.append(tuple(sorted(json.dumps(identity.run_identity(config), sort_keys=True) for config in resolved)))
    return (claim.metric, claim.direction, claim.over, claim.at, claim.target, claim.margin, claim.requires, *configs)


def is_sub_row(v: Verdict) -> bool:
    """A per-domain result: a sub-row of its claim, not a claim of its own on the scoreboard."""
    return v.claim.metric.startswith(DOMAIN_PREFIX)
