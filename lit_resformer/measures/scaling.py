"""Scaling laws of a sweep grid and the paper's headline: "the same loss with X% fewer parameters and Y% less data".

A *size sweep* trains a ladder of model sizes at one token budget; a *token sweep* trains one size at several
budgets, each with its own full schedule. Per variant (a `cells` entry of the grid: vanilla, resformer, ...)
the final loss of each finished run is fitted by a saturating power law

    L(x) = E + A * x^-alpha        x = N (parameters) or D (training tokens seen)

N is counted two ways and both are reported: every parameter (the paper's convention: its 82M/180M/468M count the
token embedding and the LM head) and without those two vocabulary-sized matrices (the usual scaling-law one).

The *equivalence saving* of a variant at the baseline's ladder point x is 1 - x'/x, where x' is where the
variant's fitted law reaches the baseline's fitted loss at x: the parameters (size sweep) or the data (token
sweep) the variant does without for the same loss. Positive is a saving. A saving is given only where x' lies
inside the variant's measured ladder; elsewhere it would be an extrapolation of the law, and it is refused with
the measured range as the reason.

Uncertainty comes from the seeds. Each seed's ladder is fitted on its own, the baseline's and the variant's, and
gives one saving per seed; a saving is the mean of those with a t interval over the seeds (`stats.per_seed_t`).
Matching the two ladders by seed number is a pairing only where a seed's runs share their data order
(`stats.seed_design`); otherwise it is an arbitrary match, and the interval holds all the same, since each seed's
saving rests on runs of its own. There is no bootstrap: over the 2 to 5 seeds a grid has, a percentile bootstrap
of a mean covers well below its level (about 84% for a 95% interval at 5 seeds). A law fitted to exactly 3 points
has no residual degrees of freedom (E, A and alpha pass through every point), so its form cannot be checked and
each seed's fit follows that seed's noise wherever it goes: a saving resting on such a fit gets no interval, and
its claim is not tested.

The paper reads its data saving differently, inside one run: the step at which the variant's loss curve first
reaches the baseline's final loss; that *curve reading* is reported beside the separate-budget one, labelled as
such, because a run stopped early has not finished its learning-rate decay and so is not a run trained on that
budget. A sweep whose runs pass over their training split more than once says how many times.

    from lit_resformer.measures.scaling import analyse_grid, scaling_claims
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

from lit_resformer.grids.spec import SCALING_AXES as AXES
from lit_resformer.measures.stats import (
    PLATEAU_MARGIN,
    RunLosses,
    evidence_gate,
    per_seed_t,
    run_data_seed,
    seed_design,
    verdict,
)
from lit_resformer.runs.results import GridResults, RunResult, load_results
from lit_resformer.runs.summary import TRAIN_LOSS_WINDOW

METRICS = ("val", "train")
# What x counts, per axis; the paper's convention first. N: every parameter (the convention of the paper's size
# names 82M/180M/468M; its Table 5 fitted over them gives its headline), or without the token embedding and the
# LM head (the usual scaling-law convention, which keeps the tokenizer's size out of N).
PARAM_COUNTS = ("total", "non-embedding")
CONVENTIONS = {"params": PARAM_COUNTS, "tokens": ("tokens",)}
PAPER_CONVENTION = {"params": "total", "tokens": "tokens"}
CONVENTION_WORDS = {"total": "all parameters",
                    "non-embedding": "non-embedding parameters (without the token embedding and the LM head)",
                    "tokens": "training tokens seen"}
AXIS_SYMBOL = {"params": "N", "tokens": "D"}
AXIS_WORDS = {"params": "parameters", "tokens": "training tokens"}
SAVING_WORDS = {"params": "parameter-equivalence saving", "tokens": "data-equivalence saving"}
# The paper's headline (review version; later versions: 13.3% / 15.4% and 16.11% / 20.3%).
PAPER_SAVING = {"params": 0.104, "tokens": 0.136}
# The paper's claims about these sweeps: which variant, in words. Other variants are fitted and reported beside it.
PAPER_CLAIMS = {
    "params": ("resformer", "ResFormer needs fewer parameters for the same loss"),
    "tokens": ("resformer", "ResFormer needs less data for the same loss"),
}
MIN_POINTS = 3  # E, A and alpha: three unknowns
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
        with warnings.catch_warnings():  # the covariance is not used (intervals come from the seeds)
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


def count_text(x: float) -> str:
    """A parameter or token count in three figures: 75,680 -> 75.7k, 2,254,464 -> 2.25M; inf -> ∞."""
    if not math.isfinite(x):
        return "∞"
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= size:
            return f"{x / size:.3g}{suffix}"
    return f"{x:.3g}"


def range_text(xs: Sequence[float]) -> str:
    return f"{count_text(min(xs))}–{count_text(max(xs))}"


class OutsideRange(ScalingError):
    """A saving asked where it would rest on the law beyond the points it was fitted to."""


def measured_saving(baseline: PowerLaw, variant: PowerLaw, x: float, baseline_xs: Sequence[float],
                    variant_xs: Sequence[float]) -> float:
    """equivalence_saving at x, refused (OutsideRange, naming the measured range) when x lies outside the
    baseline's measured ladder or x' (where the variant's law reaches the baseline's loss at x) outside the
    variant's: a law says nothing trustworthy beyond the sizes or budgets it was fitted to."""
    if not min(baseline_xs) <= x <= max(baseline_xs):
        raise OutsideRange(f"outside the measured range {range_text(baseline_xs)}: asked at {count_text(x)}")
    needed = float(variant.inverse(baseline(x)))
    if not min(variant_xs) <= needed <= max(variant_xs):
        raise OutsideRange(f"outside the measured range {range_text(variant_xs)}: the variant would need "
                           f"{count_text(needed)}")
    return 1.0 - needed / x


