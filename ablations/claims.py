"""The paper's claims judged on a grid's runs, and the scoreboard across grids. The claims are declared in the grid
file (ablations.claim_spec); a size or token sweep adds its scaling claim (ablations.scaling).

Metrics, from each finished run's summary.json: `val_loss` is the final validation loss (the mean over domains),
`val_loss/<domain>` one domain's, `train_loss` the final training loss (moving average, `train_loss_window`).
`critical_point_growth` (paper Fig. 14) is, per seed, the least-squares slope of log2(1 + critical step) against
log2 of the `over` value, where the critical step is where b's training loss overtakes a's for good
(`stats.critical_point_growth`, with the grid's critical_point_window); it needs the runs' logged metrics.

Design: a comparison is paired by seed only when its runs' data seeds (`stats.run_data_seed` of each run's config)
say that a seed's two runs share one data order and different seeds have different ones; otherwise it is unpaired
(Welch's t). A critical-point slope is one estimate per seed (one-sample t). Each verdict carries the two-sided 95%
t interval of its design, `p_raw` (one-sided, in the claimed direction) and `p_two_sided`.

Verdict (`stats.verdict`, then `stats.adjusted_verdict`):
  reproduced    the interval excludes zero on the claimed side and the adjusted two-sided p-value is below 0.05;
  contradicted  the same on the other side;
  inconclusive  otherwise, as with n < 2, or when a run in the comparison is not past the unigram plateau (its final
                validation loss is not at least stats.PLATEAU_MARGIN nats below the unigram loss of its validation
                tokens, or it logged no unigram reference);
  not tested    a precondition failed, with the reason: a run ends above its bigram reference (early training, when
                the run recorded one), or a claim that `requires: crossing` (SVFormer after vanilla overtakes it)
                has an SVFormer run that vanilla never overtook in training loss.
Many comparisons are tested at once, so by chance alone some would pass: the p-values are adjusted for that.
A grid's report adjusts within the grid (Holm, `p_holm`: no false verdict in the figure with 95% probability);
the scoreboard adjusts across its distinct claims (Benjamini-Hochberg, `p_bh`: at most 5% of its decisive
verdicts false on average), and per-domain sub-rows keep their grid's Holm p-value. A sweep's scaling claim is
judged on the interval of its fitted saving, which has no p-value and so stays out of both adjustments.
A comparison whose runs differ in what they ran on (library versions, device, precision, code version: their
summaries' provenance) says so in its note.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from lit_resformer.reporting import markdown_table

from .claim_spec import CRITICAL_POINT_GROWTH, Claim
from .grid_dir import grid_dirs
from .results import GridResults, RunResult, load_results, provenance_differences, relative_curves
from .scaling import PAPER_CLAIMS, ScalingError, analyse_grid
from .stats import (
    VERDICTS,
    adjusted_verdict,
    benjamini_hochberg,
    compare_seeds,
    critical_point,
    critical_point_growth,
    holm,
    past_plateau,
    per_seed_t,
    run_data_seed,
    seed_design,
    verdict,
)

EQUIVALENCE_SAVING = "equivalence_saving"  # the metric of a sweep's scaling claim
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
    runs: tuple | None = field(default=None, compare=False, repr=False)  # identity of the runs compared

    @property
    def adjustable(self) -> bool:
        """Whether its test enters a family of adjusted p-values: it ran on runs that are evidence, and was tested."""
        return self.p_two_sided is not None and self.unadjusted != "not tested" and self.evidence

    def to_dict(self) -> dict:
        return {"grid": self.grid, "grids": list(self.grids or (self.grid,)), **self.claim.to_dict(),
                "verdict": self.verdict, "verdict_unadjusted": self.unadjusted, "design": self.design,
                "delta": self.delta, "ci_low": self.low, "ci_high": self.high, "n": self.n, "p_raw": self.p_raw,
                "p_two_sided": self.p_two_sided, "p_holm": self.p_holm, "p_bh": self.p_bh, "note": self.note,
                "trained_on": self.trained_on}


def _data_seeds(runs: dict[int, RunResult]) -> dict[int, int | None]:
    return {seed: run_data_seed(run.config) if run.config else None for seed, run in runs.items()}


def judge(claim: Claim, per_seed_a: dict[int, float], per_seed_b: dict[int, float] | None,
          runs: Sequence[RunResult], grid: str, note: str = "", design: str = "per-seed",
          not_tested: str = "") -> Verdict:
    """The unadjusted verdict on per-seed values: a difference a − b in `design` (b given) or one estimate per seed
    (b None, per-seed). `not_tested` is the reason a precondition failed ("" when none did)."""
    claimed = "less" if claim.direction == "lower" else "greater"
    notes = [note] if note else []
    stuck = [r.name for r in runs if not past_plateau(r.final("val_loss"), r.unigram_loss)]
    early = [r.name for r in runs if r.bigram_loss is not None and (r.final("val_loss") or float("inf")) > r.bigram_loss]
    if early:
        not_tested = "early-training regime (above the bigram reference): " + ", ".join(sorted(early))
    if stuck and not early:
        notes.append(f"not past the unigram plateau: {', '.join(sorted(stuck))}")
    notes += provenance_note(runs)
    if not per_seed_a or (per_seed_b is not None and not per_seed_b):
        notes.append("no finished runs")
        return Verdict(grid, claim, "inconclusive", None, None, None, 0, "; ".join(notes), unadjusted="inconclusive")
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
    grid (Holm). `sweep` is the scaling analysis of a sweep grid (ablations.scaling.analyse_grid) when the caller
    has it already, else it is made here."""
    results = grid if isinstance(grid, GridResults) else load_results(grid)
    verdicts = []
    for claim in results.claims:
        if claim.metric == CRITICAL_POINT_GROWTH:
            verdicts.append(_judge_growth(claim, results))
            continue
        a, b = results.done[claim.a], results.done[claim.b]
        seeds = sorted(set(a) & set(b))
        values = {side: {s: v for s in seeds if (v := runs[s].final(claim.metric)) is not None}
                  for side, runs in (("a", a), ("b", b))}
        note = "" if values["a"] or not seeds else f"the runs logged no {claim.metric}"
        in_comparison = [a[s] for s in seeds] + [b[s] for s in seeds]
        design = seed_design(_data_seeds({s: a[s] for s in seeds}), _data_seeds({s: b[s] for s in seeds}))
        not_tested = _missing_crossing(results, claim, seeds) if claim.requires == "crossing" else ""
        judged = judge(claim, values["a"], values["b"], in_comparison, results.name, note, design, not_tested)
        verdicts.append(replace(judged, runs=_identity(claim, [{s: a[s] for s in seeds}, {s: b[s] for s in seeds}])))
    if results.report_settings.get("scaling"):
        verdicts.extend(_scaling_verdicts(results, sweep))
    return [replace(v, trained_on=results.trained_on) for v in _adjust(verdicts, holm, "p_holm")]


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
    return (claim.metric, claim.direction, claim.over, *configs)


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
    return [Verdict(r["grid"], Claim(r["claim"], variant, baseline, EQUIVALENCE_SAVING, "higher"),
                    r["verdict"], r["delta"], r["ci_low"], r["ci_high"], r["n"], r["note"], unadjusted=r["verdict"])
            for r in sweep["claims"]]


