"""The paper's claims judged on a grid's runs, and the scoreboard across grids. The claims are declared in the grid
file (lit_resformer.runs.claim_spec); a size or token sweep adds its scaling claim (lit_resformer.measures.scaling).

Metrics (lit_resformer.runs.claim_spec), per seed: `val_loss` is the final validation loss (the mean over domains),
`val_loss/<domain>` one domain's, `train_loss` the final training loss (moving average, `train_loss_window`).
`at: warmup` takes the value at the first step after warm-up (model.warmup_steps) that every run of the comparison
logged: an evaluation for val_loss, the smoothed training loss for train_loss ("early in training", as the paper's
Fig. 14 reads its relative training loss). `at: throughout` takes each run's mean validation loss over the
evaluations after warm-up, so that a seed's difference is its mean gap over the curve, and the claim is reproduced
only if, besides the test, the mean gap over seeds is on the claimed side at every one of those evaluations (the
note names the steps where it is not).
`critical_point_growth` (paper Fig. 14) is, per seed, the least-squares slope of log2(1 + critical step) against
log2 of the `over` value, where the critical step is where b's training loss overtakes a's for good
(`stats.critical_point_growth`, with the grid's critical_point_window); it needs the runs' logged metrics.
`val_loss_gap_slope` is, per seed, the slope of the final validation-loss gap a - b against log2 of `over`.
`analysis/<name>` reads the runs' analysis results (`--analyze`), averaged over the middle layers
(`analysis_value`); without them the claim is not tested. `time_to_target` (and `time_to_target/<domain>`) is a's
data saving against b, 1 - tokens(a) / tokens(b) to first reach b's final validation loss (or the claim's `target`)
along each seed's curve, with the log-ratio interval of lit_resformer.measures.time_to_target and its `decide` (a seed
that never reaches the target enters at its bound, and only what the bound supports is concluded); its evidence gate
is checked at the runs' ends, and its p-values enter the Holm family like any other. A grid's own `equivalence_saving` claim is not tested
unless the scaling fit judges that variant.

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
Many comparisons are tested at once, so by chance alone some would pass: the p-values are adjusted for that, by the
suite's one rule (stats.ALPHA): Holm within each grid's family of comparisons (`p_holm`: no false verdict in the
figure with 95% probability). Each comparison is in one family: its owner's, the grid that trained its runs, where
an overlay shares them (`Judgements`). The grid report and the scoreboard show the same
verdict and p for a comparison; the scoreboard does not adjust again across grids. "Contradicted" needs exactly
what "reproduced" needs (the two-sided test at the same alpha). A decisive verdict with its Holm p in [ALPHA/2, ALPHA) is labelled "(fragile)". A sweep's
scaling claim is judged on the t test over its per-seed fitted savings (lit_resformer.measures.scaling) and adjusted
like the others; a comparison with a `margin` is tested against that bound. The evidence gate is checked where the
claim is measured (the end, the end of warm-up, or each evaluation used); a mechanism claim (analysis/first_token_*)
needs the baseline to show the phenomenon at the paper's threshold (BASELINE_PHENOMENA). The paper's claims, each
with these comparisons as its evidence, are derived in lit_resformer.verdicts.paper_claims.
Each verdict carries the paper's own effect (`paper:`) where the claim gives it, and its grid's regime
(`grid_regime`: parameters, tokens, tokens per parameter, final losses against the unigram and bigram references).
Claims from outside the paper (`beyond_paper: true`) stand in their own section of the scoreboard.
A comparison whose runs differ in what they ran on (library versions, device, precision, code version: their
summaries' provenance) says so in its note.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from lit_resformer.measures.power import effect_of_interest, family_level, power_of
from lit_resformer.measures.scaling import PAPER_CLAIMS, SweepAnalysis, sweep_analysis
from lit_resformer.measures.stats import (
    RunLosses,
    adjusted_verdict,
    compare_seeds,
    critical_point,
    critical_point_growth,
    evidence_gate,
    fragile,
    holm,
    per_seed_t,
    run_data_seed,
    seed_design,
    verdict,
)
from lit_resformer.measures.time_to_target import TimeToTargetError, decide, time_to_target
from lit_resformer.runs import identity
from lit_resformer.runs.claim_spec import (
    ANALYSIS_METRICS,
    ANALYSIS_PREFIX,
    AT_B_BEST,
    CRITICAL_POINT_GROWTH,
    DATA_SAVING_SLOPE,
    EACH_AT_BEST,
    EQUIVALENCE_SAVING,
    GAP_DEPENDENCE,
    GAP_SLOPE,
    SAME_CELL_METRICS,
    TIME_TO_TARGET,
    Claim,
    metric_kind,
)
from lit_resformer.runs.directory import GridDir, grid_dirs, grid_index
from lit_resformer.runs.results import (
    GridResults,
    RunResult,
    load_results,
    provenance_differences,
    relative_curves,
)
from lit_resformer.runs.summary import TRAIN_LOSS_WINDOW
from lit_resformer.training.run_dir import FINISHED
from lit_resformer.verdicts import budgets, tuning
from lit_resformer.verdicts.regime import grid_regime, regime_text
from lit_resformer.verdicts.verdict_cache import VerdictCache, grid_key

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


def corpus_mismatch(runs: Iterable[RunResult]) -> str:
    """Why runs of different corpora cannot be compared ("" when they can): each run records its corpus's content
    hash (summary `corpus_hash`, lit_resformer.training.run_dir's corpus.json); a run that recorded none (trained
    before runs did) pairs with any."""
    hashes = sorted({h for r in runs if (h := r.summary.get("corpus_hash"))})
    if len(hashes) < 2:
        return ""
    return (f"runs trained on different corpora (content hashes {', '.join(h[:12] for h in hashes)}), which no "
            "comparison pairs")


def provenance_note(runs: Iterable[RunResult]) -> list[str]:
    """The notes of a comparison whose runs ran on different things (versions, device, precision, code), or
    whose provenance is known for some runs only."""
    runs = list(runs)
    differences, unrecorded = provenance_differences(runs)
    notes = []
    dirty = [r.name for r in runs if r.provenance.get("git_dirty") and not r.provenance.get("git_diff_sha256")]
    if dirty:
        notes.append(f"rests on {len(dirty)} run(s) trained from a checkout with uncommitted changes it did not record "
                     f"({', '.join(dirty)}): to be re-derived from a clean commit (docs/rederivation/pending.md)")
    if differences:
        shown = "; ".join(f"{field} {' vs '.join(values)}" for field, values in differences.items())
        notes.append(f"runs differ in what they ran on: {shown}")
    if unrecorded:
        notes.append(f"what {', '.join(sorted(unrecorded))} ran on was not recorded")
    return notes


def evaluate_grid(grid: str | Path | GridResults, sweep: SweepAnalysis | None = None, index: Mapping[str, GridDir] | None = None,
                  judged: Judgements | None = None) -> list[Verdict]:
    """Verdicts on every claim of a grid's runs (the claims its manifest stores: lit_resformer.grids.spec.
    refresh_claims keeps them equal to its grid file's), each judged as its metric's kind says (JUDGING), decided on
    p-values adjusted within the grid (Holm). A comparison another grid of `index` owns (`Judgements.owner`: the grid
    that trained its runs) takes that grid's verdict and Holm p. `index` (grid name -> folder) is every grid the
    caller was given; nothing else is read. `sweep` is the scaling analysis of a sweep grid when the caller has it.
    `judged` keeps the grids judged so far for a caller that judges many (the scoreboard)."""
    results = grid if isinstance(grid, GridResults) else load_results(grid)
    judged = Judgements(index or {}) if judged is None else judged
    return judged.verdicts(results, sweep)


@dataclass(frozen=True)
class Graded:
    """One grid judged on its own runs, before any adjustment: what a grid contributes to the board, and what
    lit_resformer.verdicts.verdict_cache keeps between calls."""

    verdicts: list[Verdict]
    regime: dict
    trained_on: str

    def to_json(self) -> dict:
        return {"verdicts": [_verdict_json(v) for v in self.verdicts], "regime": self.regime,
                "trained_on": self.trained_on}

    @classmethod
    def from_json(cls, entry: dict) -> Graded:
        return cls([_verdict_from_json(v) for v in entry["verdicts"]], entry["regime"], entry["trained_on"])

    @classmethod
    def of(cls, results: GridResults, sweep: SweepAnalysis | None = None) -> Graded:
        return cls(_unadjusted_verdicts(results, sweep), grid_regime(results), results.trained_on)


class Judgements:
    """The verdicts of the grids of one index, each grid judged once. Each comparison is tested once, in one family:
    its owner's. A grid overlays runs another grid trained (the runner links them, lit_resformer.runs.identity.Twins);
    a comparison's owner is the grid that trained its `a` runs (all of them), if that grid is in the index and judges
    the same comparison (`Verdict.runs`), else the one that trained its `b` runs on the same terms, else the grid
    that shows it. Every other grid shows the owner's verdict, interval and Holm p, marked `judged_in`, and leaves it
    out of its own family. The owner is the same whichever grid asks, so no comparison has two Holm p; the families
    are built from unadjusted verdicts only, so grids that share runs with each other need no order. With a `cache`
    (lit_resformer.verdicts.verdict_cache), a grid whose runs and manifest have not changed is not judged again."""

    def __init__(self, index: Mapping[str, GridDir], cache: VerdictCache | None = None):
        self.index = dict(index)
        self.cache = cache
        self._graded: dict[str, Graded] = {}
        self._families: dict[str, list[Verdict]] = {}

    def graded(self, name: str, results: GridResults | None = None, sweep: SweepAnalysis | None = None) -> Graded:
        """Grid `name` judged on its own runs: `results` when the caller has them, else from the cache or the
        index's folder."""
        if name not in self._graded:
            if results is not None:
                self._graded[name] = Graded.of(results, sweep)
            elif self.cache is None:
                self._graded[name] = Graded.of(load_results(self.index[name]))
            else:
                key = grid_key(self.index[name])
                entry = self.cache.load(key)
                graded = Graded.from_json(entry) if entry else Graded.of(load_results(self.index[name]))
                if entry is None:
                    self.cache.store(key, graded.to_json())
                self._graded[name] = graded
        return self._graded[name]

    def unadjusted(self, name: str) -> list[Verdict]:
        return self.graded(name).verdicts

    def owner(self, v: Verdict, name: str) -> str:
        """The grid whose family tests `v` (shown in grid `name`)."""
        if v.runs is None:  # a comparison without a run identity cannot be found in another grid
            return name
        for trained in v.trained_in:
            if len(trained) != 1:
                continue
            (grid,) = trained
            if grid == name:
                return name
            if grid in self.index and any(w.runs == v.runs for w in self.unadjusted(grid)):
                return grid
        return name

    def family(self, name: str) -> list[Verdict]:
        """Grid `name`'s verdicts with its own family adjusted (Holm); those another grid owns marked `judged_in`."""
        if name not in self._families:
            marked = []
            for v in self.unadjusted(name):
                owner = self.owner(v, name)
                trained = sorted(set().union(*v.trained_in)) if v.trained_in else []
                if owner != name:
                    v = replace(v, judged_in=owner)
                elif trained and name not in trained:  # say why a comparison of another grid's runs is tested here
                    v = replace(v, note="; ".join(filter(None, [v.note, f"its runs trained in {', '.join(trained)}, "
                                                                "not among the grids given with this one: judged here"])))
                marked.append(v)
            self._families[name] = _with_power(_adjust(marked, holm, "p_holm"))
        return self._families[name]

    def verdicts(self, results: GridResults, sweep: SweepAnalysis | None = None) -> list[Verdict]:
        """A grid's verdicts as its report and the board show them (the caller's runs of it judged first)."""
        self.graded(results.name, results, sweep)
        return self.shown(results.name)

    def shown(self, name: str) -> list[Verdict]:
        """Grid `name`'s verdicts as shown: its own family's, and each comparison another grid owns with that grid's
        verdict, interval and Holm p."""
        shown = []
        for v in self.family(name):
            if not v.judged_in:
                shown.append(v)
                continue
            there = next(w for w in self.family(v.judged_in) if w.runs == v.runs)
            shown.append(replace(there, grid=v.grid, claim=v.claim, judged_in=v.judged_in, trained_in=v.trained_in,
                                 note="; ".join(filter(None, [f"judged in {v.judged_in}, which trained its runs (that "
                                                              "grid's family and Holm p)", there.note]))))
        graded = self.graded(name)
        return [replace(v, trained_on=graded.trained_on, regime=graded.regime, texts=(v.claim.claim,)) for v in shown]


