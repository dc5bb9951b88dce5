"""Scaling laws of a sweep grid and the paper's headline: "the same loss with X% fewer parameters and Y% less data".

A *size sweep* trains a ladder of model sizes at one token budget; a *token sweep* trains one size at several
budgets, each with its own full schedule. Per variant (a `cells` entry of the grid: vanilla, resformer, ...)
the final loss of each finished run is fitted by a saturating power law

    L(x) = E + A * x^-alpha        x = N (parameters; by default without embedding and LM head) or D (tokens)

on the means over seeds at each ladder point. Uncertainty comes from a percentile bootstrap over seeds:
each replicate resamples, per ladder point, that point's seeds with replacement and refits every variant;
variants that share a point's seeds draw the same seeds (same seed = same data order, so the comparison
stays paired).

The *equivalence saving* of a variant at the baseline's ladder point x is 1 - x*/x, where x* is where the
variant's fitted law reaches the baseline's fitted loss at x: the parameters (size sweep) or the data
(token sweep) the variant does without for the same loss. Positive is a saving. The paper reads its data
saving differently, inside one run: the step at which the variant's loss curve first reaches the baseline's
final loss; that *curve reading* is reported beside the separate-budget one, labelled as such, because a
run stopped early has not finished its learning-rate decay and so is not a run trained on that budget.

    from ablations.scaling import analyse_grid, scaling_claims
    result = analyse_grid("runs/scaling-size")          # JSON-able dict: fits, savings, claims
    scaling_claims("runs/scaling-size")                  # [{claim, grid, verdict, delta, ci_low, ...}]

Grids say they are sweeps with `report: {scaling: params}` or `report: {scaling: tokens}`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from lit_resformer.reporting import atomic_write, atomic_write_json

from .document import Document, Plotter
from .grid_dir import grid_dirs
from .results import GridResults, RunResult, load_results
from .run_summary import TRAIN_LOSS_WINDOW
from .spec import SCALING_AXES as AXES
from .stats import PLATEAU_MARGIN, mean_std, paired_difference, past_plateau, percentile_interval, verdict

METRICS = ("val", "train")
# N: without the vocabulary-sized matrices (the default, the usual scaling-law convention), or every parameter
# (the convention of the paper's size names 82M/180M/468M, which its headline numbers appear to use).
PARAM_COUNTS = ("non-embedding", "total")
AXIS_SYMBOL = {"params": "N", "tokens": "D"}
AXIS_WORDS = {"params": "non-embedding parameters", "tokens": "training tokens"}
SAVING_WORDS = {"params": "parameter-equivalence saving", "tokens": "data-equivalence saving"}
# The paper's headline (review version; later versions: 13.3% / 15.4% and 16.11% / 20.3%).
PAPER_SAVING = {"params": 0.104, "tokens": 0.136}
# The claims the paper makes about these sweeps: which variant, in words. Other variants are fitted and
# reported but are not claims (the paper does not say SVFormer saves parameters).
PAPER_CLAIMS = {
    "params": ("resformer", "ResFormer needs fewer parameters for the same loss"),
    "tokens": ("resformer", "ResFormer needs less data for the same loss"),
}
MIN_POINTS = 3  # E, A and alpha: three unknowns
REPORT_REPLICATES = 1000  # bootstrap replicates of the grid report's section
ALPHA_BOUNDS = (1e-3, 4.0)


class ScalingError(ValueError):
    """A sweep that cannot give a trustworthy fit; the message says what is missing or wrong."""


# ----------------------------------------------------------------------------------------------
# the law


@dataclass(frozen=True)
class PowerLaw:
    """L(x) = E + a * (x / x_ref)^-alpha. Kept in the scale of a reference x so that neither the fit nor its
    evaluation handles numbers like 1e8^-0.3; `A` is the coefficient in x's own units."""

    E: float
    a: float
    alpha: float
    x_ref: float

    @property
    def A(self) -> float:
        return self.a * self.x_ref**self.alpha

    def __call__(self, x: Any) -> Any:
        return self.E + self.a * (np.asarray(x, dtype=float) / self.x_ref) ** -self.alpha

    def inverse(self, loss: Any) -> Any:
        """The x at which the law reaches `loss`; inf where loss <= E (never reached at any x)."""
        loss = np.asarray(loss, dtype=float)
        gap = loss - self.E
        with np.errstate(divide="ignore", invalid="ignore"):
            x = self.x_ref * (self.a / gap) ** (1.0 / self.alpha)
        return np.where(gap > 0, x, np.inf)


def _law(t: np.ndarray, E: float, a: float, alpha: float) -> np.ndarray:
    return E + a * t**-alpha


def _law_jacobian(t: np.ndarray, E: float, a: float, alpha: float) -> np.ndarray:
    z = t**-alpha
    return np.stack([np.ones_like(t), z, -a * z * np.log(t)], axis=1)  # d/dE, d/da, d/dalpha


