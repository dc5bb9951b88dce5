"""Claims as data: the paper's claims for a grid's figure, written in the grid file and judged on its runs.

    claims:
      - claim: ResFormer ends with a lower validation loss than vanilla     # the paper's claim, in words
        a: resformer            # the cell the claim is about (in a cells x matrix grid, a `cells` entry:
        b: vanilla              # the cell it is compared with    the claim is then judged at every matrix point)
        metric: val_loss        # val_loss | val_loss/<domain> | train_loss | critical_point_growth
        direction: lower        # a's metric is lower (or higher) than b's
      - claim: SVFormer's critical point grows with the training length
        a: svformer             # critical_point_growth: `cells` entries of a cells x matrix grid
        b: vanilla
        metric: critical_point_growth
        over: data.seq_len      # the matrix key along which the critical point grows
        direction: higher

Metrics, from each finished run's summary.json: `val_loss` is the final validation loss (the mean over domains),
`val_loss/<domain>` one domain's, `train_loss` the final training loss (moving average, `train_loss_window`).
`critical_point_growth` (paper Fig. 14) is, per seed, the least-squares slope of log2(1 + critical step) against
log2 of the `over` value, where the critical step is where b's training loss overtakes a's for good
(`stats.critical_point`, with the grid's critical_point_window); it needs the runs' logged metrics. Where a
is never overtaken the last logged step stands in as a lower bound, which can only lower the slope when that
point lies above the mean log2 value; a seed with such a point below the mean is left out.

Verdict, from the per-seed values paired by seed (Δ = a − b, or the slope), n paired seeds and the 95% t
interval of their mean (`stats.paired_difference`):
  reproduced    the interval excludes zero on the claimed side;
  contradicted  it excludes zero on the other side;
  inconclusive  it covers zero, n < 2, or a run in the comparison is not past the unigram plateau (its final
                validation loss is not at least PLATEAU_MARGIN nats below the unigram loss of its validation
                tokens, or it logged no unigram reference).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import yaml

from lit_resformer.reporting import markdown_table

from . import metrics as M
from .slices import PROVENANCE
from .stats import critical_point, paired_difference

PLATEAU_MARGIN = 1.0  # nats below the unigram loss a final validation loss must be to count as evidence
CRITICAL_POINT_GROWTH = "critical_point_growth"
SUMMARY_METRICS = {"val_loss": "final_val_loss", "train_loss": "final_train_loss"}
DIRECTIONS = ("lower", "higher")
VERDICTS = ("reproduced", "contradicted", "inconclusive")
CLAIM_FIELDS = {"claim", "a", "b", "metric", "direction", "over"}


@dataclass(frozen=True)
class Claim:
    claim: str
    a: str
    b: str
    metric: str
    direction: str
    over: str | None = None  # critical_point_growth only

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


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


# ----------------------------------------------------------------------------------------------
# parsing (called by ablations.spec when a grid file is loaded)


def parse_claims(raw: object, cells: Sequence[dict]) -> list[Claim]:
    """Check a grid's `claims:` against its cells (dicts with name, family, coords); ValueError names the problem."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"claims must be a list of mappings with fields {sorted(CLAIM_FIELDS)}, got {raw!r}")
    names = [c["name"] for c in cells]
    families = sorted({c["family"] for c in cells if c["family"]})
    claims = []
    for index, entry in enumerate(raw):
        where = f"claims[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a mapping with fields {sorted(CLAIM_FIELDS)}, got {entry!r}")
        unknown = sorted(set(entry) - CLAIM_FIELDS)
        missing = sorted({"claim", "a", "b", "metric", "direction"} - set(entry))
        if unknown or missing:
            raise ValueError(f"{where}: unknown field(s) {unknown}, missing field(s) {missing}; "
                             f"fields: {sorted(CLAIM_FIELDS)} (over only for {CRITICAL_POINT_GROWTH})")
        claim = Claim(**{k: entry.get(k) for k in CLAIM_FIELDS})
        if not isinstance(claim.claim, str) or not claim.claim.strip():
            raise ValueError(f"{where}.claim must say what the paper claims, in words")
        if claim.direction not in DIRECTIONS:
            raise ValueError(f"{where}.direction must be one of {list(DIRECTIONS)}, got {claim.direction!r}")
        metric = claim.metric
        if metric == CRITICAL_POINT_GROWTH:
            _check_growth_claim(claim, cells, families, where)
            if claim.direction != "higher":
                raise ValueError(f"{where}.direction: {CRITICAL_POINT_GROWTH} claims growth, so its direction is 'higher'")
        else:
            if not isinstance(metric, str) or not (metric in SUMMARY_METRICS or metric.startswith("val_loss/")):
                raise ValueError(f"{where}.metric must be one of {[*SUMMARY_METRICS, 'val_loss/<domain>', CRITICAL_POINT_GROWTH]}, "
                                 f"got {metric!r}")
            if claim.over is not None:
                raise ValueError(f"{where}.over applies only to metric {CRITICAL_POINT_GROWTH}")
            if claim.a in families and claim.b in families and claim.a not in names and claim.b not in names:
                claims.extend(_at_every_point(claim, cells, where))
                continue
            for side in ("a", "b"):
                if getattr(claim, side) not in names:
                    raise ValueError(f"{where}.{side}: {getattr(claim, side)!r} is not a cell of this grid; "
                                     f"cells: {names} (or, for a claim at every matrix point, families: {families})")
        if claim.a == claim.b:
            raise ValueError(f"{where}: a and b are both {claim.a!r}; a claim compares two cells")
        claims.append(claim)
    return claims