def _verdict_json(v: Verdict) -> dict:
    """A verdict as JSON values, every field (what Graded.to_json stores)."""
    return {f.name: (v.claim.to_dict() if f.name == "claim" else
                     [sorted(side) for side in v.trained_in] if f.name == "trained_in" else getattr(v, f.name))
            for f in fields(Verdict)}


def _as_tuples(value):
    return tuple(_as_tuples(x) for x in value) if isinstance(value, list) else value


def _verdict_from_json(entry: dict) -> Verdict:
    return Verdict(**{**entry, "claim": Claim(**entry["claim"]), "runs": _as_tuples(entry["runs"]),
                      "trained_in": tuple(frozenset(side) for side in entry["trained_in"]),
                      "grids": tuple(entry["grids"]), "texts": tuple(entry["texts"])})


def _with_power(family: list[Verdict]) -> list[Verdict]:
    """Each verdict with its power (lit_resformer.measures.power): at its family's adjusted level, ALPHA / m for the m
    tests of the family (Holm's first step); a comparison outside the family (not tested, or judged in another grid,
    whose own power it shows) as if it were one more."""
    m = sum(v.adjustable for v in family)
    return [replace(v, power=power_of(v.design, v.n, v.df, v.low, v.high,
                                      family_level(m if v.adjustable else m + 1), effect_of_interest(v.claim),
                                      v.verdict))
            if not v.judged_in else v for v in family]