def fit_power_law(x: Sequence[float], loss: Sequence[float]) -> tuple[PowerLaw, list[str]]:
    """Least-squares fit of L = E + A x^-alpha with E in [0, min loss], A >= 0, alpha in ALPHA_BOUNDS.

    The start point comes from a profile over alpha on a log grid (for a fixed alpha the law is linear in
    E and A, solved in closed form), so curve_fit starts near the global optimum instead of wherever a
    default guess lands. Returns the law and the names of parameters that ended on a bound (a bound
    reached means the data do not pin that parameter down; the caller reports it).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(loss, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ScalingError(f"x and loss must be 1-d of the same length, got {x.shape} and {y.shape}")
    if len(np.unique(x)) < MIN_POINTS:
        raise ScalingError(f"a fit of E, A and alpha needs at least {MIN_POINTS} distinct x, got {sorted(set(x.tolist()))}")
    if not (np.all(np.isfinite(x)) and np.all(x > 0) and np.all(np.isfinite(y))):
        raise ScalingError(f"x must be positive and losses finite, got x={x.tolist()} loss={y.tolist()}")
    x_ref = float(np.exp(np.log(x).mean()))
    t = x / x_ref
    e_high = float(y.min())

    alphas = np.geomspace(*ALPHA_BOUNDS, 400)
    z = t[None, :] ** -alphas[:, None]  # [alphas, points]
    z_mean, y_mean = z.mean(1), y.mean()
    slope = ((z - z_mean[:, None]) * (y - y_mean)).sum(1) / ((z - z_mean[:, None]) ** 2).sum(1)
    a0 = np.clip(slope, 0.0, None)
    e0 = np.clip(y_mean - a0 * z_mean, 0.0, e_high)
    sse = ((e0[:, None] + a0[:, None] * z - y) ** 2).sum(1)
    best = int(np.argmin(sse))
    p0 = [e0[best], max(a0[best], 1e-12), alphas[best]]
    lower, upper = [0.0, 0.0, ALPHA_BOUNDS[0]], [e_high, np.inf, ALPHA_BOUNDS[1]]
    try:
        with warnings.catch_warnings():  # the covariance is not used (intervals come from the bootstrap)
            warnings.simplefilter("ignore", OptimizeWarning)
            (E, a, alpha), _ = curve_fit(_law, t, y, p0=p0, bounds=(lower, upper), method="trf",
                                         jac=_law_jacobian, max_nfev=2000)
    except RuntimeError:  # no convergence: the profile optimum is the best available answer
        E, a, alpha = p0
    at_bound = [name for name, value, lo, hi in zip(("E", "A", "alpha"), (E, a, alpha), lower, upper, strict=True)
                if math.isclose(value, lo, rel_tol=1e-6, abs_tol=1e-9) or math.isclose(value, hi, rel_tol=1e-6)]
    return PowerLaw(float(E), float(a), float(alpha), x_ref), at_bound


def equivalence_saving(baseline: PowerLaw, variant: PowerLaw, x: Any) -> Any:
    """1 - x*/x where variant(x*) = baseline(x): the fraction of x the variant needs less for the baseline's
    loss at x. -inf where the variant's law never reaches that loss (its E is above it)."""
    x = np.asarray(x, dtype=float)
    return 1.0 - variant.inverse(baseline(x)) / x


# ----------------------------------------------------------------------------------------------
# the sweep's data


@dataclass
class LadderPoint:
    """One cell of a sweep: a variant at one ladder point, with the final loss of each finished seed."""

    variant: str
    label: str  # the cell's matrix coordinates, e.g. d_model=128: the same label pairs variants
    cell: str
    x: float
    losses: dict[int, float]  # seed -> final loss
    curves: dict[str, dict[int, Any]] = field(default_factory=dict)  # "train" / "val" -> seed -> loss by step
    summaries: dict[int, dict] = field(default_factory=dict)  # seed -> the run's summary (ablations.results)


@dataclass
class Sweep:
    grid: str
    axis: str
    metric: str
    baseline: str
    points: dict[str, list[LadderPoint]]  # variant -> its points, ordered by x
    notes: list[str] = field(default_factory=list)
    param_count: str = "non-embedding"

    @property
    def variants(self) -> list[str]:
        return list(self.points)


def non_embedding_params(model_config: dict) -> int:
    """N: parameters without the token embedding and the LM head. Both are vocab x d_model matrices here
    (untied), so leaving out only one would make N depend on the tokenizer's size rather than on the
    transformer; built on the meta device, so any variant's extra parameters are counted as built."""
    import torch

    from lit_resformer.model import ModelConfig, Transformer

    cfg = ModelConfig(**{**model_config, "vocab_size": 1})  # the vocabulary is excluded anyway
    with torch.device("meta"):
        model = Transformer(cfg)
    return model.num_params(non_embedding=True) - cfg.vocab_size * cfg.d_model  # and the LM head's real rows


def _variant(cell_info: dict) -> str:
    """The `cells` entry a cell belongs to (the cell itself in a grid without `cells`)."""
    return cell_info["family"] or cell_info["name"]


