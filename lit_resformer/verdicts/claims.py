"""The paper's claims judged on a grid's runs, and the scoreboard across grids. The claims are declared in the grid
file (lit_resformer.grids.claim_spec); a size or token sweep adds its scaling claim (lit_resformer.verdicts.scaling).

Metrics (lit_resformer.grids.claim_spec), per seed: `val_loss` is the final validation loss (the mean over domains),
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
(`analysis_value`); without them the claim is not tested. A grid's own `equivalence_saving` claim is not tested
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
                baseline never overtakes the cell at a short length in some seed, or the runs lack what the metric
                reads (analysis results, an evaluation after warm-up).
Many comparisons are tested at once, so by chance alone some would pass: the p-values are adjusted for that.
A grid's report adjusts within the grid (Holm, `p_holm`: no false verdict in the figure with 95% probability);
the scoreboard adjusts across its distinct claims (Benjamini-Hochberg, `p_bh`: at most 5% of its decisive
verdicts false on average), and per-domain sub-rows keep their grid's Holm p-value. A sweep's scaling claim is
judged on the t test over its per-seed fitted savings (lit_resformer.verdicts.scaling) and adjusted like the others.
Each verdict carries the paper's own effect (`paper:`) where the claim gives it, and its grid's regime
(`grid_regime`: parameters, tokens, tokens per parameter, final losses against the unigram and bigram references).
Claims from outside the paper (`beyond_paper: true`) stand in their own section of the scoreboard.
A comparison whose runs differ in what they ran on (library versions, device, precision, code version: their
summaries' provenance) says so in its note.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from lit_resformer.analysis.analyze import run_analysis
from lit_resformer.analysis.plots import first_token_ratio
from lit_resformer.grids.claim_spec import (
    ANALYSIS_METRICS,
    ANALYSIS_PREFIX,
    CRITICAL_POINT_GROWTH,
    EQUIVALENCE_SAVING,
    GAP_SLOPE,
    OVER_METRICS,
    Claim,
)
from lit_resformer.grids.directory import grid_dirs
from lit_resformer.grids.summary import TRAIN_LOSS_WINDOW
from lit_resformer.verdicts.results import (
    GridResults,
    RunResult,
    load_results,
    provenance_differences,
    relative_curves,
)
from lit_resformer.verdicts.scaling import PAPER_CLAIMS, ScalingError, analyse_grid
from lit_resformer.verdicts.stats import (
    VERDICTS,
    RunLosses,
    adjusted_verdict,
    benjamini_hochberg,
    compare_seeds,
    critical_point,
    critical_point_growth,
    evidence_gate,
    holm,
    per_seed_t,
    run_data_seed,
    seed_design,
    verdict,
)
from lit_resformer.writing import markdown_table

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
    p_bh: float | None = None  # the two-sided p adjusted across the scoreboard (None for sub-rows and lone grids)
    unadjusted: str = ""  # the verdict before adjustment for multiple comparisons
    grids: tuple[str, ...] = ()  # every grid the same comparison was seen in (the scoreboard's rows)
    evidence: bool = True  # every run in the comparison is past the unigram plateau
    regime: dict = field(default_factory=dict, compare=False)  # the grid's regime (grid_regime)
    runs: tuple | None = field(default=None, compare=False, repr=False)  # identity of the runs compared

    @property
    def adjustable(self) -> bool:
        """Whether its test enters a family of adjusted p-values: it ran on runs that are evidence, and was tested."""
        # a p-value is NaN when both sides are identical on every seed (no variance): there is no test to adjust
        return (self.p_two_sided is not None and math.isfinite(self.p_two_sided) and self.unadjusted != "not tested"
                and self.evidence)

    def to_dict(self) -> dict:
        return {"grid": self.grid, "grids": list(self.grids or (self.grid,)), **self.claim.to_dict(),
                "verdict": self.verdict, "verdict_unadjusted": self.unadjusted, "design": self.design,
                "delta": self.delta, "ci_low": self.low, "ci_high": self.high, "n": self.n, "p_raw": self.p_raw,
                "p_two_sided": self.p_two_sided, "p_holm": self.p_holm, "p_bh": self.p_bh, "note": self.note,
                "trained_on": self.trained_on, "regime": self.regime}


def data_seeds(runs: dict[int, RunResult]) -> dict[int, int | None]:
    """seed -> the data order of that seed's run (stats.run_data_seed of its config; None when unknown)."""
    return {seed: run_data_seed(run.config) if run.config else None for seed, run in runs.items()}