# ----------------------------------------------------------------------------------------------
# the sweep's data


@dataclass
class LadderPoint:
    """One cell of a sweep: a variant at one ladder point, with the final loss of each finished seed."""

    variant: str
    label: str  # the cell's matrix coordinates, e.g. d_model=128: the same label pairs variants
    cell: str
    x: dict[str, float]  # what x counts (CONVENTIONS) -> its value at this point
    losses: dict[int, float]  # seed -> final loss
    curves: dict[str, dict[int, Any]] = field(default_factory=dict)  # "train" / "val" -> seed -> loss by step
    summaries: dict[int, dict] = field(default_factory=dict)  # seed -> the run's summary (lit_resformer.runs.results)
    data_seeds: dict[int, int | None] = field(default_factory=dict)  # seed -> the seed of its training order
    epochs: float | None = None  # passes over the training split; None: the runs stayed within their first


@dataclass
class Sweep:
    grid: str
    axis: str
    metric: str
    baseline: str
    points: dict[str, list[LadderPoint]]  # variant -> its points, ordered by x
    notes: list[str] = field(default_factory=list)

    @property
    def variants(self) -> list[str]:
        return list(self.points)

    @property
    def conventions(self) -> list[str]:
        """What x counts, for every point (a total parameter count may be missing), the paper's convention first."""
        return [c for c in CONVENTIONS[self.axis] if all(c in p.x for pts in self.points.values() for p in pts)]


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
               variants: Sequence[str] | None = None) -> Sweep:
    """Read a sweep grid's finished runs into ladder points, checking that it is a sweep that can be fitted.

    metric: "val" (last validation loss, the paper's measure) or "train" (moving average over the last
    TRAIN_LOSS_WINDOW logged steps). axis: "params" or "tokens"; default the grid's `report.scaling`, else
    whichever of N and D varies across its cells. variants: the `cells` entries to fit (default all; the
    baseline is always fitted). N is counted both ways (PARAM_COUNTS): without the embedding and LM head from
    the runs' model configs, and every parameter from the params of their summary.json (counted with the
    tokenizer's vocabulary).
    """
    if metric not in METRICS:
        raise ScalingError(f"metric={metric!r} is not allowed; choose one of {list(METRICS)}")
    if axis is not None and axis not in AXES:
        raise ScalingError(f"axis={axis!r} is not allowed; choose one of {list(AXES)}")
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

    measured: dict[str, list[tuple[LadderPoint, dict[str, float], float]]] = {}  # variant -> (point, N, D)
    no_total = []
    for cell, (info, records) in finished.items():
        if _variant(info) not in chosen:
            continue
        counts = _param_counts(grid, records)
        if "total" not in counts:
            no_total.append(cell)
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
        d = tokens.pop()
        point = LadderPoint(_variant(info), label, cell, {}, losses, curves, {r.seed: r.summary for r in records},
                            {r.seed: run_data_seed(r.config) if r.config else None for r in records},
                            _epochs(records))
        measured.setdefault(point.variant, []).append((point, counts, d))

    axis = axis or (manifest.get("report") or {}).get("scaling") or _varying_axis(grid, measured)
    fixed = "tokens" if axis == "params" else "params"
    points: dict[str, list[LadderPoint]] = {}
    for variant in chosen:
        fixed_values = {(n["non-embedding"] if fixed == "params" else d) for _, n, d in measured[variant]}
        if len(fixed_values) > 1:
            raise ScalingError(
                f"{grid}: {variant} varies {AXIS_WORDS[fixed]} too ({sorted(fixed_values)}); a {axis} sweep holds "
                f"{AXIS_SYMBOL[fixed]} fixed (a size ladder at one token budget, or token budgets at one size)")
        for point, n, d in measured[variant]:
            point.x = dict(n) if axis == "params" else {"tokens": d}
        points[variant] = sorted((p for p, _, _ in measured[variant]), key=lambda p: p.x[CONVENTIONS[axis][-1]])
        _check_ladder(grid, variant, axis, points[variant])
    notes = []
    if axis == "params" and no_total:
        notes.append(f"No savings over all parameters: the summaries of {', '.join(no_total[:3])}"
                     + (", ..." if len(no_total) > 3 else "") + " give no single parameter count.")
    repeated = [p for pts in points.values() for p in pts if p.epochs is not None]
    if repeated:
        most = max(repeated, key=lambda p: p.epochs)
        seen = next(iter(most.summaries.values()))["tokens_seen"]
        notes.append(
            f"Data repeats: {len(repeated)} of {sum(map(len, points.values()))} ladder points passed over their training "
            f"split more than once, up to {most.epochs:.2f} times ({most.variant} at {most.label}: {count_text(seen)} "
            f"tokens seen of a {count_text(seen / most.epochs)}-token split); the paper trains one epoch"
            + (", and D counts the repeated tokens." if axis == "tokens" else "."))
    return Sweep(grid, axis, metric, baseline, points, notes)