def _judge_growth(claim: Claim, results: GridResults) -> Verdict:
    window = results.report_settings.get("critical_point_window", 10)
    cells = results.manifest["cells"]
    pairs = {}  # value of `over` -> (a cell, b cell) at the same matrix point
    for cell in cells:
        if cell["family"] == claim.a:
            twin = next(c["name"] for c in cells if c["family"] == claim.b and c["coords"] == cell["coords"])
            pairs[cell["coords"][claim.over]] = (cell["name"], twin)
    runs = {name: results.done[name] for pair in pairs.values() for name in pair}
    seeds = sorted(set.intersection(*(set(r) for r in runs.values())))
    slopes, censored, left_out = {}, [], []
    for seed in seeds:
        points = [(value, relative_curves({seed: runs[a][seed]}, {seed: runs[b][seed]}, window)[seed])
                  for value, (a, b) in pairs.items()]
        slope, is_censored = critical_point_growth(points)
        if slope is None:
            left_out.append(f"seed{seed}")
            continue
        slopes[seed] = slope
        if is_censored:
            censored.append(f"seed{seed}")
    notes = []
    if censored:
        notes.append(f"critical point not reached at the longest length(s) in {', '.join(censored)} (last step used "
                     "as a lower bound)")
    if left_out:
        notes.append(f"left out {', '.join(left_out)}: no critical point at a short length, or no training curve")
    in_comparison = [runs[name][s] for name in runs for s in seeds]
    judged = judge(claim, slopes, None, in_comparison, results.name, "; ".join(notes))
    return replace(judged, runs=_identity(claim, [{s: runs[name][s] for s in seeds} for name in sorted(runs)]))


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
                # a sub-row keeps its grids' decision: the most conservative of their Holm p-values
                rows[seen[v.runs]] = replace(first, grids=(*first.grids, v.grid), p_holm=p_holm,
                                             verdict=first.verdict if p_holm is None else
                                             adjusted_verdict(first.unadjusted, p_holm))
                continue
            if v.runs is not None:
                seen[v.runs] = len(rows)
            rows.append(replace(v, grids=(v.grid,)))
    top = [i for i, v in enumerate(rows) if not is_sub_row(v)]
    adjusted = _adjust([rows[i] for i in top], benjamini_hochberg, "p_bh")
    for i, v in zip(top, adjusted, strict=True):
        rows[i] = v
    return rows