def _unadjusted_verdicts(results: GridResults, given: SweepAnalysis | None) -> list[Verdict]:
    """Every claim of the grid judged on its own runs, before any adjustment. `given` is the grid's sweep analysis
    when the caller has it; the judges get it, made here if need be, or None for a grid that is no sweep."""
    if not results.report_settings.get("scaling"):
        sweep = None
    else:
        sweep = given if given is not None else sweep_analysis(results)
    verdicts = [judging(claim).judge(claim, results, sweep) for claim in results.claims]
    if sweep is not None:
        verdicts.extend(_scaling_verdicts(results, sweep))
    return [_unless_unfinished(v, results) for v in verdicts]


def _unless_unfinished(v: Verdict, results: GridResults) -> Verdict:
    """A comparison with runs of its cells not finished at the grid's seeds (a grid merged seed by seed or slice by
    slice) is not tested until they are: its verdict is read once, on every seed the grid declared, never on the
    seeds that happened to finish first. A diverged run is finished (its divergence is a result)."""
    cells = [name for name, info in results.cell_info.items()
             if {v.claim.a, v.claim.b} & {name, info.get("family")}]
    plan = results.grid_dir.progress(cells, results.manifest.get("seeds", []))
    left = [f"{cell}/seed{seed}" for state, runs in sorted(plan.items()) if state not in FINISHED
            for cell, seed in runs]
    if not left:
        return v
    why = (f"not tested: {len(left)} of the {sum(map(len, plan.values()))} runs it compares are not finished yet "
           f"({', '.join(sorted(left))}); judged once, on every seed of the grid")
    return replace(v, verdict="not tested", unadjusted="not tested", note="; ".join(filter(None, (why, v.note))))


def _judge_pair(claim: Claim, results: GridResults,
                side_values: Callable[[Claim, dict[int, RunResult], dict[int, RunResult]], SideValues]) -> Verdict:
    """A comparison of two cells over the seeds both finished, on the per-seed values `side_values` reads from each
    side's runs (`_summary_values`, `_analysis_values`)."""
    a, b = results.done[claim.a], results.done[claim.b]
    seeds = sorted(set(a) & set(b))
    sides = {s: a[s] for s in seeds}, {s: b[s] for s in seeds}
    values = side_values(claim, *sides)
    design = seed_design(*(data_seeds(side) for side in sides))
    not_tested = values.not_tested
    if not not_tested and claim.requires == "crossing":
        not_tested = _missing_crossing(results, claim, seeds)
    runs = [*sides[0].values(), *sides[1].values()]
    if claim.a == claim.b:  # two quantities of the same runs (SAME_CELL_METRICS)
        runs = list(sides[0].values())
    judged = judge(claim, values.a, values.b, runs, results.name, "; ".join(values.notes), design, not_tested,
                   values.measured)
    if values.against and judged.unadjusted == "reproduced":  # the mean holds, not every point of the curve
        judged = replace(judged, verdict="inconclusive", unadjusted="inconclusive")
    return replace(judged, **_compared(claim, sides))