def _load(grid_dir: str | Path) -> GridResults:
    try:
        return load_results(grid_dir)
    except FileNotFoundError as err:
        raise ScalingError(str(err)) from None


def _param_counts(grid: str, records: list[RunResult]) -> dict[str, float]:
    """{convention: N} of one cell's runs; "total" only when their summaries agree on one parameter count."""
    if records[0].config is None:
        raise ScalingError(f"{grid}: {records[0].run.path} has no experiment.yaml; N comes from the run's model config")
    counts = {"non-embedding": float(non_embedding_params(records[0].config["model"]["config"]))}
    totals = {r.summary.get("params") for r in records}
    if len(totals) == 1 and None not in totals:
        counts["total"] = float(totals.pop())
    return counts


def _epochs(records: list[RunResult]) -> float | None:
    """Passes over the training split of a cell's runs (the most of any seed); None when none repeated its data."""
    return max((r.epochs for r in records if r.epochs is not None), default=None)


def _varying_axis(grid: str, measured: dict[str, list[tuple[LadderPoint, dict[str, float], float]]]) -> str:
    n_values = {n["non-embedding"] for entries in measured.values() for _, n, _ in entries}
    d_values = {d for entries in measured.values() for _, _, d in entries}
    vary_n = any(len({n["non-embedding"] for _, n, _ in entries}) > 1 for entries in measured.values())
    if vary_n and len(d_values) == 1:
        return "params"
    if len(d_values) > 1 and not vary_n:
        return "tokens"
    raise ScalingError(f"{grid}: not a sweep over one axis (N takes {len(n_values)} values, D {len(d_values)}); "
                       f"mark it with `report: {{scaling: params}}` or `{{scaling: tokens}}`")