def is_sub_row(v: Verdict) -> bool:
    """A per-domain result: a sub-row of its claim, not a claim of its own on the scoreboard."""
    return v.claim.metric.startswith(DOMAIN_PREFIX)


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:+.4f}"


def _fmt_p(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def table(verdicts: Sequence[Verdict], with_grid: bool = True) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the scoreboard (the report's Claims section leaves out the grid column). "p adjusted" is
    the scoreboard's Benjamini-Hochberg p where it has one, else the grid's Holm p."""
    header = ["claim", "a vs b", "metric", "Δ (a − b)", "95% CI", "n", "design", "p (one-sided)", "p adjusted",
              "verdict", "note"]
    rows = []
    for v in verdicts:
        interval = "–" if v.low is None else f"[{_fmt(v.low)}, {_fmt(v.high)}]"
        label = f"↳ {v.claim.claim}" if is_sub_row(v) else v.claim.claim
        rows.append([label, f"{v.claim.a} vs {v.claim.b}", _metric_label(v.claim), _fmt(v.delta), interval,
                     str(v.n), v.design or "–", _fmt_p(v.p_raw), _fmt_p(v.p_bh if v.p_bh is not None else v.p_holm),
                     f"**{v.verdict}**", v.note])
    if not with_grid:
        return header, rows
    return ["grid", *header], [[", ".join(v.grids or (v.grid,)), *row] for v, row in zip(verdicts, rows, strict=True)]


def _metric_label(claim: Claim) -> str:
    if claim.metric == CRITICAL_POINT_GROWTH:
        return f"slope of log2 critical step vs log2 {claim.over} ({claim.direction})"
    if claim.metric == EQUIVALENCE_SAVING:
        return "fitted equivalence saving, fraction (higher)"
    return f"{claim.metric} ({claim.direction})"


def markdown(verdicts: Sequence[Verdict]) -> str:
    """The scoreboard as a markdown table, a count of each verdict and where each grid's runs trained (grids
    merged from exports; runs from different machines may differ in corpus and numerics, so pair within a grid)."""
    text = markdown_table(*table(verdicts)) + "\n" + counts(verdicts) + "\n"
    places = {v.grid: v.trained_on for v in verdicts if v.trained_on}
    if places:
        text += "\nWhere the runs trained:\n" + "".join(f"- {grid}: {where}\n" for grid, where in places.items())
    return text


def counts(verdicts: Sequence[Verdict]) -> str:
    """How many claims have each verdict; per-domain sub-rows are part of their claim and not counted."""
    claims = [v for v in verdicts if not is_sub_row(v)]
    tally = ", ".join(f"{sum(v.verdict == name for v in claims)} {name}" for name in VERDICTS)
    return f"{tally} of {len(claims)} claims (per-domain sub-rows not counted)."