def _judge_time_to_target(claim: Claim, results: GridResults) -> Verdict:
    """a's data saving against b (lit_resformer.measures.time_to_target): per seed 1 - tokens(a) / tokens(b) to
    first reach the target (each seed's b final loss, or the claim's `target`) along the validation curve (the whole
    or one domain's), over the seeds both cells finished, with the log-ratio interval of their design; `decide`
    draws only the conclusion its bounded seeds support. The evidence gate is checked where the claim is measured:
    the runs' ends (the target is b's final loss, and a's curve is read up to its end)."""
    a, b = results.done[claim.a], results.done[claim.b]
    seeds = sorted(set(a) & set(b))
    sides = {s: a[s] for s in seeds}, {s: b[s] for s in seeds}
    runs = [*sides[0].values(), *sides[1].values()]
    compared = _compared(claim, sides)
    gate = evidence_gate([RunLosses(r.name, r.final("val_loss"), r.unigram_loss, r.bigram_loss) for r in runs])
    domain = claim.metric.removeprefix(TIME_TO_TARGET)  # "" or "/<domain>"
    try:
        res = time_to_target(results, claim.a, claim.b, target=claim.target, metric="val_loss" + domain)
    except TimeToTargetError as err:
        return Verdict(results.name, claim, "not tested", None, None, None, 0, f"not tested: {err}",
                       unadjusted="not tested", evidence=not gate.stuck, **compared)
    decided, why = decide(res, claim.direction, evidence=not gate.stuck)
    if mismatch := corpus_mismatch(runs):
        decided, why = "not tested", f"not tested: {mismatch}"
    target = (f"{claim.b}'s final validation loss{' on ' + domain[1:] if domain else ''} in each seed"
              if claim.target is None else f"validation loss{' on ' + domain[1:] if domain else ''} {claim.target:g}")
    notes = [f"saving 1 - tokens({claim.a}) / tokens({claim.b}) to first reach {target} (geometric mean over seeds; "
             "> 0: a needs less data)"]
    if gate.not_tested:
        decided, why = "not tested", f"not tested: {gate.not_tested}"
    if why.startswith("not tested"):
        notes.insert(0, why)
    elif why:
        notes.append(why)
    if gate.stuck and not gate.not_tested:
        notes.append(f"not past the unigram plateau: {', '.join(gate.stuck)}")
    if res["unmatched_seeds"]:
        notes.append(f"left out seed(s) {', '.join(map(str, res['unmatched_seeds']))}: finished by one cell only")
    if res["n"] < 2 and res["status"] != "no seeds":
        notes.append("fewer than 2 seeds")
    notes += provenance_note(runs)
    p_raw = res["p_greater"] if claim.direction == "higher" else res["p_less"]
    return Verdict(results.name, claim, decided, res["saving"], res["ci_low"], res["ci_high"], res["n"],
                   "; ".join(notes), design=res["design"] if res["saving"] is not None else "", p_raw=p_raw,
                   p_two_sided=res["p_two_sided"], unadjusted=decided, evidence=not gate.stuck, **compared)


@dataclass(frozen=True)
class SideValues:
    """Per-seed values of a claim's two cells, what to say about them, and what keeps the claim from a verdict."""

    a: dict[int, float]
    b: dict[int, float]
    notes: list[str]
    not_tested: str = ""  # a precondition that failed ("" when none did)
    against: bool = False  # a point of the curve where the claimed side does not hold (at: throughout)
    measured: dict[str, float] | None = None  # run name -> its loss where the claim is measured (evidence gate)


def _summary_values(claim: Claim, a: dict[int, RunResult], b: dict[int, RunResult]) -> SideValues:
    """The per-seed values of a val_loss or train_loss claim: the runs' final metric (`at` end), the value at the end
    of warm-up, or the mean over the validation curve after warm-up (`at: throughout`)."""
    if claim.at in ("warmup", "throughout"):
        return _curve_values(claim, a, b)
    values = [{s: v for s, run in side.items() if (v := run.final(claim.metric)) is not None} for side in (a, b)]
    notes = [] if values[0] or not a else [f"the runs logged no {claim.metric}"]
    return SideValues(*values, notes)


def _warmup_steps(runs: Iterable[RunResult]) -> int:
    """The longest warm-up of the runs (model.warmup_steps of their configs; 0 when none is recorded)."""
    return max((int(((r.config or {}).get("model") or {}).get("warmup_steps") or 0) for r in runs), default=0)


def _curve_values(claim: Claim, a: dict[int, RunResult], b: dict[int, RunResult]) -> SideValues:
    """`at: warmup`: each run's value at the first step after warm-up that every run of the comparison logged
    (an evaluation for val_loss; the smoothed training loss for train_loss). `at: throughout`: each run's mean
    validation loss over the evaluations after warm-up that every run logged, so a seed's a - b is its mean gap
    over the curve; and the mean gap over seeds at each of those evaluations must be on the claimed side for the
    claim to be reproduced (the steps where it is not are named)."""
    runs = [*a.values(), *b.values()]
    if not runs:
        return SideValues({}, {}, [])
    warmup = _warmup_steps(runs)

    def curve(run: RunResult) -> pd.Series:
        return run.train_curve(TRAIN_LOSS_WINDOW) if claim.metric == "train_loss" else run.val_curve()

    curves = {id(run): curve(run) for run in runs}
    # after warm-up, and never the untrained model's evaluation at step 0
    steps = sorted(set.intersection(*(set(c.index) for c in curves.values())) - {0})
    steps = [s for s in steps if s >= warmup]
    what = "evaluation" if claim.metric == "val_loss" else "logged step"
    if not steps:
        return SideValues({}, {}, [], f"no {what} after warm-up (step {warmup}) that every run logged")
    if claim.at == "warmup":
        step = steps[0]
        values = [{s: float(curves[id(run)][step]) for s, run in side.items()} for side in (a, b)]
        # the evidence gate at the measurement point: each run's loss at that step against its bigram reference
        measured = {run.name: float(curves[id(run)][step]) for run in runs}
        return SideValues(*values, [f"at step {step} (warm-up ends at {warmup}); evidence gate checked at that step"],
                          measured=measured)
    # the evidence gate at each evaluation used: only those where every run is below its bigram reference
    below = [step for step in steps if all(r.bigram_loss is None or float(curves[id(r)][step]) < r.bigram_loss
                                           for r in runs)]
    gated = [step for step in steps if step not in below]
    if not below:
        return SideValues({}, {}, [], f"early-training regime: no {what} after warm-up where every run is below its "
                                      "bigram reference")
    steps = below
    values = [{s: float(curves[id(run)][steps].mean()) for s, run in side.items()} for side in (a, b)]
    gaps = {step: np.mean([curves[id(r)][step] for r in a.values()]) - np.mean([curves[id(r)][step] for r in b.values()])
            for step in steps}
    claimed = -1 if claim.direction == "lower" else 1
    against = [step for step, gap in gaps.items() if claimed * gap <= 0]
    notes = [f"mean over {len(steps)} evaluations, steps {steps[0]}-{steps[-1]} (warm-up ends at {warmup})"]
    if gated:
        notes.append(f"left out {len(gated)} evaluation(s) where a run was above its bigram reference (steps "
                     f"{gated[0]}-{gated[-1]})")
    if against:
        notes.append("not " + claim.direction + " at step(s) " + ", ".join(
            f"{step} ({gaps[step]:+.4f})" for step in against))
    measured = {run.name: max(float(curves[id(run)][step]) for step in steps) for run in runs}
    return SideValues(*values, notes, against=bool(against), measured=measured)