def judge(claim: Claim, per_seed_a: dict[int, float], per_seed_b: dict[int, float] | None,
          runs: Sequence[RunResult], grid: str, note: str = "", design: str = "per-seed",
          not_tested: str = "") -> Verdict:
    """The unadjusted verdict on per-seed values: a difference a − b in `design` (b given) or one estimate per seed
    (b None, per-seed). `not_tested` is the reason a precondition failed ("" when none did)."""
    claimed = "less" if claim.direction == "lower" else "greater"
    notes = [note] if note else []
    gate = evidence_gate([RunLosses(r.name, r.final("val_loss"), r.unigram_loss, r.bigram_loss) for r in runs])
    stuck = gate.stuck
    if gate.not_tested:
        not_tested = gate.not_tested
    elif stuck:
        notes.append(f"not past the unigram plateau: {', '.join(stuck)}")
    notes += provenance_note(runs)
    if not per_seed_a or (per_seed_b is not None and not per_seed_b):
        decided = "not tested" if not_tested else "inconclusive"
        if not_tested:
            notes.insert(0, f"not tested: {not_tested}")
        else:
            notes.append("no seed gave a value" if runs else "no finished runs")
        return Verdict(grid, claim, decided, None, None, None, 0, "; ".join(notes), unadjusted=decided)
    if per_seed_b is None:
        two_sided, one_sided = (per_seed_t(list(per_seed_a.values()), alt) for alt in ("two-sided", claimed))
    else:
        two_sided, one_sided = (compare_seeds(per_seed_a, per_seed_b, design, alt) for alt in ("two-sided", claimed))
    if two_sided.n < 2:
        notes.append("fewer than 2 seeds")
    if not_tested:
        notes.insert(0, f"not tested: {not_tested}")
        decided = "not tested"
    else:
        decided = verdict(two_sided.low, two_sided.high, two_sided.n, claim.direction, not stuck)
    return Verdict(grid, claim, decided, two_sided.estimate, two_sided.low, two_sided.high, two_sided.n,
                   "; ".join(notes), design=two_sided.design, p_raw=one_sided.p, p_two_sided=two_sided.p,
                   unadjusted=decided, evidence=not stuck)


def provenance_note(runs: Iterable[RunResult]) -> list[str]:
    """The notes of a comparison whose runs ran on different things (versions, device, precision, code), or
    whose provenance is known for some runs only."""
    differences, unrecorded = provenance_differences(runs)
    notes = []
    if differences:
        shown = "; ".join(f"{field} {' vs '.join(values)}" for field, values in differences.items())
        notes.append(f"runs differ in what they ran on: {shown}")
    if unrecorded:
        notes.append(f"what {', '.join(sorted(unrecorded))} ran on was not recorded")
    return notes


def evaluate_grid(grid: str | Path | GridResults, sweep: dict | ScalingError | None = None) -> list[Verdict]:
    """Verdicts on every claim of a grid's runs (its manifest lists them), decided on p-values adjusted within the
    grid (Holm). `sweep` is the scaling analysis of a sweep grid (lit_resformer.verdicts.scaling.analyse_grid) when the caller
    has it already, else it is made here."""
    results = grid if isinstance(grid, GridResults) else load_results(grid)
    verdicts = []
    for claim in results.claims:
        if claim.metric in OVER_METRICS:
            verdicts.append(_judge_over(claim, results))
        elif claim.metric == EQUIVALENCE_SAVING:
            verdicts.append(_declared_saving(claim, results))
        else:
            verdicts.append(_judge_pair(claim, results))
    if results.report_settings.get("scaling"):
        verdicts.extend(_scaling_verdicts(results, sweep))
    regime = grid_regime(results)
    return [replace(v, trained_on=results.trained_on, regime=regime) for v in _adjust(verdicts, holm, "p_holm")]