def _check_ladder(grid: str, variant: str, axis: str, points: list[LadderPoint]) -> None:
    """A ladder a decreasing power law can describe: enough distinct points, loss falling as x grows."""
    symbol, convention = AXIS_SYMBOL[axis], CONVENTIONS[axis][-1]
    if len(points) < MIN_POINTS:
        shown = ", ".join(f"{p.label} ({symbol}={p.x[convention]:,.0f})" for p in points)
        raise ScalingError(f"{grid}: {variant} has finished runs at {len(points)} ladder point(s) ({shown}); a fit of "
                           f"E, A and alpha needs at least {MIN_POINTS}")
    for low, high in zip(points, points[1:], strict=False):
        if low.x[convention] == high.x[convention]:
            raise ScalingError(f"{grid}: {variant} cells {low.cell} and {high.cell} have the same "
                               f"{symbol}={low.x[convention]:,.0f}; a ladder needs distinct {AXIS_WORDS[axis]}")
        low_loss, high_loss = np.mean(list(low.losses.values())), np.mean(list(high.losses.values()))
        if high_loss >= low_loss:
            raise ScalingError(
                f"{grid}: {variant}'s loss does not fall along the ladder: {high.label} ({symbol}="
                f"{high.x[convention]:,.0f}) has {high_loss:.4f} >= {low_loss:.4f} at {low.label} ({symbol}="
                f"{low.x[convention]:,.0f}); a power law with A > 0 cannot describe it (runs too short for the "
                f"larger models, or diverging?)")


# ----------------------------------------------------------------------------------------------
# fits and savings, per seed


def _mean_losses(points: list[LadderPoint]) -> np.ndarray:
    return np.array([np.mean(list(p.losses.values())) for p in points])


def _full_ladder_seeds(points: list[LadderPoint]) -> list[int]:
    """The seeds with a run at every ladder point: those whose own ladder can be fitted."""
    return sorted(set.intersection(*(set(p.losses) for p in points)))


def _seed_interval(values: np.ndarray, level: float, no_interval: str | None) -> dict:
    """The mean of per-seed savings, its two-sided t interval (with its degrees of freedom, n - 1: what the verdict's
    MDE reads) and its p-values against no saving (two-sided, and one-sided in the claimed direction: a saving);
    without an interval when `no_interval` says why, or one seed."""
    n = len(values)
    if no_interval is None and n < 2:
        no_interval = "one seed: no spread over seeds to judge it by"
    out = {"saving": float(values.mean()), "n": n, "ci_low": None, "ci_high": None, "df": None, "p_two_sided": None,
           "p_raw": None, "no_interval": no_interval}
    if no_interval is None:
        two_sided, one_sided = _per_seed_t(values, "two-sided", level), _per_seed_t(values, "greater", level)
        out.update(ci_low=two_sided.low, ci_high=two_sided.high, df=n - 1, p_two_sided=two_sided.p, p_raw=one_sided.p)
    return out