def _analysis_values(claim: Claim, a: dict[int, RunResult], b: dict[int, RunResult]) -> SideValues:
    """The per-seed values of an analysis/<name> claim: each run's metric over its middle layers, or the two Fig. 4
    cosines within each run of one cell (SAME_CELL_METRICS); not tested when the baseline does not show the
    phenomenon the claim is about (BASELINE_PHENOMENA)."""
    if claim.metric in SAME_CELL_METRICS:
        return _fig4_values(a)
    name = claim.metric.removeprefix(ANALYSIS_PREFIX)
    values = _middle_layer_values(name, a, b)
    if not values.not_tested:
        missing = baseline_phenomenon(name, b)
        if missing:
            return replace(values, not_tested=missing)
    return values


def _middle_layer_values(name: str, a: dict[int, RunResult], b: dict[int, RunResult]) -> SideValues:
    """Each run's analysis metric `name` (claim_spec.ANALYSIS_METRICS), the mean over its middle layers; not tested
    when a run has no analysis results or lacks the metric."""
    from lit_resformer.analysis.analyze import (
        run_analysis,  # torch's import, paid only where a claim reads analyses
    )

    values: list[dict[int, float]] = [{}, {}]
    missing = []
    for side, runs in enumerate((a, b)):
        for seed, run in runs.items():
            value = analysis_value(run_analysis(run.run.path), name)
            if value is None:
                missing.append(run.name)
            else:
                values[side][seed] = value
    if missing:
        return SideValues({}, {}, [], f"no analysis results with {name} for {', '.join(missing)} (run the grid with "
                                      "--analyze, or `lit-resformer analyze` on its runs)")
    return SideValues(*values, ["mean over the middle layers (all but the first and the last)"])