def _judge_pair(claim: Claim, results: GridResults) -> Verdict:
    """A comparison of two cells over the seeds both finished, on per-seed values (`_side_values`)."""
    a, b = results.done[claim.a], results.done[claim.b]
    seeds = sorted(set(a) & set(b))
    sides = {s: a[s] for s in seeds}, {s: b[s] for s in seeds}
    values = _side_values(claim, *sides)
    design = seed_design(*(data_seeds(side) for side in sides))
    not_tested = values.not_tested
    if not not_tested and claim.requires == "crossing":
        not_tested = _missing_crossing(results, claim, seeds)
    judged = judge(claim, values.a, values.b, [*sides[0].values(), *sides[1].values()], results.name,
                   "; ".join(values.notes), design, not_tested)
    if values.against and judged.unadjusted == "reproduced":  # the mean holds, not every point of the curve
        judged = replace(judged, verdict="inconclusive", unadjusted="inconclusive")
    return replace(judged, runs=_identity(claim, sides))


@dataclass(frozen=True)
class SideValues:
    """Per-seed values of a claim's two cells, what to say about them, and what keeps the claim from a verdict."""

    a: dict[int, float]
    b: dict[int, float]
    notes: list[str]
    not_tested: str = ""  # a precondition that failed ("" when none did)
    against: bool = False  # a point of the curve where the claimed side does not hold (at: throughout)


def _side_values(claim: Claim, a: dict[int, RunResult], b: dict[int, RunResult]) -> SideValues:
    """The per-seed values a claim is judged on: the runs' final metric (`at` end), the value at the end of warm-up,
    the mean over the validation curve after warm-up (`at: throughout`), or an analysis metric."""
    if claim.metric.startswith(ANALYSIS_PREFIX):
        return _analysis_values(claim.metric.removeprefix(ANALYSIS_PREFIX), a, b)
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
        return SideValues(*values, [f"at step {step} (warm-up ends at {warmup})"])
    values = [{s: float(curves[id(run)][steps].mean()) for s, run in side.items()} for side in (a, b)]
    gaps = {step: np.mean([curves[id(r)][step] for r in a.values()]) - np.mean([curves[id(r)][step] for r in b.values()])
            for step in steps}
    claimed = -1 if claim.direction == "lower" else 1
    against = [step for step, gap in gaps.items() if claimed * gap <= 0]
    notes = [f"mean over {len(steps)} evaluations, steps {steps[0]}-{steps[-1]} (warm-up ends at {warmup})"]
    if against:
        notes.append("not " + claim.direction + " at step(s) " + ", ".join(
            f"{step} ({gaps[step]:+.4f})" for step in against))
    return SideValues(*values, notes, against=bool(against))


