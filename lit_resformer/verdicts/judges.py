"""How a comparison of each metric kind is judged on a grid's runs and shown (`JUDGING`, one entry per kind of
lit_resformer.runs.claim_spec.METRIC_KINDS): each reads its per-seed values from the runs and hands them to the one
judge (lit_resformer.verdicts.verdict.judge); a size or token sweep adds its scaling claim (lit_resformer.measures.scaling).

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
`analysis/<name>` reads the runs' analysis results (lit_resformer.verdicts.analysis_claims). `time_to_target` (and
`time_to_target/<domain>`) is a's data saving against b, 1 - tokens(a) / tokens(b) to first reach b's final
validation loss (or the claim's `target`) along each seed's curve, with the log-ratio interval of
lit_resformer.measures.time_to_target and its `decide` (a seed that never reaches the target enters at its bound, and
only what the bound supports is concluded); its evidence gate is checked at the runs' ends, and its p-values enter the
Holm family like any other. A sweep's scaling claim is judged on the t test over its per-seed fitted savings
(lit_resformer.measures.scaling) and adjusted like the others; a grid's own `equivalence_saving` claim is not tested
unless the scaling fit judges that variant. The kinds of a select block's chosen points and of a ladder are
lit_resformer.verdicts.tuning's and lit_resformer.verdicts.budgets'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from lit_resformer.measures.scaling import PAPER_CLAIMS, SweepAnalysis
from lit_resformer.measures.stats import (
    RunLosses,
    critical_point,
    critical_point_growth,
    evidence_gate,
    seed_design,
    verdict,
)
from lit_resformer.measures.time_to_target import TimeToTargetError, decide, time_to_target
from lit_resformer.runs.claim_spec import (
    ANALYSIS_METRICS,
    ANALYSIS_PREFIX,
    AT_B_BEST,
    CRITICAL_POINT_GROWTH,
    DATA_SAVING_SLOPE,
    EACH_AT_BEST,
    EACH_AT_BEST_SLOPE,
    EQUIVALENCE_SAVING,
    GAP_DEPENDENCE,
    GAP_DIFFERENCE,
    GAP_SLOPE,
    SAME_CELL_METRICS,
    TIME_TO_TARGET,
    Claim,
    metric_kind,
)
from lit_resformer.runs.results import GridResults, RunResult, relative_curves
from lit_resformer.runs.summary import TRAIN_LOSS_WINDOW
from lit_resformer.verdicts import budgets, tuning
from lit_resformer.verdicts.analysis_claims import analysis_values
from lit_resformer.verdicts.verdict import (
    SideValues,
    Verdict,
    compared,
    corpus_mismatch,
    data_seeds,
    judge,
    provenance_note,
)


def _judge_pair(claim: Claim, results: GridResults,
                side_values: Callable[[Claim, dict[int, RunResult], dict[int, RunResult]], SideValues]) -> Verdict:
    """A comparison of two cells over the seeds both finished, on the per-seed values `side_values` reads from each
    side's runs (`_summary_values`, `analysis_values`)."""
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
    return replace(judged, **compared(claim, sides))


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
    which_runs = compared(claim, sides)
    gate = evidence_gate([RunLosses(r.name, r.final("val_loss"), r.unigram_loss, r.bigram_loss) for r in runs])
    domain = claim.metric.removeprefix(TIME_TO_TARGET)  # "" or "/<domain>"
    try:
        res = time_to_target(results, claim.a, claim.b, target=claim.target, metric="val_loss" + domain)
    except TimeToTargetError as err:
        return Verdict(results.name, claim, "not tested", None, None, None, 0, f"not tested: {err}",
                       unadjusted="not tested", evidence=not gate.stuck, **which_runs)
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
                   p_two_sided=res["p_two_sided"], unadjusted=decided, evidence=not gate.stuck, **which_runs)


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
    return replace(judged, **compared(claim, [{s: runs[name][s] for s in seeds} for name in sorted(runs)]))


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