def analysis_value(result: dict | None, name: str) -> float | None:
    """One run's analysis metric: the per-layer curve (ANALYSIS_METRICS) averaged over the middle layers, where the
    paper's concentration is (Figs. 1, 2, 12): every layer but the first and the last (all layers of a model with
    two or fewer); None when the result lacks it."""
    if result is None:
        return None
    if name.startswith("first_token_"):
        from lit_resformer.analysis.plots import first_token_ratio

        kind = name.removeprefix("first_token_")
        curve = first_token_ratio(result, kind) if f"{kind}_first" in result else None
    else:
        curve = result.get(name)
    if not curve:
        return None
    middle = curve[1:-1] if len(curve) > 2 else curve
    finite = [v for v in middle if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else None


# The phenomenon a mechanism claim is about, which the baseline must show at the paper's thresholds
# (configs/claims.yaml preconditions baseline-sink / -drain / -peak, citing Fig. 2): metric -> (precondition id,
# extreme over layers, comparison, threshold, words).
BASELINE_PHENOMENA = {
    "first_token_importance": ("baseline-sink", max, ">=", 10.0, "sink: first token's importance >= 10x the others'"),
    "first_token_value_norm": ("baseline-drain", min, "<=", 0.5, "value-state drain: first token's value norm <= "
                                                                  "0.5x the others'"),
    "first_token_hidden_norm": ("baseline-peak", max, ">=", 3.0, "hidden-state peak: first token's hidden norm >= 3x "
                                                                 "the others'"),
}


def baseline_phenomenon(name: str, baseline: dict[int, RunResult]) -> str:
    """"" when the baseline's runs show the phenomenon `name` is about (BASELINE_PHENOMENA: the mean over its seeds of
    the per-run extreme over layers, at the paper's threshold), else why the claim is not tested."""
    if name not in BASELINE_PHENOMENA or not baseline:
        return ""
    from lit_resformer.analysis.analyze import run_analysis
    from lit_resformer.analysis.plots import first_token_ratio

    _, extreme, op, threshold, words = BASELINE_PHENOMENA[name]
    kind = name.removeprefix("first_token_")
    per_run = []
    for run in baseline.values():
        result = run_analysis(run.run.path)
        curve = first_token_ratio(result, kind) if result and f"{kind}_first" in result else None
        finite = [v for v in (curve or []) if v is not None and math.isfinite(v)]
        if finite:
            per_run.append(extreme(finite))
    if not per_run:
        return ""
    value = float(np.mean(per_run))
    shows = value >= threshold if op == ">=" else value <= threshold
    if shows:
        return ""
    what = {"importance": "sink", "value_norm": "value-state drain", "hidden_norm": "hidden-state peak"}[kind]
    return (f"the baseline shows no {what} (its {'largest' if extreme is max else 'smallest'} per-layer ratio, mean "
            f"over {len(per_run)} seeds, is {value:.2f}; the paper's {words.split(': ', 1)[1]})")


def _fig4_values(runs: dict[int, RunResult]) -> SideValues:
    """Fig. 4 within each run: a's side the mean over layers 2..L of the cosine of the Eq. 2 output to the Eq. 4
    output, b's side to the Eq. 6 output (analysis fig4_cos_eq4 / fig4_cos_eq6, m = n-1); paired by run."""
    from lit_resformer.analysis.analyze import run_analysis

    values: list[dict[int, float]] = [{}, {}]
    missing = []
    for seed, run in runs.items():
        result = run_analysis(run.run.path) or {}
        pair = [[v for v in (result.get(key) or []) if v is not None and math.isfinite(v)]
                for key in ("fig4_cos_eq4", "fig4_cos_eq6")]
        if not all(pair):
            missing.append(run.name)
            continue
        values[0][seed], values[1][seed] = (float(np.mean(curve)) for curve in pair)
    if missing:
        return SideValues({}, {}, [], f"no Fig. 4 analysis results for {', '.join(missing)} (`lit-resformer analyze`)")
    return SideValues(*values, ["per run: mean over layers 2..L of cos(Eq. 2, Eq. 4) vs cos(Eq. 2, Eq. 6), m = n-1"])


def _declared_saving(claim: Claim, results: GridResults, sweep: SweepAnalysis | None) -> Verdict:
    """A grid's own equivalence-saving claim (e.g. SVFormer's parameter increase): judged on the sweep's per-seed
    fitted saving of that variant (the same fit, interval and rule as the paper's headline claim); not tested when
    the grid is no sweep or the fit has no saving for the variant."""
    mean = None
    fit = sweep.fit if sweep is not None else None
    if fit is not None:
        convention = fit["conventions"][0]
        mean = ((fit.get("savings") or {}).get(convention) or {}).get(claim.a, {}).get("mean")
    if not mean or mean.get("saving") is None:
        reason = ("this grid is not a size or token sweep (report.scaling)" if not results.report_settings.get("scaling")
                  else f"the sweep's fit has no saving for {claim.a}"
                  + (f" ({sweep.problem})" if sweep is not None and sweep.problem is not None else ""))
        return Verdict(results.name, claim, "not tested", None, None, None, 0, f"not tested: {reason}",
                       unadjusted="not tested")
    families = {claim.a, claim.b}
    runs = [r for cell, by_seed in results.done.items() if results.cell_info[cell].get("family") in families
            for r in by_seed.values()]
    gate = evidence_gate([RunLosses(r.name, r.final("val_loss"), r.unigram_loss, r.bigram_loss) for r in runs])
    if gate.not_tested:
        return Verdict(results.name, claim, "not tested", mean["saving"], mean["ci_low"], mean["ci_high"], mean["n"],
                       f"not tested: {gate.not_tested}", design="per-seed", p_two_sided=mean.get("p_two_sided"),
                       unadjusted="not tested")
    decided = verdict(mean["ci_low"], mean["ci_high"], mean["n"], claim.direction, evidence=not gate.stuck)
    p_two = mean.get("p_two_sided")
    notes = [f"per-seed fitted saving of {claim.a} over {CONVENTION_NOTE}; > 0 = fewer parameters than "
             f"{claim.b}, the paper's 12.2% more parameters is -0.109"]
    if mean.get("no_interval"):
        notes.append(str(mean["no_interval"]))
    return Verdict(results.name, claim, decided, mean["saving"], mean["ci_low"], mean["ci_high"], mean["n"],
                   "; ".join(notes), design="per-seed", p_raw=None, p_two_sided=p_two, unadjusted=decided)


CONVENTION_NOTE = "the sweep's ladder (lit_resformer.measures.scaling, the paper's parameter count)"


def _adjust(verdicts: list[Verdict], method, field_name: str) -> list[Verdict]:
    """The verdicts with `field_name` set to the family's adjusted p-values (`method`: stats.holm or
    another family-wise rule) and their verdicts decided on them; the tests that did not run keep theirs."""
    family = [i for i, v in enumerate(verdicts) if v.adjustable]
    adjusted = dict(zip(family, method([verdicts[i].p_two_sided for i in family]), strict=True))
    return [replace(v, **{field_name: float(adjusted[i])}, verdict=adjusted_verdict(v.unadjusted, float(adjusted[i])))
            if i in adjusted else v for i, v in enumerate(verdicts)]


def _compared(claim: Claim, sides: Sequence[dict[int, RunResult]]) -> dict:
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
        resolved = [_resolved_config(run) for run in side.values()]
        if any(config is None for config in resolved):
            return None
        configs.append(tuple(sorted(json.dumps(identity.run_identity(config), sort_keys=True) for config in resolved)))
    return (claim.metric, claim.direction, claim.over, claim.at, claim.target, claim.margin, claim.requires, *configs)


def _resolved_config(run: RunResult) -> dict | None:
    """The run's config as Lightning resolved it (config.yaml; the grid's experiment config when there is none)."""
    config_file = run.run.config_file
    return yaml.safe_load(config_file.read_text()) if config_file.is_file() else run.config


def _is_svformer(run: RunResult) -> bool:
    share = ((run.config or {}).get("model") or {}).get("config", {}).get("share")
    return isinstance(share, dict) and bool(share.get("svformer"))


def _missing_crossing(results: GridResults, claim: Claim, seeds: Sequence[int]) -> str:
    """Why a claim about SVFormer after vanilla overtakes it cannot be tested on these runs ("" when it can): each
    SVFormer run of the comparison needs the grid's baseline run at the same matrix point and seed to have
    overtaken it for good in training loss (stats.critical_point)."""
    window = results.report_settings.get("critical_point_window", 10)
    info = results.cell_info
    baseline_family = info[results.manifest["baseline"]]["family"]
    not_crossed = []
    for cell in (claim.a, claim.b):
        runs = {s: results.done[cell][s] for s in seeds}
        if not any(_is_svformer(run) for run in runs.values()):
            continue
        twin = next((c for c, i in info.items() if i["family"] == baseline_family and i["coords"] == info[cell]["coords"]),
                    None)
        if twin is None or twin == cell:
            return f"no {results.manifest['baseline']} run beside {cell} to show the crossing"
        curves = relative_curves(runs, {s: results.done[twin][s] for s in seeds if s in results.done[twin]}, window)
        not_crossed += [f"{cell}/seed{s}" for s in seeds if s not in curves or critical_point(curves[s]) is None]
    return f"{results.manifest['baseline']} never overtakes " + ", ".join(not_crossed) if not_crossed else ""


def _scaling_verdicts(results: GridResults, sweep: SweepAnalysis) -> list[Verdict]:
    """A size or token sweep's claims (fewer parameters / less data for the same loss), judged on the CI of the
    fitted equivalence saving by the same rule; a sweep that cannot be fitted yet says why."""
    variant, text = PAPER_CLAIMS[results.report_settings["scaling"]]
    baseline = results.manifest["baseline"]
    if sweep.problem is not None:
        claim = Claim(text, variant, baseline, EQUIVALENCE_SAVING, "higher")
        return [Verdict(results.name, claim, "inconclusive", None, None, None, 0, f"no fit: {sweep.problem}",
                        unadjusted="inconclusive")]
    # the fit's claims carry the per-seed t test's p-values, so they enter the grid's and the scoreboard's
    # adjustment for multiple comparisons like every other claim
    return [Verdict(r["grid"], Claim(r["claim"], variant, baseline, EQUIVALENCE_SAVING, "higher"),
                    r["verdict"], r["delta"], r["ci_low"], r["ci_high"], r["n"], r["note"], unadjusted=r["verdict"],
                    design=r.get("design", ""), p_raw=r.get("p_raw"), p_two_sided=r.get("p_two_sided"))
            for r in sweep.fit["claims"]]


def _judge_over(claim: Claim, results: GridResults,
                slopes: Callable[[dict, dict, list[int], int], tuple[dict[int, float], list[str], str]]) -> Verdict:
    """A claim across a matrix key (`over`): one estimate per seed from that seed's runs at every matrix point
    (`slopes`), then the one-sample t over seeds. critical_point_growth: the slope of log2(1 + critical step)
    against log2(over) (`_growth_slopes`); val_loss_gap_slope: the least-squares slope of the final validation loss
    gap a - b against log2(over) (`_gap_slopes`; below zero: a gains on b as `over` grows)."""
    window = results.report_settings.get("critical_point_window", 10)
    cells = results.manifest["cells"]
    pairs = {}  # value of `over` -> (a cell, b cell) at the same matrix point
    for cell in cells:
        if cell["family"] == claim.a:
            twin = next(c["name"] for c in cells if c["family"] == claim.b and c["coords"] == cell["coords"])
            pairs[cell["coords"][claim.over]] = (cell["name"], twin)
    runs = {name: results.done[name] for pair in pairs.values() for name in pair}
    seeds = sorted(set.intersection(*(set(r) for r in runs.values())))
    estimates, notes, not_tested = slopes(pairs, runs, seeds, window)
    in_comparison = [runs[name][s] for name in runs for s in seeds]
    judged = judge(claim, estimates, None, in_comparison, results.name, "; ".join(notes), not_tested=not_tested)
    return replace(judged, **_compared(claim, [{s: runs[name][s] for s in seeds} for name in sorted(runs)]))


def _growth_slopes(pairs: dict, runs: dict, seeds: list[int],
                   window: int) -> tuple[dict[int, float], list[str], str]:
    """Per-seed slopes, notes, and the failed precondition: a seed whose baseline never overtakes the cell at a
    short length has no critical point to grow from, and leaving it out would keep only the seeds that crossed
    early, so the claim is not tested then (as `_missing_crossing` does for a comparison)."""
    slopes, censored, not_crossed, no_curve = {}, [], [], []
    for seed in seeds:
        points = [(value, relative_curves({seed: runs[a][seed]}, {seed: runs[b][seed]}, window)[seed])
                  for value, (a, b) in pairs.items()]
        slope, is_censored = critical_point_growth(points)
        if slope is None:
            (not_crossed if is_censored else no_curve).append(f"seed{seed}")
            continue
        slopes[seed] = slope
        if is_censored:
            censored.append(f"seed{seed}")
    notes = []
    if censored:
        notes.append(f"critical point not reached at the longest length(s) in {', '.join(censored)} (last step used "
                     "as a lower bound)")
    if no_curve:
        notes.append(f"left out {', '.join(no_curve)}: no training curve")
    cell, baseline = pairs[min(pairs)]
    not_tested = (f"{baseline} never overtakes {cell} (or another short length's cell) within the runs' budget in "
                  f"{', '.join(not_crossed)}" if not_crossed else "")
    return slopes, notes, not_tested


def _gap_slopes(pairs: dict, runs: dict, seeds: list[int], window: int) -> tuple[dict[int, float], list[str], str]:
    slopes, left_out = {}, []
    for seed in seeds:
        points = [(math.log2(value), runs[a][seed].final("val_loss"), runs[b][seed].final("val_loss"))
                  for value, (a, b) in sorted(pairs.items())]
        if any(va is None or vb is None for _, va, vb in points):
            left_out.append(f"seed{seed}")
            continue
        slopes[seed] = float(np.polyfit([x for x, _, _ in points], [va - vb for _, va, vb in points], 1)[0])
    notes = [f"left out {', '.join(left_out)}: a run logged no final validation loss"] if left_out else []
    return slopes, notes, ""


# ----------------------------------------------------------------------------------------------
# the metric kinds: how a claim of each is judged and shown


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:+.4f}"