def load_sweep(grid: str | Path | GridResults, metric: str = "val", axis: str | None = None,
               variants: Sequence[str] | None = None, param_count: str = "non-embedding") -> Sweep:
    """Read a sweep grid's finished runs into ladder points, checking that it is a sweep that can be fitted.

    metric: "val" (last validation loss, the paper's measure) or "train" (moving average over the last
    TRAIN_LOSS_WINDOW logged steps). axis: "params" or "tokens"; default the grid's `report.scaling`, else
    whichever of N and D varies across its cells. variants: the `cells` entries to fit (default all; the
    baseline is always fitted). param_count: what N counts, one of PARAM_COUNTS ("total" reads the params
    of the runs' summary.json, counted from their checkpoints with the tokenizer's vocabulary).
    """
    if metric not in METRICS:
        raise ScalingError(f"metric={metric!r} is not allowed; choose one of {list(METRICS)}")
    if axis is not None and axis not in AXES:
        raise ScalingError(f"axis={axis!r} is not allowed; choose one of {list(AXES)}")
    if param_count not in PARAM_COUNTS:
        raise ScalingError(f"param_count={param_count!r} is not allowed; choose one of {list(PARAM_COUNTS)}")
    results = grid if isinstance(grid, GridResults) else _load(grid)
    manifest = results.manifest
    finished = {cell: (results.cell_info[cell], list(runs.values())) for cell, runs in results.done.items() if runs}
    grid, baseline = manifest["name"], manifest["baseline"]
    families = list(dict.fromkeys(_variant(c) for c in manifest["cells"]))
    if baseline not in families:
        raise ScalingError(f"{grid}: the baseline {baseline!r} is one cell, not a variant across the ladder; a sweep "
                           f"grid has `cells` (the variants) x `matrix` (the ladder) and a `cells` entry as baseline")
    chosen = list(dict.fromkeys([baseline, *(variants or families)]))
    unknown = [v for v in chosen if v not in families]
    if unknown:
        raise ScalingError(f"{grid}: variant(s) {unknown} are not in the grid; its variants: {families}")
    with_runs = {_variant(info) for info, _ in finished.values()}
    missing = [v for v in chosen if v not in with_runs]
    if missing:
        raise ScalingError(f"{grid}: variant(s) {missing} have no finished runs; finish them or leave them out "
                           f"(variants with finished runs: {sorted(with_runs)})")

    measured: dict[str, list[tuple[LadderPoint, float, float]]] = {}  # variant -> (point, N, D)
    for cell, (info, records) in finished.items():
        if _variant(info) not in chosen:
            continue
        n_params = _param_count(grid, param_count, records)
        tokens = {r.summary.get("tokens_seen") for r in records}
        if None in tokens:
            raise ScalingError(f"{grid}: a run of cell {cell} logged no train/tokens_seen; D comes from it")
        if len(tokens) > 1:
            raise ScalingError(f"{grid}: the seeds of cell {cell} saw different numbers of tokens {sorted(tokens)}")
        finals = {r.seed: r.final(f"{metric}_loss") for r in records}
        losses = {seed: v for seed, v in finals.items() if v is not None and math.isfinite(v)}
        if not losses:
            raise ScalingError(f"{grid}: the finished runs of cell {cell} logged no {metric} loss")
        curves = {"train": {r.seed: r.train_curve(TRAIN_LOSS_WINDOW) for r in records},
                  "val": {r.seed: r.val_curve() for r in records}}
        label = ",".join(f"{k.split('.')[-1]}={v}" for k, v in info["coords"].items()) or cell
        point = LadderPoint(_variant(info), label, cell, math.nan, losses, curves, {r.seed: r.summary for r in records})
        measured.setdefault(point.variant, []).append((point, n_params, tokens.pop()))

    axis = axis or (manifest.get("report") or {}).get("scaling") or _varying_axis(grid, measured)
    fixed = "tokens" if axis == "params" else "params"
    points: dict[str, list[LadderPoint]] = {}
    for variant in chosen:
        fixed_values = {(n if fixed == "params" else d) for _, n, d in measured[variant]}
        if len(fixed_values) > 1:
            raise ScalingError(
                f"{grid}: {variant} varies {AXIS_WORDS[fixed]} too ({sorted(fixed_values)}); a {axis} sweep holds "
                f"{AXIS_SYMBOL[fixed]} fixed (a size ladder at one token budget, or token budgets at one size)")
        for point, n, d in measured[variant]:
            point.x = n if axis == "params" else d
        points[variant] = sorted((p for p, _, _ in measured[variant]), key=lambda p: p.x)
        _check_ladder(grid, variant, axis, points[variant])
    notes = []
    if any(len(p) == MIN_POINTS for p in points.values()):
        notes.append(f"{MIN_POINTS} ladder points determine the 3 parameters exactly: the fit leaves no residual "
                     "to judge the law by; only the bootstrap over seeds gives an uncertainty.")
    return Sweep(grid, axis, metric, baseline, points, notes, param_count)


def _load(grid_dir: str | Path) -> GridResults:
    try:
        return load_results(grid_dir)
    except FileNotFoundError as err:
        raise ScalingError(str(err)) from None


def _param_count(grid: str, param_count: str, records: list[RunResult]) -> float:
    if param_count == "total":
        totals = {r.summary.get("params") for r in records}
        if None in totals or len(totals) > 1:
            raise ScalingError(f"{grid}: the summary.json of {records[0].run.path.parent.name} gives params {sorted(map(str, totals))}; "
                               f"a total N needs one parameter count")
        return float(totals.pop())
    if records[0].config is None:
        raise ScalingError(f"{grid}: {records[0].run.path} has no experiment.yaml; N comes from the run's model config")
    return float(non_embedding_params(records[0].config["model"]["config"]))