def _at_every_point(claim: Claim, cells: Sequence[dict], where: str) -> list[Claim]:
    """A claim naming two `cells` entries of a cells x matrix grid holds at every matrix point: one claim per point,
    comparing the two families' cells with the same matrix values (e.g. ResFormer vs vanilla at each length)."""
    if claim.a == claim.b:
        raise ValueError(f"{where}: a and b are both {claim.a!r}; a claim compares two cells")
    by_point = {(c["family"], tuple(sorted(c["coords"].items()))): c["name"] for c in cells}
    expanded = []
    for c in cells:
        if c["family"] != claim.a:
            continue
        point = tuple(sorted(c["coords"].items()))
        other = by_point.get((claim.b, point))
        if other is None:
            raise ValueError(f"{where}.b: {claim.b!r} has no cell at {dict(point)}, where {claim.a!r} has {c['name']!r}")
        at = ", ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in point)
        expanded.append(Claim(f"{claim.claim} [{at}]", c["name"], other, claim.metric, claim.direction))
    return expanded


def _check_growth_claim(claim: Claim, cells: Sequence[dict], families: list[str], where: str) -> None:
    keys = sorted({k for c in cells for k in c["coords"]})
    if claim.over not in keys:
        raise ValueError(f"{where}.over must name a matrix key of this grid ({keys or 'it has no matrix'}), "
                         f"got {claim.over!r}")
    for side in ("a", "b"):
        if getattr(claim, side) not in families:
            raise ValueError(f"{where}.{side}: {CRITICAL_POINT_GROWTH} compares `cells` entries across the matrix; "
                             f"{getattr(claim, side)!r} is not one of {families}")
    points = [c["coords"][claim.over] for c in cells if c["family"] == claim.a]
    if len(set(points)) < 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in points):
        raise ValueError(f"{where}.over: {claim.over} needs at least two positive numeric values, got {points}")


# ----------------------------------------------------------------------------------------------
# judging


def plateau_gap(summary: dict) -> float | None:
    """Nats by which a run's final validation loss is below its unigram reference (None: not both logged)."""
    final, unigram = summary.get("final_val_loss"), summary.get("unigram_val_loss")
    return None if final is None or unigram is None else unigram - final


def past_plateau(summary: dict) -> bool:
    gap = plateau_gap(summary)
    return gap is not None and gap >= PLATEAU_MARGIN


@dataclass
class _Run:
    seed: int
    path: Path
    summary: dict