def _fmt_pct(value: float | None) -> str:
    """A fraction (time_to_target's data saving) as a signed percentage."""
    return "–" if value is None else ("−∞" if value == -math.inf else f"{100 * value:+.1f}%")


def _summary_label(claim: Claim) -> str:
    where = {"warmup": " at the end of warm-up", "throughout": " at every evaluation after warm-up"}.get(claim.at, "")
    if claim.margin is not None:
        bound = claim.margin if claim.direction == "lower" else -claim.margin
        return f"{claim.metric}{where} ({claim.direction} than {bound:+.4f}: a margin, not zero)"
    return f"{claim.metric}{where} ({claim.direction})"


def _analysis_label(claim: Claim) -> str:
    # Fig. 4's two cosines are averaged over layers 2..L (each against the previous one), the others over the middle
    where = "layers 2..L" if claim.metric in SAME_CELL_METRICS else "middle layers"
    return (f"{claim.metric}, {where}: {ANALYSIS_METRICS[claim.metric.removeprefix(ANALYSIS_PREFIX)]} "
            f"({claim.direction})")


def _time_to_target_label(claim: Claim) -> str:
    curve = claim.metric.replace(TIME_TO_TARGET, "val_loss", 1)
    target = "b's final loss" if claim.target is None else f"loss {claim.target:g}"
    return (f"{claim.metric}: data saving 1 − tokens(a)/tokens(b) to reach {target} on the {curve} curve, "
            f"fraction (> 0 = a needs less data; {claim.direction})")