def _varying_axis(grid: str, measured: dict[str, list[tuple[LadderPoint, float, float]]]) -> str:
    n_values = {n for entries in measured.values() for _, n, _ in entries}
    d_values = {d for entries in measured.values() for _, _, d in entries}
    vary_n = any(len({n for _, n, _ in entries}) > 1 for entries in measured.values())
    if vary_n and len(d_values) == 1:
        return "params"
    if len(d_values) > 1 and not vary_n:
        return "tokens"
    raise ScalingError(f"{grid}: not a sweep over one axis (N takes {len(n_values)} values, D {len(d_values)}); "
                       f"mark it with `report: {{scaling: params}}` or `{{scaling: tokens}}`")


def _check_ladder(grid: str, variant: str, axis: str, points: list[LadderPoint]) -> None:
    """A ladder a decreasing power law can describe: enough distinct points, loss falling as x grows."""
    symbol = AXIS_SYMBOL[axis]
    if len(points) < MIN_POINTS:
        shown = ", ".join(f"{p.label} ({symbol}={p.x:,.0f})" for p in points)
        raise ScalingError(f"{grid}: {variant} has finished runs at {len(points)} ladder point(s) ({shown}); a fit of "
                           f"E, A and alpha needs at least {MIN_POINTS}")
    for low, high in zip(points, points[1:], strict=False):
        if low.x == high.x:
            raise ScalingError(f"{grid}: {variant} cells {low.cell} and {high.cell} have the same {symbol}={low.x:,.0f}; "
                               f"a ladder needs distinct {AXIS_WORDS[axis]}")
        low_loss, high_loss = np.mean(list(low.losses.values())), np.mean(list(high.losses.values()))
        if high_loss >= low_loss:
            raise ScalingError(
                f"{grid}: {variant}'s loss does not fall along the ladder: {high.label} ({symbol}={high.x:,.0f}) has "
                f"{high_loss:.4f} >= {low_loss:.4f} at {low.label} ({symbol}={low.x:,.0f}); a power law with A > 0 "
                f"cannot describe it (runs too short for the larger models, or diverging?)")


# ----------------------------------------------------------------------------------------------
# fits, bootstrap, savings


def _fit_variants(points: dict[str, list[LadderPoint]], losses: dict[str, np.ndarray]) -> dict[str, tuple[PowerLaw, list[str]]]:
    return {v: fit_power_law([p.x for p in pts], losses[v]) for v, pts in points.items()}


def _mean_losses(points: dict[str, list[LadderPoint]]) -> dict[str, np.ndarray]:
    return {v: np.array([np.mean(list(p.losses.values())) for p in pts]) for v, pts in points.items()}


def bootstrap_losses(points: dict[str, list[LadderPoint]], replicates: int, rng: np.random.Generator):
    """Yield, per replicate, {variant: mean loss per ladder point} with each point's seeds resampled with
    replacement. Points with the same label and the same seeds draw the same seeds (paired across variants)."""
    single = [f"{v} at {p.label} (seed {next(iter(p.losses))})" for v, pts in points.items() for p in pts if len(p.losses) < 2]
    if single:
        raise ScalingError(f"a bootstrap over seeds needs at least 2 seeds at every ladder point; one seed only: "
                           f"{', '.join(single)}")
    for _ in range(replicates):
        draws: dict[tuple, np.ndarray] = {}
        out = {}
        for variant, pts in points.items():
            means = []
            for p in pts:
                seeds = tuple(sorted(p.losses))
                key = (p.label, seeds)
                if key not in draws:
                    draws[key] = rng.integers(0, len(seeds), len(seeds))
                means.append(np.mean([p.losses[seeds[i]] for i in draws[key]]))
            out[variant] = np.array(means)
        yield out


def _finite(value: float) -> float | None:
    """JSON has no infinities: a saving of -inf (the variant never reaches the loss) is written as null."""
    return float(value) if math.isfinite(value) else None


def _finite_or_none(value: float | None) -> float | None:
    return None if value is None else _finite(value)


