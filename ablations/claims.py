"""The paper's claims judged on a grid's runs, and the scoreboard across grids. The claims are declared in the grid
file (ablations.claim_spec); a size or token sweep adds its scaling claim (ablations.scaling).

Metrics, from each finished run's summary.json: `val_loss` is the final validation loss (the mean over domains),
`val_loss/<domain>` one domain's, `train_loss` the final training loss (moving average, `train_loss_window`).
`critical_point_growth` (paper Fig. 14) is, per seed, the least-squares slope of log2(1 + critical step) against
log2 of the `over` value, where the critical step is where b's training loss overtakes a's for good
(`stats.critical_point_growth`, with the grid's critical_point_window); it needs the runs' logged metrics.

Verdict (`stats.verdict`), from the per-seed values paired by seed (Δ = a − b, or the slope), n paired seeds and
the 95% t interval of their mean (`stats.paired_difference`):
  reproduced    the interval excludes zero on the claimed side;
  contradicted  it excludes zero on the other side;
  inconclusive  it covers zero, n < 2, or a run in the comparison is not past the unigram plateau (its final
                validation loss is not at least stats.PLATEAU_MARGIN nats below the unigram loss of its validation
                tokens, or it logged no unigram reference).
A comparison whose runs differ in what they ran on (library versions, device, precision, code version: their
summaries' provenance) says so in its note.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lit_resformer.reporting import markdown_table

from .claim_spec import CRITICAL_POINT_GROWTH, Claim
from .grid_dir import grid_dirs
from .results import GridResults, RunResult, load_results, provenance_differences, relative_curves
from .scaling import PAPER_CLAIMS, ScalingError, analyse_grid
from .stats import VERDICTS, critical_point_growth, paired_difference, past_plateau, verdict

EQUIVALENCE_SAVING = "equivalence_saving"  # the metric of a sweep's scaling claim


@dataclass(frozen=True)
class Verdict:
    grid: str
    claim: Claim
    verdict: str
    delta: float | None  # mean over paired seeds of a − b (the slope for critical_point_growth)
    low: float | None  # 95% interval; None when n < 2
    high: float | None
    n: int
    note: str = ""  # why a claim is inconclusive beyond its interval, and what was left out
    trained_on: str = ""  # where the grid's runs trained, from a results folder's provenance ("" if trained in place)

    def to_dict(self) -> dict:
        return {"grid": self.grid, **self.claim.to_dict(), "verdict": self.verdict, "delta": self.delta,
                "ci_low": self.low, "ci_high": self.high, "n": self.n, "note": self.note,
                "trained_on": self.trained_on}


def judge(claim: Claim, per_seed_a: dict[int, float], per_seed_b: dict[int, float] | None,
          runs: Sequence[RunResult], grid: str, note: str = "") -> Verdict:
    """The verdict on per-seed values: a paired difference (b given) or one value per seed (b None)."""
    difference = paired_difference(per_seed_a, per_seed_b if per_seed_b is not None else dict.fromkeys(per_seed_a, 0.0))
    notes = [note] if note else []
    stuck = [r.name for r in runs if not past_plateau(r.final("val_loss"), r.unigram_loss)]
    if stuck:
        notes.append(f"not past the unigram plateau: {', '.join(sorted(stuck))}")
    notes += provenance_note(runs)
    if difference is None:
        return Verdict(grid, claim, "inconclusive", None, None, None, 0, "; ".join(notes + ["no finished paired runs"]))
    if difference.n < 2:
        notes.append("fewer than 2 seeds")
    return Verdict(grid, claim, verdict(difference.low, difference.high, difference.n, claim.direction, not stuck),
                   difference.mean, difference.low, difference.high, difference.n, "; ".join(notes))


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
    """Verdicts on every claim of a grid's runs (its manifest lists them). `sweep` is the scaling analysis of a
    sweep grid (ablations.scaling.analyse_grid) when the caller has it already, else it is made here."""
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
        verdicts.append(judge(claim, values["a"], values["b"], in_comparison, results.name, note))
    if results.report_settings.get("scaling"):
        verdicts.extend(_scaling_verdicts(results, sweep))
    return [replace(v, trained_on=results.trained_on) for v in verdicts]


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
        return [Verdict(results.name, claim, "inconclusive", None, None, None, 0, f"no fit: {sweep}")]
    return [Verdict(r["grid"], Claim(r["claim"], variant, baseline, EQUIVALENCE_SAVING, "higher"),
                    r["verdict"], r["delta"], r["ci_low"], r["ci_high"], r["n"], r["note"]) for r in sweep["claims"]]


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
    return judge(claim, slopes, None, in_comparison, results.name, "; ".join(notes))


# ----------------------------------------------------------------------------------------------
# the scoreboard


def scoreboard(paths: Iterable[str | Path]) -> list[Verdict]:
    return [verdict for grid in grid_dirs(paths) for verdict in evaluate_grid(grid.path)]


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:+.4f}"


def table(verdicts: Sequence[Verdict], with_grid: bool = True) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the scoreboard (the report's Claims section leaves out the grid column)."""
    header = ["claim", "a vs b", "metric", "Δ (a − b)", "95% CI", "n", "verdict", "note"]
    rows = []
    for v in verdicts:
        interval = "–" if v.low is None else f"[{_fmt(v.low)}, {_fmt(v.high)}]"
        rows.append([v.claim.claim, f"{v.claim.a} vs {v.claim.b}", _metric_label(v.claim), _fmt(v.delta), interval,
                     str(v.n), f"**{v.verdict}**", v.note])
    return (["grid", *header], [[v.grid, *row] for v, row in zip(verdicts, rows, strict=True)]) if with_grid else (header, rows)


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
    tally = ", ".join(f"{sum(v.verdict == name for v in verdicts)} {name}" for name in VERDICTS)
    return f"{tally} of {len(verdicts)} claims."