@dataclass(frozen=True)
class Judging:
    """How a claim of one metric kind (lit_resformer.runs.claim_spec.METRIC_KINDS, under the same key) is judged
    and shown."""

    judge: Callable[[Claim, GridResults, SweepAnalysis | None], Verdict]  # its unadjusted verdict on a grid's runs
    label: Callable[[Claim], str]  # what the tables' metric column says it measures
    format_value: Callable[[float | None], str] = _fmt  # its Δ and interval: signed (nats, a slope), or a percentage


# One entry per metric kind: a new kind is an entry here and its entry in claim_spec.METRIC_KINDS.
JUDGING = {
    "summary": Judging(lambda claim, results, _sweep: _judge_pair(claim, results, _summary_values), _summary_label),
    CRITICAL_POINT_GROWTH: Judging(
        lambda claim, results, _sweep: _judge_over(claim, results, _growth_slopes),
        lambda claim: f"slope of log2 critical step vs log2 {claim.over} ({claim.direction})"),
    GAP_SLOPE: Judging(
        lambda claim, results, _sweep: _judge_over(claim, results, _gap_slopes),
        lambda claim: f"slope of final val_loss gap (a − b) vs log2 {claim.over} ({claim.direction})"),
    "analysis": Judging(lambda claim, results, _sweep: _judge_pair(claim, results, _analysis_values), _analysis_label),
    EQUIVALENCE_SAVING: Judging(_declared_saving,
                                lambda claim: f"fitted equivalence saving, fraction ({claim.direction})"),
    TIME_TO_TARGET: Judging(lambda claim, results, _sweep: _judge_time_to_target(claim, results),
                            _time_to_target_label, format_value=_fmt_pct),
    # the kinds of a select block's chosen points and of a ladder (lit_resformer.verdicts.tuning, .budgets)
    **{kind: Judging(lambda claim, results, _sweep: tuning.judge_at_chosen(claim, results, judge, _compared),
                     tuning.at_chosen_label) for kind in (EACH_AT_BEST, AT_B_BEST)},
    GAP_DEPENDENCE: Judging(lambda claim, results, _sweep: tuning.judge_gap_dependence(claim, results, judge, _compared),
                            tuning.gap_dependence_label),
    DATA_SAVING_SLOPE: Judging(lambda claim, results, _sweep: budgets.judge_saving_slope(claim, results, judge,
                                                                                          _compared),
                               budgets.saving_slope_label, format_value=_fmt_pct),
}


def judging(claim: Claim) -> Judging:
    """The record of the claim's metric kind (its metric was checked when its grid loaded)."""
    return JUDGING[metric_kind(claim.metric).key]


# ----------------------------------------------------------------------------------------------
# the scoreboard


def scoreboard(paths: Iterable[str | Path], judged: Judgements | None = None) -> list[Verdict]:
    """Every grid's verdicts, each distinct comparison once (one row naming every grid it was seen in), each with
    exactly its grid's verdict and Holm-adjusted p (the suite's one error-control rule: Holm within each grid's family
    of claims; no second adjustment across the board). A comparison an overlay shares shows the verdict of the grid
    that trained its runs (evaluate_grid). Runs of one config trained twice, each in its own grid, are judged in
    each; where those verdicts would differ the row takes the most conservative (largest Holm p) and says so in
    `disagree` (no committed comparison does: tests/verdicts/test_paper_claims.py). The grids it may defer to are
    exactly those under `paths` (grid_index); `judged` is filled with each grid's verdicts, each judged once."""
    rows: list[Verdict] = []
    seen: dict[tuple, int] = {}
    index = grid_index(grid_dirs(paths))
    judged = Judgements(index, VerdictCache()) if judged is None else judged
    for name in index:
        verdicts = judged.shown(name)
        for v in verdicts:
            if v.runs is not None and v.runs in seen:
                first = rows[seen[v.runs]]
                # the row speaks in the words of a grid that states the paper's effect, wherever that grid sorts
                claim = v.claim if first.claim.paper is None and v.claim.paper is not None else first.claim
                merged = replace(first, claim=claim, grids=(*first.grids, v.grid), texts=(*first.texts, *v.texts))
                if v.verdict != first.verdict or first.disagree:
                    worst = max((first, v), key=lambda x: -1 if x.p_holm is None else x.p_holm)
                    said = first.disagree or f"{first.grid}: {first.verdict}"
                    merged = replace(merged, verdict=worst.verdict, p_holm=worst.p_holm,
                                     disagree=f"{said}; {v.grid}: {v.verdict}")
                elif v.p_holm is not None and (first.p_holm is None or v.p_holm > first.p_holm):
                    merged = replace(merged, p_holm=v.p_holm)
                rows[seen[v.runs]] = merged
                continue
            if v.runs is not None:
                seen[v.runs] = len(rows)
            rows.append(replace(v, grids=(v.grid,)))
    return _sub_rows_under_their_claims(rows)


def _sub_rows_under_their_claims(rows: list[Verdict]) -> list[Verdict]:
    """Each per-domain sub-row right under the claim it splits (the same sides and grid, on the whole validation
    loss), also when that claim's row was first seen in another grid; a sub-row without one stays where it is."""
    def parent_of(sub: Verdict) -> int | None:
        return next((i for i, v in enumerate(rows) if not is_sub_row(v) and v.claim.metric == "val_loss"
                     and (v.claim.a, v.claim.b) == (sub.claim.a, sub.claim.b) and sub.grid in (v.grids or (v.grid,))),
                    None)

    parents = {id(v): parent_of(v) for v in rows if is_sub_row(v)}
    ordered = []
    for i, v in enumerate(rows):
        if is_sub_row(v) and parents[id(v)] is not None:
            continue
        ordered.append(v)
        ordered += [sub for sub in rows if is_sub_row(sub) and parents[id(sub)] == i]
    return ordered


def is_sub_row(v: Verdict) -> bool:
    """A per-domain result: a sub-row of its claim, not a claim of its own on the scoreboard."""
    return v.claim.metric.startswith(DOMAIN_PREFIX)