def analyse(sweep: Sweep, replicates: int = 1000, level: float = 0.95, seed: int = 0) -> dict:
    """Fits, bootstrap intervals, equivalence savings at the baseline's ladder points, curve readings and
    the paper's claim, as one JSON-able dict."""
    if not 0 < level < 1:
        raise ScalingError(f"level={level} must be in (0, 1)")
    if replicates < 100:
        raise ScalingError(f"replicates={replicates} is too few for a {level:.0%} percentile interval; use >= 100")
    points, baseline = sweep.points, sweep.baseline
    fits = _fit_variants(points, _mean_losses(points))
    base_x = np.array([p.x for p in points[baseline]])
    others = [v for v in sweep.variants if v != baseline]
    savings = {v: equivalence_saving(fits[baseline][0], fits[v][0], base_x) for v in others}

    notes = list(sweep.notes)
    boot_params: dict[str, list[tuple[float, float, float]]] = {v: [] for v in sweep.variants}
    boot_savings: dict[str, list[np.ndarray]] = {v: [] for v in others}
    try:
        for losses in bootstrap_losses(points, replicates, np.random.default_rng(seed)):
            laws = {v: law for v, (law, _) in _fit_variants(points, losses).items()}
            for v, law in laws.items():
                boot_params[v].append((law.E, law.A, law.alpha))
            for v in others:
                boot_savings[v].append(equivalence_saving(laws[baseline], laws[v], base_x))
        have_ci = True
    except ScalingError as err:
        notes.append(f"No confidence intervals: {err}.")
        have_ci = False

    result: dict[str, Any] = {
        "grid": sweep.grid, "axis": sweep.axis, "x": AXIS_SYMBOL[sweep.axis], "metric": sweep.metric,
        "param_count": sweep.param_count,
        "baseline": baseline, "level": level, "replicates": replicates if have_ci else 0, "notes": notes, "fits": {},
        "savings": {}, "curve_savings": {},
    }
    for v, (law, at_bound) in fits.items():
        pts = points[v]
        residual = _mean_losses({v: pts})[v] - law([p.x for p in pts])
        entry = {"E": law.E, "A": law.A, "alpha": law.alpha, "at_bound": at_bound,
                 "rms_residual": float(np.sqrt(np.mean(residual**2))),
                 "points": [{"label": p.label, "cell": p.cell, "x": p.x, "losses": {str(s): l for s, l in p.losses.items()}}
                            for p in pts],
                 "ci": None}
        if have_ci:
            draws = np.array(boot_params[v])
            entry["ci"] = {name: list(percentile_interval(draws[:, i], level)) for i, name in enumerate(("E", "A", "alpha"))}
        result["fits"][v] = entry
    mean_saving = {}
    for v in others:
        per_point = []
        draws = np.array(boot_savings[v]) if have_ci else None
        for i, p in enumerate(points[baseline]):
            low, high = percentile_interval(draws[:, i], level) if have_ci else (None, None)
            per_point.append({"label": p.label, "x": p.x, "saving": _finite(savings[v][i]),
                              "ci_low": _finite_or_none(low), "ci_high": _finite_or_none(high)})
        low, high = percentile_interval(draws.mean(axis=1), level) if have_ci else (None, None)
        mean_saving[v] = (float(np.mean(savings[v])), low, high)
        result["savings"][v] = {"per_point": per_point, "mean": {
            "saving": _finite(mean_saving[v][0]), "ci_low": _finite_or_none(low), "ci_high": _finite_or_none(high)}}
        result["curve_savings"][v] = curve_savings(points[baseline], points[v])
    result["claims"] = _claims(sweep, mean_saving)
    return result


def curve_savings(baseline: list[LadderPoint], variant: list[LadderPoint]) -> list[dict]:
    """The paper's reading, within one run: 1 - s/S where s is the first step at which the variant's loss
    curve is at or below the baseline run's final loss (same ladder point, same seed) and S the variant's
    last step. Training loss smoothed over TRAIN_LOSS_WINDOW steps; validation loss at its evaluations
    (so s is only as fine as the evaluation interval). None for a seed whose curve never gets there."""
    rows = []
    base_by_label = {p.label: p for p in baseline}
    for p in variant:
        base = base_by_label.get(p.label)
        if base is None:
            continue
        row: dict[str, Any] = {"label": p.label}
        for kind in ("train", "val"):
            per_seed: dict[int, float | None] = {}
            for seed, curve in p.curves.get(kind, {}).items():
                base_curve = base.curves.get(kind, {}).get(seed)
                if base_curve is None or not len(base_curve) or not len(curve):
                    continue
                reached = curve.index[curve.to_numpy() <= base_curve.iloc[-1]]
                per_seed[seed] = 1.0 - int(reached[0]) / int(curve.index[-1]) if len(reached) else None
            reached = {s: v for s, v in per_seed.items() if v is not None}
            not_reached = len(per_seed) - len(reached)
            # a mean over the seeds that got there would hide the ones that did not: no mean unless all did.
            # The t interval of a mean saving is its paired difference against a saving of zero.
            diff = paired_difference(reached, dict.fromkeys(reached, 0.0)) if reached and not not_reached else None
            row[kind] = {"n": len(per_seed), "not_reached": not_reached, "mean": diff and diff.mean,
                         "ci_low": diff and diff.low, "ci_high": diff and diff.high}
        rows.append(row)
    return rows