def scaling_verdicts(results: GridResults, sweep: SweepAnalysis) -> list[Verdict]:
    """A size or token sweep's claims (fewer parameters / less data for the same loss), judged on the CI of the
    fitted equivalence saving by the same rule; a sweep that cannot be fitted is not tested, saying why."""
    variant, text = PAPER_CLAIMS[results.report_settings["scaling"]]
    baseline = results.manifest["baseline"]
    provenance = provenance_note(_family_runs(results, {variant, baseline}))
    if sweep.problem is not None:  # nothing measured: not tested, as the grid's own saving claims are (_declared_saving)
        claim = Claim(text, variant, baseline, EQUIVALENCE_SAVING, "higher")
        return [Verdict(results.name, claim, "not tested", None, None, None, 0,
                        "; ".join([f"not tested: no fit: {sweep.problem}", *provenance]), unadjusted="not tested")]
    # the fit's claims carry the per-seed t test's p-values, so they enter the grid's and the scoreboard's
    # adjustment for multiple comparisons like every other claim
    return [Verdict(r["grid"], Claim(r["claim"], variant, baseline, EQUIVALENCE_SAVING, "higher"),
                    r["verdict"], r["delta"], r["ci_low"], r["ci_high"], r["n"],
                    "; ".join(filter(None, [r["note"], *provenance])), unadjusted=r["verdict"],
                    design=r.get("design", ""), p_raw=r.get("p_raw"), p_two_sided=r.get("p_two_sided"), df=r["df"])
            for r in sweep.fit["claims"]]


def _family_runs(results: GridResults, families: set[str]) -> list[RunResult]:
    """The finished runs of a sweep's variants `families` (every ladder point and seed of each): what a fitted saving
    rests on."""
    return [r for cell, by_seed in results.done.items() if results.cell_info[cell].get("family") in families
            for r in by_seed.values()]


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
    runs = _family_runs(results, {claim.a, claim.b})
    gate = evidence_gate([RunLosses(r.name, r.final("val_loss"), r.unigram_loss, r.bigram_loss) for r in runs])
    if gate.not_tested:
        return Verdict(results.name, claim, "not tested", mean["saving"], mean["ci_low"], mean["ci_high"], mean["n"],
                       f"not tested: {gate.not_tested}", design="per-seed", p_two_sided=mean.get("p_two_sided"),
                       unadjusted="not tested")
    decided = verdict(mean["ci_low"], mean["ci_high"], mean["n"], claim.direction, evidence=not gate.stuck)
    p_two = mean.get("p_two_sided")
    notes = [f"per-seed fitted saving of {claim.a} over {CONVENTION_NOTE}; > 0 = fewer parameters than "
             f"{claim.b}, the paper's 12.2% more parameters is -0.122"]
    if mean.get("no_interval"):
        notes.append(str(mean["no_interval"]))
    notes += provenance_note(runs)
    return Verdict(results.name, claim, decided, mean["saving"], mean["ci_low"], mean["ci_high"], mean["n"],
                   "; ".join(notes), design="per-seed", p_raw=None, p_two_sided=p_two, unadjusted=decided, df=mean["df"])


CONVENTION_NOTE = "the sweep's ladder (lit_resformer.measures.scaling, the paper's parameter count)"


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
    "analysis": Judging(lambda claim, results, _sweep: _judge_pair(claim, results, analysis_values), _analysis_label),
    EQUIVALENCE_SAVING: Judging(_declared_saving,
                                lambda claim: f"fitted equivalence saving, fraction ({claim.direction})"),
    TIME_TO_TARGET: Judging(lambda claim, results, _sweep: _judge_time_to_target(claim, results),
                            _time_to_target_label, format_value=_fmt_pct),
    # the kinds of a select block's chosen points and of a ladder (lit_resformer.verdicts.tuning, .budgets)
    **{kind: Judging(lambda claim, results, _sweep: tuning.judge_at_chosen(claim, results), tuning.at_chosen_label)
       for kind in (EACH_AT_BEST, AT_B_BEST)},
    GAP_DEPENDENCE: Judging(lambda claim, results, _sweep: tuning.judge_gap_dependence(claim, results),
                            tuning.gap_dependence_label),
    EACH_AT_BEST_SLOPE: Judging(lambda claim, results, _sweep: tuning.judge_each_at_best_slope(claim, results),
                                tuning.each_at_best_slope_label),
    GAP_DIFFERENCE: Judging(lambda claim, results, _sweep: tuning.judge_gap_difference(claim, results),
                            tuning.gap_difference_label),
    DATA_SAVING_SLOPE: Judging(lambda claim, results, _sweep: budgets.judge_saving_slope(claim, results),
                               budgets.saving_slope_label, format_value=_fmt_pct),
}


def judging(claim: Claim) -> Judging:
    """The record of the claim's metric kind (its metric was checked when its grid loaded)."""
    return JUDGING[metric_kind(claim.metric).key]