def _done_runs(grid_dir: Path, cell: str) -> dict[int, _Run]:
    """The finished runs of a cell by seed."""
    runs = {}
    for summary_path in (grid_dir / cell).glob("seed*/summary.json"):
        summary = json.loads(summary_path.read_text())
        if summary.get("status") == "done":
            seed = int(summary_path.parent.name.removeprefix("seed"))
            runs[seed] = _Run(seed, summary_path.parent, summary)
    return runs


def _metric_value(summary: dict, metric: str) -> float | None:
    if metric.startswith("val_loss/"):
        return (summary.get("final_val_loss_by_domain") or {}).get(metric.removeprefix("val_loss/"))
    return summary.get(SUMMARY_METRICS[metric])


def judge(claim: Claim, per_seed_a: dict[int, float], per_seed_b: dict[int, float] | None,
          runs: Iterable[tuple[str, _Run]], grid: str, note: str = "") -> Verdict:
    """The verdict on per-seed values: a paired difference (b given) or one value per seed (b None)."""
    difference = paired_difference(per_seed_a, per_seed_b if per_seed_b is not None else dict.fromkeys(per_seed_a, 0.0))
    notes = [note] if note else []
    stuck = [f"{cell}/seed{run.seed}" for cell, run in runs if not past_plateau(run.summary)]
    if stuck:
        notes.append(f"not past the unigram plateau: {', '.join(sorted(stuck))}")
    if difference is None:
        return Verdict(grid, claim, "inconclusive", None, None, None, 0, "; ".join(notes + ["no finished paired runs"]))
    verdict = "inconclusive"
    if difference.n < 2:
        notes.append("fewer than 2 seeds")
    elif not stuck:
        claimed = -1 if claim.direction == "lower" else 1
        if claimed * difference.low > 0 and claimed * difference.high > 0:
            verdict = "reproduced"
        elif claimed * difference.low < 0 and claimed * difference.high < 0:
            verdict = "contradicted"
    return Verdict(grid, claim, verdict, difference.mean, difference.low, difference.high, difference.n, "; ".join(notes))


def evaluate_grid(grid_dir: str | Path) -> list[Verdict]:
    """Verdicts on every claim of a grid's run directory (its grid.yaml manifest lists them)."""
    grid_dir = Path(grid_dir)
    manifest = yaml.safe_load((grid_dir / "grid.yaml").read_text())
    verdicts = []
    for raw in manifest.get("claims") or []:
        claim = Claim(**raw)
        if claim.metric == CRITICAL_POINT_GROWTH:
            verdicts.append(_judge_growth(claim, grid_dir, manifest))
            continue
        a, b = _done_runs(grid_dir, claim.a), _done_runs(grid_dir, claim.b)
        seeds = sorted(set(a) & set(b))
        values = {side: {s: v for s in seeds if (v := _metric_value(runs[s].summary, claim.metric)) is not None}
                  for side, runs in (("a", a), ("b", b))}
        note = "" if values["a"] or not seeds else f"the runs logged no {claim.metric}"
        in_comparison = [(claim.a, a[s]) for s in seeds] + [(claim.b, b[s]) for s in seeds]
        verdicts.append(judge(claim, values["a"], values["b"], in_comparison, manifest["name"], note))
    if (manifest.get("report") or {}).get("scaling"):
        verdicts.extend(_scaling_verdicts(grid_dir))
    where = trained_on(grid_dir)
    return [replace(verdict, trained_on=where) for verdict in verdicts]


def trained_on(grid_dir: Path) -> str:
    """Where a results folder's runs trained: the distinct notes of the exports merged into it (its
    provenance.json), in merge order; "" for a run directory trained in place."""
    path = grid_dir / PROVENANCE
    if not path.is_file():
        return ""
    notes = [entry.get("note") or "not recorded" for entry in json.loads(path.read_text())]
    return "; ".join(dict.fromkeys(notes))