def _claims(sweep: Sweep, mean_saving: dict[str, tuple[float, float | None, float | None]]) -> list[dict]:
    """The paper's claim for this sweep from the variant's mean saving (estimate, interval ends; -inf allowed).
    Inconclusive whatever the interval when a run it rests on is not past the unigram plateau."""
    variant, text = PAPER_CLAIMS[sweep.axis]
    if variant not in mean_saving:
        return []
    estimate, low, high = mean_saving[variant]
    n = min(len(p.losses) for v in (sweep.baseline, variant) for p in sweep.points[v])
    runs = [(f"{p.cell}/seed{seed}", p.summaries.get(seed) or {}) for v in (sweep.baseline, variant)
            for p in sweep.points[v] for seed in p.losses]
    stuck = [name for name, summary in runs
             if not past_plateau(summary.get("final_val_loss"), summary.get("unigram_val_loss"))]
    note = (f"{len(stuck)} of {len(runs)} runs not past the unigram plateau (final validation loss not "
            f"{PLATEAU_MARGIN:g} nat below the unigram loss, or no unigram loss logged): {', '.join(stuck[:4])}"
            + (", ..." if len(stuck) > 4 else "") if stuck else "")
    return [{
        "claim": text, "grid": sweep.grid, "verdict": verdict(low, high, n, "higher", evidence=not stuck), "note": note,
        "delta": _finite(estimate), "ci_low": _finite_or_none(low), "ci_high": _finite_or_none(high), "n": n,
        "metric": f"{SAVING_WORDS[sweep.axis]} of {variant} against {sweep.baseline}, mean over the "
                  f"{len(sweep.points[sweep.baseline])} ladder points ({sweep.metric} loss; fraction, > 0 = saving, "
                  f"null = never reaches)",
    }]


# ----------------------------------------------------------------------------------------------
# output: plots, markdown, JSON


def analyse_grid(grid: str | Path | GridResults, metric: str = "val", axis: str | None = None,
                 variants: Sequence[str] | None = None, replicates: int = 1000, level: float = 0.95,
                 param_count: str = "non-embedding") -> dict:
    return analyse(load_sweep(grid, metric, axis, variants, param_count), replicates=replicates, level=level)


def scaling_claims(grid_dir: str | Path, metric: str = "val", replicates: int = 1000) -> list[dict]:
    """The paper's scaling claims for one sweep grid as plain dicts {claim, grid, verdict, delta, ci_low,
    ci_high, n, metric}, for the claims scoreboard. A sweep that cannot be fitted raises ScalingError."""
    return analyse_grid(grid_dir, metric=metric, replicates=replicates)["claims"]