def _analysis_values(name: str, a: dict[int, RunResult], b: dict[int, RunResult]) -> SideValues:
    """Each run's analysis metric `name` (claim_spec.ANALYSIS_METRICS), the mean over its middle layers; not tested
    when a run has no analysis results or lacks the metric."""
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
        kind = name.removeprefix("first_token_")
        curve = first_token_ratio(result, kind) if f"{kind}_first" in result else None
    else:
        curve = result.get(name)
    if not curve:
        return None
    middle = curve[1:-1] if len(curve) > 2 else curve
    finite = [v for v in middle if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else None


def _declared_saving(claim: Claim, results: GridResults) -> Verdict:
    """A grid's own equivalence-saving claim (e.g. SVFormer's parameter increase): the scaling fit
    (lit_resformer.verdicts.scaling) judges only the paper's claim for the sweep (PAPER_CLAIMS), so any other is not tested."""
    kind = results.report_settings.get("scaling")
    judged_variant = PAPER_CLAIMS[kind][0] if kind in PAPER_CLAIMS else None
    if judged_variant is None:
        reason = "this grid is not a size or token sweep (report.scaling)"
    else:
        reason = (f"needs an {claim.a} size-ladder fit: the scaling fit (lit_resformer.verdicts.scaling) judges only "
                  f"{judged_variant}'s saving")
    return Verdict(results.name, claim, "not tested", None, None, None, 0, f"not tested: {reason}",
                   unadjusted="not tested")


def _adjust(verdicts: list[Verdict], method, field_name: str) -> list[Verdict]:
    """The verdicts with `field_name` set to the family's adjusted p-values (`method`: stats.holm or
    stats.benjamini_hochberg) and their verdicts decided on them; the tests that did not run keep theirs."""
    family = [i for i, v in enumerate(verdicts) if v.adjustable]
    adjusted = dict(zip(family, method([verdicts[i].p_two_sided for i in family]), strict=True))
    return [replace(v, **{field_name: float(adjusted[i])}, verdict=adjusted_verdict(v.unadjusted, float(adjusted[i])))
            if i in adjusted else v for i, v in enumerate(verdicts)]


OUTPUT_LOCATIONS = {"dirpath", "default_root_dir", "save_dir"}  # where a run wrote, not what it ran


def _identity(claim: Claim, sides: Sequence[dict[int, RunResult]]) -> tuple | None:
    """What makes two comparisons the same: the metric, direction and the resolved configs (seed included, the
    places it wrote to left out) of the runs on each side; None when a run has no recorded config (then it is only
    itself)."""
    configs = []
    for side in sides:
        resolved = [_resolved_config(run) for run in side.values()]
        if any(config is None for config in resolved):
            return None
        configs.append(tuple(sorted(json.dumps(config, sort_keys=True) for config in resolved)))
    return (claim.metric, claim.direction, claim.over, claim.at, *configs)


def _resolved_config(run: RunResult) -> dict | None:
    """The run's config as Lightning resolved it (config.yaml; the grid's experiment config when there is none),
    without the output locations, which differ between grids that ran the same thing."""
    config_file = run.run.config_file
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else run.config

    def without_locations(value):
        if isinstance(value, dict):
            return {k: without_locations(v) for k, v in value.items() if k not in OUTPUT_LOCATIONS}
        if isinstance(value, list):
            return [without_locations(v) for v in value]
        return value

    return None if config is None else without_locations(config)


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


def _scaling_verdicts(results: GridResults, sweep: dict | ScalingError | None) -> list[Verdict]:
    """A size or token sweep's claims (fewer parameters / less data for the same loss), judged on the CI of the
    fitted equivalence saving by the same rule; a sweep that cannot be fitted yet says why."""
    variant, text = PAPER_CLAIMS[results.report_settings["scaling"]]
    baseline = results.manifest["baseline"]
    if sweep is None:
        try:
            sweep = analyse_grid(results)
        except ScalingError as err:
            sweep = err
    if isinstance(sweep, ScalingError):
        claim = Claim(text, variant, baseline, EQUIVALENCE_SAVING, "higher")
        return [Verdict(results.name, claim, "inconclusive", None, None, None, 0, f"no fit: {sweep}",
                        unadjusted="inconclusive")]
    # the fit's claims carry the per-seed t test's p-values, so they enter the grid's and the scoreboard's
    # adjustment for multiple comparisons like every other claim
    return [Verdict(r["grid"], Claim(r["claim"], variant, baseline, EQUIVALENCE_SAVING, "higher"),
                    r["verdict"], r["delta"], r["ci_low"], r["ci_high"], r["n"], r["note"], unadjusted=r["verdict"],
                    design=r.get("design", ""), p_raw=r.get("p_raw"), p_two_sided=r.get("p_two_sided"))
            for r in sweep["claims"]]


def _judge_over(claim: Claim, results: GridResults) -> Verdict:
    """A claim across a matrix key (`over`): one estimate per seed from that seed's runs at every matrix point,
    then the one-sample t over seeds. critical_point_growth: the slope of log2(1 + critical step) against
    log2(over) (stats.critical_point_growth); val_loss_gap_slope: the least-squares slope of the final validation
    loss gap a - b against log2(over) (below zero: a gains on b as `over` grows)."""
    window = results.report_settings.get("critical_point_window", 10)
    cells = results.manifest["cells"]
    pairs = {}  # value of `over` -> (a cell, b cell) at the same matrix point
    for cell in cells:
        if cell["family"] == claim.a:
            twin = next(c["name"] for c in cells if c["family"] == claim.b and c["coords"] == cell["coords"])
            pairs[cell["coords"][claim.over]] = (cell["name"], twin)
    runs = {name: results.done[name] for pair in pairs.values() for name in pair}
    seeds = sorted(set.intersection(*(set(r) for r in runs.values())))
    estimates, notes, not_tested = (_growth_slopes if claim.metric == CRITICAL_POINT_GROWTH else _gap_slopes)(
        pairs, runs, seeds, window)
    in_comparison = [runs[name][s] for name in runs for s in seeds]
    judged = judge(claim, estimates, None, in_comparison, results.name, "; ".join(notes), not_tested=not_tested)
    return replace(judged, runs=_identity(claim, [{s: runs[name][s] for s in seeds} for name in sorted(runs)]))


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
# the scoreboard


def scoreboard(paths: Iterable[str | Path]) -> list[Verdict]:
    """Every grid's verdicts, each distinct comparison once (one row naming every grid it was seen in), decided on
    p-values adjusted across the scoreboard (Benjamini-Hochberg); per-domain sub-rows keep their grid's decision."""
    rows: list[Verdict] = []
    seen: dict[tuple, int] = {}
    for grid in grid_dirs(paths):
        for v in evaluate_grid(grid.path):
            if v.runs is not None and v.runs in seen:
                first = rows[seen[v.runs]]
                p_holm = max((p for p in (first.p_holm, v.p_holm) if p is not None), default=None)
                # the row speaks in the words of a grid that states the paper's effect, wherever that grid sorts
                claim = v.claim if first.claim.paper is None and v.claim.paper is not None else first.claim
                # a sub-row keeps its grids' decision: the most conservative of their Holm p-values
                rows[seen[v.runs]] = replace(first, claim=claim, grids=(*first.grids, v.grid), p_holm=p_holm,
                                             verdict=first.verdict if p_holm is None else
                                             adjusted_verdict(first.unadjusted, p_holm))
                continue
            if v.runs is not None:
                seen[v.runs] = len(rows)
            rows.append(replace(v, grids=(v.grid,)))
    rows = _sub_rows_under_their_claims(rows)
    top = [i for i, v in enumerate(rows) if not is_sub_row(v)]
    adjusted = _adjust([rows[i] for i in top], benjamini_hochberg, "p_bh")
    for i, v in zip(top, adjusted, strict=True):
        rows[i] = v
    return rows


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


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:+.4f}"