def _scaling_verdicts(grid_dir: Path) -> list[Verdict]:
    """A size or token sweep's claims (fewer parameters / less data for the same loss), judged on the CI of the
    fitted equivalence saving by the same rule (ablations.scaling); a sweep that cannot be fitted yet says why."""
    from .scaling import PAPER_CLAIMS, ScalingError, scaling_claims

    manifest = yaml.safe_load((grid_dir / "grid.yaml").read_text())
    variant, text = PAPER_CLAIMS[manifest["report"]["scaling"]]
    claim = Claim(text, variant, manifest["baseline"], "equivalence_saving", "higher")
    try:
        results = scaling_claims(grid_dir)
    except ScalingError as err:
        return [Verdict(manifest["name"], claim, "inconclusive", None, None, None, 0, f"no fit: {err}")]
    return [Verdict(r["grid"], Claim(r["claim"], variant, manifest["baseline"], "equivalence_saving", "higher"),
                    r["verdict"], r["delta"], r["ci_low"], r["ci_high"], r["n"], r["note"]) for r in results]


def _judge_growth(claim: Claim, grid_dir: Path, manifest: dict) -> Verdict:
    window = (manifest.get("report") or {}).get("critical_point_window", 10)
    pairs = {}  # value of `over` -> (a cell, b cell) at the same matrix point
    for cell in manifest["cells"]:
        if cell["family"] == claim.a:
            twin = next(c["name"] for c in manifest["cells"] if c["family"] == claim.b and c["coords"] == cell["coords"])
            pairs[cell["coords"][claim.over]] = (cell["name"], twin)
    runs = {name: _done_runs(grid_dir, name) for pair in pairs.values() for name in pair}
    seeds = sorted(set.intersection(*(set(r) for r in runs.values())))
    slopes, censored, left_out = {}, [], []
    for seed in seeds:
        x, y, is_censored = [], [], []
        for value, (a, b) in sorted(pairs.items()):
            relative = (_train_curve(runs[a][seed].path, window) - _train_curve(runs[b][seed].path, window)).dropna()
            if relative.empty:
                break
            step = critical_point(relative)
            x.append(math.log2(value))
            y.append(math.log2(1 + (relative.index[-1] if step is None else step)))
            is_censored.append(step is None)
        else:
            # A censored point's true critical step is larger: above the mean length that can only raise the true
            # slope above the fitted one, below it the fit would overstate the growth, so the seed is left out.
            if not any(c and xi <= np.mean(x) for xi, c in zip(x, is_censored, strict=True)):
                slopes[seed] = float(np.polyfit(x, y, 1)[0])
                if any(is_censored):
                    censored.append(f"seed{seed}")
                continue
        left_out.append(f"seed{seed}")
    notes = []
    if censored:
        notes.append(f"critical point not reached at the longest length(s) in {', '.join(censored)} (last step used "
                     "as a lower bound)")
    if left_out:
        notes.append(f"left out {', '.join(left_out)}: no critical point at a short length, or no training curve")
    in_comparison = [(name, runs[name][s]) for name in runs for s in seeds]
    return judge(claim, slopes, None, in_comparison, manifest["name"], "; ".join(notes))


def _train_curve(run_dir: Path, window: int):
    loss = M.series(M.read_metrics(run_dir), M.TRAIN_LOSS)
    return M.smooth(loss[np.isfinite(loss)], window)


# ----------------------------------------------------------------------------------------------
# the scoreboard


def grid_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Grid run directories: each path is one (it holds grid.yaml) or a folder of them."""
    found = []
    for path in map(Path, paths):
        if (path / "grid.yaml").is_file():
            found.append(path)
            continue
        inside = sorted(p.parent for p in path.glob("*/grid.yaml"))
        if not inside:
            raise FileNotFoundError(f"{path} holds no grid run directory (no grid.yaml in it or in its folders)")
        found += inside
    return found


def scoreboard(paths: Iterable[str | Path]) -> list[Verdict]:
    return [verdict for grid_dir in grid_dirs(paths) for verdict in evaluate_grid(grid_dir)]


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
    if claim.metric == "equivalence_saving":
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