def plot_sweep(result: dict, directory: Path) -> dict[str, Path]:
    """Points (each seed, and the mean per ladder point) with the fitted laws; savings per ladder point with
    their intervals and the paper's value."""
    variants = list(result["fits"])
    plotter = Plotter(directory, variants)
    plt, grid, symbol = plotter.plt, result["grid"], result["x"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for v, fit in result["fits"].items():
        xs = np.array([p["x"] for p in fit["points"]])
        color = plotter.colors[v]
        for p in fit["points"]:
            ax.scatter([p["x"]] * len(p["losses"]), list(p["losses"].values()), color=color, alpha=0.35, s=14)
        ax.scatter(xs, [np.mean(list(p["losses"].values())) for p in fit["points"]], color=color, s=36, label=f"{v} (mean)")
        grid_x = np.geomspace(xs.min() / 1.3, xs.max() * 1.3, 200)
        law = PowerLaw(fit["E"], fit["A"], fit["alpha"], 1.0)
        ax.plot(grid_x, law(grid_x), color=color, lw=1.4,
                label=f"{v}: {fit['E']:.3f} + {fit['A']:.3g}·{symbol}^-{fit['alpha']:.3f}")
    ax.set_xscale("log")
    ax.set_xlabel(f"{symbol} ({'all parameters' if result['param_count'] == 'total' else AXIS_WORDS[result['axis']]})")
    ax.set_ylabel(f"final {result['metric']} loss")
    ax.set_title(f"{grid}: L({symbol}) = E + A·{symbol}^-α per variant")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    paths = {"fit": plotter.save(fig, f"scaling_{grid}_fit")}
    if result["savings"]:
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        ax.axhline(0.0, color="black", lw=0.8)
        ax.axhline(100 * PAPER_SAVING[result["axis"]], color="grey", ls="--", lw=1, label="paper (review version)")
        for v, saving in result["savings"].items():
            rows = [r for r in saving["per_point"] if r["saving"] is not None]
            xs = np.array([r["x"] for r in rows])
            ys = np.array([100 * r["saving"] for r in rows])
            if result["replicates"]:
                low = np.array([ys[i] - 100 * r["ci_low"] if r["ci_low"] is not None else ys[i] for i, r in enumerate(rows)])
                high = np.array([100 * r["ci_high"] - ys[i] if r["ci_high"] is not None else 0.0 for i, r in enumerate(rows)])
                ax.errorbar(xs, ys, yerr=[low, high], color=plotter.colors[v], marker="o", capsize=3, label=v)
            else:
                ax.plot(xs, ys, color=plotter.colors[v], marker="o", label=v)
        ax.set_xscale("log")
        ax.set_xlabel(f"{symbol} of {result['baseline']}")
        ax.set_ylabel("saving (%)")
        ax.set_title(f"{grid}: {SAVING_WORDS[result['axis']]} against {result['baseline']}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        paths["saving"] = plotter.save(fig, f"scaling_{grid}_saving")
    return paths


def _saving_text(estimate: float | None, low: float | None, high: float | None, with_interval: bool) -> str:
    """A saving in percent with its interval; None is -inf (the variant's law never reaches the loss)."""
    if estimate is None:
        return "never reaches"
    end = lambda v: "−∞" if v is None else f"{100 * v:+.1f}%"  # noqa: E731
    return f"{100 * estimate:+.1f}%" + (f" [{end(low)}, {end(high)}]" if with_interval else "")


def claim_line(claim: dict) -> str:
    """One claim dict as a line of text, e.g. for the command line."""
    interval = claim["ci_high"] is not None or claim["verdict"] == "contradicted"  # both ends None: no interval
    return (f"{claim['grid']}: {claim['claim']}: {claim['verdict']} (saving "
            f"{_saving_text(claim['delta'], claim['ci_low'], claim['ci_high'], interval)}, n={claim['n']})"
            + (f"; {claim['note']}" if claim["note"] else ""))


def _curve_text(entry: dict) -> str:
    if entry["n"] == 0:
        return "–"
    if entry["not_reached"]:
        return f"not reached in {entry['not_reached']} of {entry['n']} seeds"
    with_interval = entry["ci_low"] is not None
    return _saving_text(entry["mean"], entry["ci_low"], entry["ci_high"], with_interval) + f" (n={entry['n']})"


def render(result: dict, doc: Any, images: dict[str, Path], level: int = 2) -> None:
    """One sweep's section into a report Document (headings at `level` and below)."""
    axis, symbol, baseline = result["axis"], result["x"], result["baseline"]
    have_ci = bool(result["replicates"])
    what = "model size" if axis == "params" else "token budget"
    doc.heading(level, f"Scaling: {result['grid']} (L({symbol}) over {what})")
    metric = ("final validation loss (last evaluation)" if result["metric"] == "val"
              else f"final training loss (moving average over the last {TRAIN_LOSS_WINDOW} logged steps)")
    x_words = ("training tokens seen" if axis == "tokens" else "all parameters" if result["param_count"] == "total"
               else "non-embedding parameters (without the token embedding and the LM head, both vocabulary-sized)")
    doc.text(
        f"Per variant, L({symbol}) = E + A·{symbol}^−α fitted by least squares to the {metric}, mean over seeds at "
        f"each ladder point; {symbol} = {x_words}. "
        + (f"Intervals: {result['level']:.0%} percentile bootstrap over seeds ({result['replicates']} replicates; "
           "each ladder point's seeds resampled with replacement, the same draw for every variant that has the "
           "same seeds there)." if have_ci else "")
    )
    for note in result["notes"]:
        doc.text(f"*{note}*")
    rows = []
    for v, fit in result["fits"].items():
        ci = fit["ci"]
        cell = lambda name, spec, v=fit, ci=ci: (  # noqa: E731
            f"{v[name]:{spec}}" + (f" [{ci[name][0]:{spec}}, {ci[name][1]:{spec}}]" if ci else ""))
        seeds = sorted({len(p["losses"]) for p in fit["points"]})
        rows.append([v + (" (baseline)" if v == baseline else ""), str(len(fit["points"])),
                     "–".join(map(str, (seeds[0], seeds[-1]))) if len(seeds) > 1 else str(seeds[0]),
                     cell("E", ".3f"), cell("A", ".4g"), cell("alpha", ".3f"), f"{fit['rms_residual']:.4f}",
                     ", ".join(fit["at_bound"]) or "–"])
    doc.table(["variant", "points", "seeds", "E", "A", "α", "rms residual", "on a bound"], rows)
    rows = []
    for v, fit in result["fits"].items():
        law = PowerLaw(fit["E"], fit["A"], fit["alpha"], 1.0)
        for p in fit["points"]:
            mean, std = mean_std(list(p["losses"].values()))
            rows.append([v, p["label"], f"{p['x']:,.0f}", f"{mean:.4f}" + (f" ± {std:.4f}" if std is not None else ""),
                         str(len(p["losses"])), f"{law(p['x']):.4f}"])
    doc.table(["variant", "ladder point", symbol, "loss (mean ± std over seeds)", "seeds", "fitted"], rows)
    doc.image(images["fit"], f"Final loss against {symbol} with the fitted laws.")
    if not result["savings"]:
        return
    paper = PAPER_SAVING[axis]
    doc.heading(level + 1, SAVING_WORDS[axis].capitalize())
    doc.text(
        f"At each of {baseline}'s ladder points {symbol}: 1 − {symbol}′/{symbol}, where {symbol}′ is where the "
        f"variant's fitted law reaches {baseline}'s fitted loss at {symbol}. Positive: the variant needs that much "
        f"less {'model' if axis == 'params' else 'data'} for the same loss. The paper (review version) reports "
        f"{paper:.1%} {'fewer parameters' if axis == 'params' else 'less data'} for ResFormer"
        + (" (later versions 13.3% and 16.11%)." if axis == "params" else " (later versions 15.4% and 20.3%).")
        + (" Here each budget is a separate run with its own full schedule." if axis == "tokens" else "")
    )
    header = ["variant", *(f"{p['label']} ({symbol}={p['x']:,.0f})" for p in next(iter(result["savings"].values()))["per_point"]),
              "mean over the ladder"]
    rows = [[v, *(_saving_text(r["saving"], r["ci_low"], r["ci_high"], have_ci) for r in s["per_point"]),
             _saving_text(s["mean"]["saving"], s["mean"]["ci_low"], s["mean"]["ci_high"], have_ci)]
            for v, s in result["savings"].items()]
    doc.table(header, rows)
    if "saving" in images:
        doc.image(images["saving"], f"{SAVING_WORDS[axis].capitalize()} per ladder point.")
    doc.heading(level + 1, "Data saving read from the curves (the paper's reading, within one run)")
    doc.text(
        f"Not a separate budget: inside one run, 1 − s/S where s is the first step at which the variant's loss "
        f"reaches {baseline}'s final loss (same ladder point and seed) and S is the run's last step. At step s the "
        f"variant's learning rate has not decayed yet, so this is not what a run trained on s steps would reach. "
        f"Training loss smoothed over {TRAIN_LOSS_WINDOW} logged steps; validation loss at its evaluations only. "
        "Mean over seeds with a 95% t interval."
    )
    rows = [[v, c["label"], _curve_text(c["train"]), _curve_text(c["val"])]
            for v, curves in result["curve_savings"].items() for c in curves]
    doc.table(["variant", "ladder point", "training loss", "validation loss"], rows)
    if result["claims"]:
        doc.heading(level + 1, "Claim")
        doc.table(["claim", "verdict", "saving [CI]", "n", "note"],
                  [[c["claim"], f"**{c['verdict']}**", _saving_text(c["delta"], c["ci_low"], c["ci_high"], have_ci),
                    str(c["n"]), c["note"]] for c in result["claims"]])
        doc.text("Reproduced when the interval of the mean saving excludes zero on the saving side, contradicted "
                 "when it excludes zero on the other side, else inconclusive (also with fewer than 2 seeds, or "
                 f"when a run is not {PLATEAU_MARGIN:g} nat below its validation split's unigram loss).")


def report_analysis(results: GridResults) -> dict | ScalingError | None:
    """The analysis of a grid marked as a sweep (`report: {scaling: ...}`) with REPORT_REPLICATES, made once for
    both its report section and its claim (the bootstrap is the report's slowest part); its ScalingError when it
    cannot be fitted yet; None for a grid that is no sweep."""
    if not results.report_settings.get("scaling"):
        return None
    try:
        return analyse_grid(results, replicates=REPORT_REPLICATES)
    except ScalingError as err:
        return err


def scaling_section(analysis: dict | ScalingError, plots_dir: Path, link_base: Path) -> str:
    """The report's scaling section for a grid marked `report: {scaling: ...}` from its analysis (`analyse_grid`
    with REPORT_REPLICATES), markdown with plots into plots_dir, linked relative to link_base; a sweep that
    cannot be fitted yet (its ScalingError) says why instead."""
    doc = Document(link_base)
    if isinstance(analysis, ScalingError):
        doc.heading(2, "Scaling")
        doc.text(f"No fit: {analysis}")
    else:
        render(analysis, doc, plot_sweep(analysis, plots_dir))
    return doc.markdown()


def sweep_grids(runs_dirs: Sequence[str | Path]) -> list[Path]:
    """Grid directories to analyse: each argument is a grid directory, or a directory of grids whose
    manifests mark them as sweeps (`report: {scaling: ...}`)."""
    for runs_dir in map(Path, runs_dirs):
        if not runs_dir.is_dir():
            raise ScalingError(f"{runs_dir} is not a directory")
    try:
        return [g.path for g in grid_dirs(runs_dirs, "sweep grid (report.scaling: params or tokens in its manifest)",
                                          lambda manifest: (manifest.get("report") or {}).get("scaling"))]
    except FileNotFoundError as err:
        raise ScalingError(str(err)) from None


def write_scaling(runs_dirs: Sequence[str | Path], out_dir: str | Path | None = None, metric: str = "val",
                  variants: Sequence[str] | None = None, replicates: int = 1000, level: float = 0.95,
                  param_count: str = "non-embedding") -> Path:
    """`lit-resformer scaling`: scaling.md, scaling.json and PNG plots for every sweep grid given.
    Default out_dir: <grid>/scaling for one grid, else scaling/ beside the grids."""
    grids = sweep_grids(runs_dirs)
    results = [analyse_grid(g, metric=metric, variants=variants, replicates=replicates, level=level,
                            param_count=param_count) for g in grids]
    if out_dir is None:
        out_dir = grids[0] / "scaling" if len(grids) == 1 else Path(*_common_parts(grids)) / "scaling"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = Document(out_dir)
    doc.heading(1, "Scaling laws and equivalence savings")
    for result in results:
        render(result, doc, plot_sweep(result, out_dir))
    atomic_write(out_dir / "scaling.md", doc.markdown())
    atomic_write_json(out_dir / "scaling.json", {"sweeps": results, "claims": [c for r in results for c in r["claims"]]})
    return out_dir / "scaling.md"


def _common_parts(paths: list[Path]) -> tuple[str, ...]:
    parts = [p.resolve().parts for p in paths]
    common = []
    for items in zip(*parts, strict=False):
        if len(set(items)) > 1:
            break
        common.append(items[0])
    return tuple(common)