def _fmt_p(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def table(verdicts: Sequence[Verdict], with_grid: bool = True) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the scoreboard (the report's Claims section leaves out the grid column): the paper's
    effect beside ours. "p adjusted" is the scoreboard's Benjamini-Hochberg p where it has one, else the grid's
    Holm p."""
    header = ["claim", "a vs b", "metric", "paper", "Δ (a − b)", "95% CI", "n", "design", "p (one-sided)",
              "p adjusted", "verdict", "note"]
    rows = []
    for v in verdicts:
        interval = "–" if v.low is None else f"[{_fmt(v.low)}, {_fmt(v.high)}]"
        label = f"↳ {v.claim.claim}" if is_sub_row(v) else v.claim.claim
        rows.append([label, f"{v.claim.a} vs {v.claim.b}", _metric_label(v.claim), v.claim.paper or "–",
                     _fmt(v.delta), interval, str(v.n), v.design or "–", _fmt_p(v.p_raw),
                     _fmt_p(v.p_bh if v.p_bh is not None else v.p_holm), f"**{v.verdict}**", v.note])
    if not with_grid:
        return header, rows
    return ["grid", *header], [[", ".join(v.grids or (v.grid,)), *row] for v, row in zip(verdicts, rows, strict=True)]


def _metric_label(claim: Claim) -> str:
    if claim.metric == CRITICAL_POINT_GROWTH:
        return f"slope of log2 critical step vs log2 {claim.over} ({claim.direction})"
    if claim.metric == GAP_SLOPE:
        return f"slope of final val_loss gap (a − b) vs log2 {claim.over} ({claim.direction})"
    if claim.metric == EQUIVALENCE_SAVING:
        return f"fitted equivalence saving, fraction ({claim.direction})"
    if claim.metric.startswith(ANALYSIS_PREFIX):
        return (f"{claim.metric}, middle layers: {ANALYSIS_METRICS[claim.metric.removeprefix(ANALYSIS_PREFIX)]} "
                f"({claim.direction})")
    where = {"warmup": " at the end of warm-up", "throughout": " at every evaluation after warm-up"}.get(claim.at, "")
    return f"{claim.metric}{where} ({claim.direction})"


def markdown(verdicts: Sequence[Verdict]) -> str:
    """The scoreboard as markdown: the paper's claims, then the claims beyond the paper in their own section, each
    table with a count of each verdict; the regime of each grid; and where each grid's runs trained (grids merged
    from exports; runs from different machines may differ in corpus and numerics, so pair within a grid)."""
    paper = [v for v in verdicts if not v.claim.beyond_paper]
    beyond = [v for v in verdicts if v.claim.beyond_paper]
    text = markdown_table(*table(paper)) + "\n" + counts(paper) + "\n"
    if beyond:
        text += ("\nClaims beyond the paper (other published results and our own questions; in the same "
                 "Benjamini-Hochberg family):\n\n" + markdown_table(*table(beyond)) + "\n" + counts(beyond) + "\n")
    regimes = {v.grid: v.regime for v in verdicts if v.regime}
    if regimes:
        text += "\nRegime of each grid:\n" + "".join(f"- {grid}: {regime_text(r)}\n" for grid, r in regimes.items())
    places = {v.grid: v.trained_on for v in verdicts if v.trained_on}
    if places:
        text += "\nWhere the runs trained:\n" + "".join(f"- {grid}: {where}\n" for grid, where in places.items())
    return text


def counts(verdicts: Sequence[Verdict]) -> str:
    """How many claims have each verdict; per-domain sub-rows are part of their claim and not counted."""
    claims = [v for v in verdicts if not is_sub_row(v)]
    tally = ", ".join(f"{sum(v.verdict == name for v in claims)} {name}" for name in VERDICTS)
    return f"{tally} of {len(claims)} claims (per-domain sub-rows not counted)."


# ----------------------------------------------------------------------------------------------
# the regime a grid's claims are judged in


def grid_regime(results: GridResults) -> dict:
    """Where a grid's finished runs stand, so a verdict is read in its regime: the ranges over runs of parameters,
    training tokens, tokens per parameter and final validation loss, and the mean unigram and bigram references
    of their validation tokens with how many runs end below the bigram one, and the most passes over the training
    split any run made (None: every run stayed within one epoch). {} for a grid with no finished runs."""
    runs = [r for by_seed in results.done.values() for r in by_seed.values()]
    if not runs:
        return {}

    def span(values: Iterable[float | None]) -> list[float] | None:
        present = [float(v) for v in values if v is not None]
        return [min(present), max(present)] if present else None

    def mean(values: Iterable[float | None]) -> float | None:
        present = [float(v) for v in values if v is not None]
        return float(np.mean(present)) if present else None

    params = {r.name: r.summary.get("params") for r in runs}
    tokens = {r.name: r.summary.get("tokens_seen") for r in runs}
    with_bigram = [r for r in runs if r.bigram_loss is not None and r.final("val_loss") is not None]
    return {
        "runs": len(runs),
        "params": span(params.values()),
        "tokens": span(tokens.values()),
        "tokens_per_param": span(tokens[n] / params[n] for n in params if tokens[n] and params[n]),
        "epochs": max((r.epochs for r in runs if r.epochs is not None), default=None),
        "final_val_loss": span(r.final("val_loss") for r in runs),
        "unigram_loss": mean(r.unigram_loss for r in runs),
        "bigram_loss": mean(r.bigram_loss for r in runs),
        "below_bigram": sum(r.final("val_loss") < r.bigram_loss for r in with_bigram),
        "with_bigram": len(with_bigram),
    }


def regime_text(regime: dict) -> str:
    """A grid's regime in one line (grid_regime)."""

    def span(key: str, fmt) -> str:
        low, high = regime.get(key) or (None, None)
        if low is None:
            return "–"
        return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)}–{fmt(high)}"

    def millions(x: float) -> str:
        return f"{x / 1e6:.2f}M"

    epochs = "within one epoch" if regime.get("epochs") is None else f"up to {regime['epochs']:.2f} epochs"
    references = f"unigram {regime['unigram_loss']:.3f}" if regime.get("unigram_loss") is not None else "no unigram"
    if regime.get("bigram_loss") is not None:
        references += (f", bigram {regime['bigram_loss']:.3f} ({regime['below_bigram']} of {regime['with_bigram']} "
                       "runs end below it)")
    else:
        references += ", no bigram reference logged"
    return (f"{regime['runs']} runs, {span('params', millions)} parameters, {span('tokens', millions)} training tokens "
            f"({span('tokens_per_param', lambda x: f'{x:.2f}')} tokens per parameter; {epochs}), final "
            f"validation loss {span('final_val_loss', lambda x: f'{x:.3f}')} against the references {references}")