def _per_seed_t(values: Any, alternative: str, level: float):
    """stats.per_seed_t without scipy's warnings on nearly identical values: seeds that agree (a validation curve read
    at its evaluations only lands on the same step) are data like any other, and their narrow interval is what
    they show."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning)  # 0 x inf: a one-sided end
        return per_seed_t(values, alternative, level)


def _savings(baseline: list[LadderPoint], variant: list[LadderPoint], convention: str, baseline_laws: dict[int, PowerLaw],
             variant_laws: dict[int, PowerLaw], level: float, no_interval: str | None) -> dict:
    """The variant's saving at each of the baseline's ladder points and its mean over the points inside the measured
    range, from the per-seed fits of the seeds both ladders have in full. A point where any seed's fit would need
    the variant outside its measured ladder is refused with that reason, and left out of the mean."""
    seeds = sorted(set(baseline_laws) & set(variant_laws))
    if not seeds:
        raise ScalingError(f"{variant[0].variant} and {baseline[0].variant} have no seed with runs at every ladder point "
                           f"of both; a saving per seed needs one")
    base_xs, variant_xs = [p.x[convention] for p in baseline], [p.x[convention] for p in variant]
    per_seed = np.full((len(seeds), len(base_xs)), np.nan)
    rows, inside = [], []
    for i, (point, x) in enumerate(zip(baseline, base_xs, strict=True)):
        row: dict[str, Any] = {"label": point.label, "x": x, "outside": None}
        try:
            for k, seed in enumerate(seeds):
                try:
                    per_seed[k, i] = measured_saving(baseline_laws[seed], variant_laws[seed], x, base_xs, variant_xs)
                except OutsideRange as err:
                    raise OutsideRange(f"{err} (seed {seed})" if len(seeds) > 1 else str(err)) from None
        except OutsideRange as err:
            row.update(saving=None, n=len(seeds), ci_low=None, ci_high=None, df=None, p_two_sided=None, p_raw=None,
                       no_interval=None, outside=str(err), per_seed={})
        else:
            row.update(_seed_interval(per_seed[:, i], level, no_interval),
                       per_seed={str(s): float(v) for s, v in zip(seeds, per_seed[:, i], strict=True)})
            inside.append(i)
        rows.append(row)
    if inside:
        mean = _seed_interval(per_seed[:, inside].mean(axis=1), level, no_interval)
    else:
        mean = {"saving": None, "n": len(seeds), "ci_low": None, "ci_high": None, "df": None, "p_two_sided": None,
                "p_raw": None, "no_interval": f"every ladder point is outside the measured range {range_text(variant_xs)}"}
    mean["points"] = [rows[i]["label"] for i in inside]
    return {"seeds": seeds, "range": [min(variant_xs), max(variant_xs)], "per_point": rows, "mean": mean}


def _design(variant: list[LadderPoint], baseline: list[LadderPoint]) -> str:
    """Whether matching the two ladders by seed number pairs runs that share a data order (stats.seed_design)."""
    return seed_design(variant[0].data_seeds, baseline[0].data_seeds)


def analyse(sweep: Sweep, level: float = 0.95) -> dict:
    """Fits (of the means over seeds, and of each seed's own ladder), savings at the baseline's ladder points and over
    the ladder under every count of x, the curve readings and the paper's claim, as one JSON-able dict."""
    if not 0 < level < 1:
        raise ScalingError(f"level={level} must be in (0, 1)")
    points, baseline = sweep.points, sweep.baseline
    others = [v for v in sweep.variants if v != baseline]
    seeds = {v: _full_ladder_seeds(pts) for v, pts in points.items()}
    notes = list(sweep.notes)
    for v, pts in points.items():
        partial = sorted({s for p in pts for s in p.losses} - set(seeds[v]))
        if partial:
            notes.append(f"{v}: seed(s) {partial} lack a run at some ladder point and are left out of the per-seed fits.")
    exact = [v for v, pts in points.items() if len(pts) == MIN_POINTS]
    if exact:
        notes.append(f"{', '.join(exact)}: {MIN_POINTS} ladder points fix E, A and α exactly, leaving no residual degrees "
                     f"of freedom: the law's form cannot be checked, so savings resting on {'these fits' if len(exact) > 1 else 'this fit'} "
                     "get no interval.")
    orders = {o for pts in points.values() for p in pts for o in p.data_seeds.values()}
    if len(orders) == 1 and None not in orders:
        notes.append(f"Every run trained on one data order (data seed {orders.pop()}): the seeds vary only the "
                     "initialisation, so the intervals leave out the variance of the data order.")
    result: dict[str, Any] = {
        "grid": sweep.grid, "axis": sweep.axis, "x": AXIS_SYMBOL[sweep.axis], "metric": sweep.metric,
        "baseline": baseline, "level": level, "conventions": sweep.conventions,
        "paper_convention": PAPER_CONVENTION[sweep.axis], "notes": notes,
        "design": {v: _design(points[v], points[baseline]) for v in others},
        "points": {v: [{"label": p.label, "cell": p.cell, "x": p.x, "epochs": p.epochs,
                        "losses": {str(s): loss for s, loss in p.losses.items()}} for p in pts]
                   for v, pts in points.items()},
        "fits": {}, "savings": {}, "curve_savings": {},
    }
    for convention in sweep.conventions:
        fits, seed_laws = {}, {}
        for v, pts in points.items():
            xs, means = [p.x[convention] for p in pts], _mean_losses(pts)
            law, at_bound = fit_power_law(xs, means)
            seed_laws[v] = {s: fit_power_law(xs, [p.losses[s] for p in pts])[0] for s in seeds[v]}
            fits[v] = {"E": law.E, "A": law.A, "alpha": law.alpha, "at_bound": at_bound,
                       "rms_residual": float(np.sqrt(np.mean((means - law(xs)) ** 2))),
                       "residual_dof": len(pts) - MIN_POINTS,
                       "per_seed": {str(s): {"E": f.E, "A": f.A, "alpha": f.alpha} for s, f in seed_laws[v].items()}}
        result["fits"][convention] = fits
        result["savings"][convention] = {}
        for v in others:
            exact_here = [name for name in (baseline, v) if name in exact]
            no_interval = (f"no interval: the fit of {' and '.join(exact_here)} has no residual degrees of freedom "
                           f"({MIN_POINTS} parameters on {MIN_POINTS} points)") if exact_here else None
            result["savings"][convention][v] = _savings(points[baseline], points[v], convention, seed_laws[baseline],
                                                        seed_laws[v], level, no_interval)
    for v in others:
        result["curve_savings"][v] = curve_savings(points[baseline], points[v], level)
    result["claims"] = _claims(sweep, result)
    return result


def curve_savings(baseline: list[LadderPoint], variant: list[LadderPoint], level: float = 0.95) -> list[dict]:
    """The paper's reading, within one run: 1 - s/S where s is the first step at which the variant's loss
    curve is at or below the baseline run's final loss (same ladder point, same seed) and S the variant's
    last step. Training loss smoothed over TRAIN_LOSS_WINDOW steps; validation loss at its evaluations
    (so s is only as fine as the evaluation interval). None for a seed whose curve never gets there. One reading
    per seed, each resting on its own two runs: a t interval over the seeds (stats.per_seed_t)."""
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
            reached = [v for v in per_seed.values() if v is not None]
            not_reached = len(per_seed) - len(reached)
            # a mean over the seeds that got there would hide the ones that did not: no mean unless all did
            test = _per_seed_t(reached, "two-sided", level) if reached and not not_reached else None
            row[kind] = {"n": len(per_seed), "not_reached": not_reached, "mean": test and test.estimate,
                         "ci_low": test and test.low, "ci_high": test and test.high}
        rows.append(row)
    return rows


def _claims(sweep: Sweep, result: dict) -> list[dict]:
    """The paper's claim for this sweep, judged on the variant's mean saving under the paper's count of x (or, when
    that could not be counted, the other one, saying so). Not tested when a run ends above its bigram reference, or
    when the saving has no interval for a reason more seeds would not cure (a fit without residual degrees of
    freedom, no ladder point inside the measured range); inconclusive whatever the interval when a run is not past
    the unigram plateau."""
    variant, text = PAPER_CLAIMS[sweep.axis]
    if variant not in sweep.points:
        return []
    convention = result["conventions"][0]
    mean = result["savings"][convention][variant]["mean"]
    runs = [(f"{p.cell}/seed{seed}", p.summaries.get(seed) or {}) for v in (sweep.baseline, variant)
            for p in sweep.points[v] for seed in p.losses]
    gate = evidence_gate([RunLosses(name, summary.get("final_val_loss"), summary.get("unigram_val_loss"),
                                    summary.get("bigram_val_loss")) for name, summary in runs])
    stuck = gate.stuck
    notes = []
    if convention != PAPER_CONVENTION[sweep.axis]:
        notes.append(f"judged over {CONVENTION_WORDS[convention]}: {CONVENTION_WORDS[PAPER_CONVENTION[sweep.axis]]} "
                     "(the paper's count) could not be counted")
    if stuck and not gate.not_tested:
        notes.append(f"{len(stuck)} of {len(runs)} runs not past the unigram plateau (final validation loss not "
                     f"{PLATEAU_MARGIN:g} nat below the unigram loss, or no unigram loss logged): {', '.join(stuck[:4])}"
                     + (", ..." if len(stuck) > 4 else ""))
    if gate.not_tested:
        not_tested = gate.not_tested
    elif mean["no_interval"] and (mean["n"] >= 2 or mean["saving"] is None):
        not_tested = mean["no_interval"]
    else:
        not_tested = ""
    if not_tested:
        decided = "not tested"
        notes.insert(0, f"not tested: {not_tested}")
    else:
        decided = verdict(mean["ci_low"], mean["ci_high"], mean["n"], "higher", evidence=not stuck)
    inside = len(mean["points"])
    return [{
        "claim": text, "grid": sweep.grid, "verdict": decided, "note": "; ".join(notes),
        "delta": mean["saving"], "ci_low": mean["ci_low"], "ci_high": mean["ci_high"], "n": mean["n"],
        "df": mean["df"], "design": "per-seed", "seed_design": result["design"][variant], "p_raw": mean["p_raw"],
        "p_two_sided": mean["p_two_sided"], "convention": convention, "paper": PAPER_SAVING[sweep.axis],
        "metric": f"{SAVING_WORDS[sweep.axis]} of {variant} against {sweep.baseline} over {CONVENTION_WORDS[convention]}, "
                  f"mean over the {inside} ladder point(s) inside the measured range of the per-seed fits' savings "
                  f"({sweep.metric} loss; fraction, > 0 = saving)",
    }]


# ----------------------------------------------------------------------------------------------
# output: plots, markdown, JSON


def analyse_grid(grid: str | Path | GridResults, metric: str = "val", axis: str | None = None,
                 variants: Sequence[str] | None = None, level: float = 0.95) -> dict:
    return analyse(load_sweep(grid, metric, axis, variants), level=level)


def scaling_claims(grid_dir: str | Path, metric: str = "val") -> list[dict]:
    """The paper's scaling claims for one sweep grid as plain dicts {claim, grid, verdict, delta, ci_low,
    ci_high, n, p_raw, p_two_sided, design, metric, ...}, for the claims scoreboard. A sweep that cannot be fitted
    raises ScalingError."""
    return analyse_grid(grid_dir, metric=metric)["claims"]


@dataclass(frozen=True)
class SweepAnalysis:
    """A sweep grid's scaling analysis: `fit`, what `analyse` found, when the sweep can be fitted; else `problem`,
    the ScalingError that says why it cannot be yet. Exactly one of the two is set."""

    fit: dict | None = None
    problem: ScalingError | None = None


def sweep_analysis(results: GridResults) -> SweepAnalysis | None:
    """The analysis of a grid marked as a sweep (`report: {scaling: ...}`), made once for both its report section
    and its claim; None for a grid that is no sweep."""
    if not results.report_settings.get("scaling"):
        return None
    try:
        return SweepAnalysis(fit=analyse_grid(results))
    except ScalingError as err:
        return SweepAnalysis(problem=err)
