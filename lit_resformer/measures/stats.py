"""Every statistic of the grid's results: seed aggregates, the seed design of a comparison and its t interval, the
plateau and bigram gates, the verdict rule of the paper's claims, and the critical point of a relative loss curve
(paper Fig. 14) with its growth across a matrix key."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd
from scipy import stats


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    array = np.asarray(values, dtype=float)
    return float(array.mean()), (float(array.std(ddof=1)) if len(array) > 1 else None)


PLATEAU_MARGIN = 1.0  # nats below the unigram loss a final validation loss must be to count as evidence
VERDICTS = ("reproduced", "contradicted", "inconclusive", "not tested")
ALPHA = 0.05  # the claims' error rate: 95% intervals, and adjusted p-values that must fall below it
# The suite's one error-control rule (README): a comparison is reproduced or contradicted when its two-sided 95%
# interval excludes zero (or its margin's bound) on that side AND its two-sided p, Holm-adjusted within its grid's
# family of comparisons, is below ALPHA -- the same test and the same alpha for either direction; the grid report and
# the scoreboard show that one verdict (a comparison of runs another grid trained is tested in that grid's family
# only: lit_resformer.verdicts.judgements.Judgements.owner). Benjamini-Hochberg is kept for callers that want it; no
# verdict uses it.


def plateau_gap(final_val_loss: float | None, unigram_loss: float | None) -> float | None:
    """Nats by which a run's final validation loss is below its unigram reference (None: not both logged). A model
    at the plateau has learnt token frequencies, not the effect a claim is about."""
    return None if final_val_loss is None or unigram_loss is None else unigram_loss - final_val_loss


def past_plateau(final_val_loss: float | None, unigram_loss: float | None) -> bool:
    gap = plateau_gap(final_val_loss, unigram_loss)
    return gap is not None and gap >= PLATEAU_MARGIN


@dataclass(frozen=True)
class RunLosses:
    """What the evidence gate reads of one run: its final validation loss and the two count-model references of
    the same validation tokens (None where not logged)."""

    name: str
    final_val_loss: float | None
    unigram_loss: float | None
    bigram_loss: float | None


@dataclass(frozen=True)
class Gate:
    """Whether a comparison's runs can decide a claim. `not_tested` names the failed precondition ("" when none
    failed); `stuck` are the runs not past the unigram plateau: their comparison is judged but never decisive."""

    not_tested: str
    stuck: tuple[str, ...]


def evidence_gate(runs: Sequence[RunLosses]) -> Gate:
    """A claim is judged only on runs that end below their bigram reference: above it, an architecture comparison
    measures how fast each model climbs toward pair statistics, not the effect claimed. A run without a bigram
    reference (trained before it was logged, and not added since) cannot show that it is past it, so its
    comparisons are not tested either."""
    early = [r.name for r in runs if r.bigram_loss is not None
             and (r.final_val_loss if r.final_val_loss is not None else math.inf) > r.bigram_loss]
    unknown = [r.name for r in runs if r.bigram_loss is None]
    stuck = tuple(sorted(r.name for r in runs if not past_plateau(r.final_val_loss, r.unigram_loss)))
    if early:
        return Gate("early-training regime (above the bigram reference): " + _listed(early), stuck)
    if unknown:
        return Gate("no bigram reference for " + _listed(unknown) + " (trained before the evidence gate existed; "
                    "`lit-resformer add-references` computes it where the run's data can be rebuilt)", stuck)
    return Gate("", stuck)


def _listed(names: Sequence[str], shown: int = 6) -> str:
    names = sorted(names)
    return ", ".join(names[:shown]) + (f", ... ({len(names)} runs)" if len(names) > shown else "")


def verdict(low: float | None, high: float | None, n: int, direction: str, evidence: bool = True) -> str:
    """The claims rule on an interval of a claimed effect: reproduced when it excludes zero on the claimed side
    (`direction` lower: below zero; higher: above), contradicted when it excludes zero on the other side, else
    inconclusive, as also without an interval, with fewer than 2 seeds, or when the runs are no `evidence` (one is
    not past the plateau). An infinite end (a scaling law that never reaches a loss) is an end like any other."""
    if not evidence or n < 2 or low is None or high is None:
        return "inconclusive"
    claimed = -1 if direction == "lower" else 1
    if claimed * low > 0 and claimed * high > 0:
        return "reproduced"
    if claimed * low < 0 and claimed * high < 0:
        return "contradicted"
    return "inconclusive"


def fragile(decided: str, p_adjusted: float | None) -> bool:
    """A reproduced or contradicted verdict whose adjusted p is in [ALPHA/2, ALPHA): decided, but near enough the line
    that one more comparison in its family would undo it. Every display labels it "(fragile)"."""
    return decided in ("reproduced", "contradicted") and p_adjusted is not None and ALPHA / 2 <= p_adjusted < ALPHA


def adjusted_verdict(unadjusted: str, p_adjusted: float | None) -> str:
    """A reproduced or contradicted verdict stands only while its two-sided test still rejects at ALPHA after the
    p-value is adjusted for the other comparisons of its family (Holm, Benjamini-Hochberg); adjusting can only
    raise a p-value, so other verdicts stay as they are."""
    if unadjusted in ("reproduced", "contradicted") and (p_adjusted is None or p_adjusted >= ALPHA):
        return "inconclusive"
    return unadjusted


def critical_point_growth(points: Sequence[tuple[float, pd.Series]]) -> tuple[float | None, bool]:
    """(slope, censored) of log2(1 + critical step) against log2(x), least squares, over one seed's (x, relative
    training-loss curve) points. Where the baseline never overtakes the cell the last logged step stands in as a
    lower bound (censored): above the mean log2(x) that can only lower the fitted slope below the true one, below it
    the fit would overstate the growth, so the slope is None then, as it is when a curve is empty."""
    x, y, censored = [], [], []
    for value, relative in sorted(points, key=lambda p: p[0]):
        if relative.empty:
            return None, False
        step = critical_point(relative)
        x.append(math.log2(value))
        y.append(math.log2(1 + (relative.index[-1] if step is None else step)))
        censored.append(step is None)
    if any(c and xi <= np.mean(x) for xi, c in zip(x, censored, strict=True)):
        return None, True
    return float(np.polyfit(x, y, 1)[0]), any(censored)


def critical_point(relative: pd.Series) -> int | None:
    """First step after which `relative` (cell minus baseline, smoothed) stays above zero: the step
    where the baseline overtakes the cell for good. None if the cell is still at or below the
    baseline at the last step; the first step if it is above all along."""
    values = relative.dropna()
    if values.empty or values.iloc[-1] <= 0:
        return None
    at_or_below = np.flatnonzero(values.to_numpy() <= 0)
    start = 0 if len(at_or_below) == 0 else at_or_below[-1] + 1
    return int(values.index[start])


# ----------------------------------------------------------------------------------------------
# Seed comparisons and their p-values, per-seed estimates, and corrections for multiple comparisons.
#
# A claim compares a cell with a baseline over seeds. Its design decides the interval:
#   paired    the cell's and the baseline's run of one seed trained on the same data order, and the seeds differ
#             in it: the differences per seed remove that shared data-order noise (`scipy.stats.ttest_rel`);
#   unpaired  anything else (each seed's data order its own, or one order shared by every run so that seeds
#             vary only the initialisation): Welch's two-sample t, which assumes no equal variances
#             (`scipy.stats.ttest_ind(equal_var=False)`); with 2 or 3 seeds a side it may cover more than its
#             nominal level (95% intervals: up to 97.7% at 2 seeds, 96.6% at 3), by 5 seeds it is at it;
#   per-seed  a quantity estimated once per seed (a scaling saving refitted on each seed's ladder): the one-sample
#             t over those estimates (`scipy.stats.ttest_1samp`).
# A claim has a direction ("ResFormer is lower"), so its test is one-sided ("less" or "greater", scipy's names):
# the p-value is that of the direction and the interval is the matching one-sided one (one bound infinite), so
# that p < 1 - level exactly when the interval excludes zero. "two-sided" gives the usual two-sided pair.
# Every function takes the seeds on the last axis and broadcasts over leading ones (a simulation draws many
# grids at once); with no leading axes the fields are floats.

Alternative = Literal["two-sided", "less", "greater"]
ALTERNATIVES: tuple[str, ...] = get_args(Alternative)
Design = Literal["paired", "unpaired", "per-seed"]


@dataclass(frozen=True)
class SeedTest:
    """A t interval and p-value over seeds. `estimate` is the mean difference cell - baseline (paired, unpaired)
    or the mean of the per-seed estimates; `low`/`high` are None (and `p` too) when there are too few seeds."""

    design: Design
    n: int  # the seeds it rests on: pairs, per-seed estimates, or the smaller side of an unpaired comparison
    estimate: float | np.ndarray
    low: float | np.ndarray | None
    high: float | np.ndarray | None
    p: float | np.ndarray | None
    df: float | np.ndarray | None  # degrees of freedom (Welch's are fractional)
    alternative: Alternative
    level: float


def _check_test_arguments(alternative: str, level: float) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative: must be one of {', '.join(ALTERNATIVES)}, got {alternative!r}")
    if not 0 < level < 1:
        raise ValueError(f"level: must be in (0, 1), got {level!r}")


def _scalar(value: Any) -> Any:
    array = np.asarray(value, dtype=float)
    return float(array) if array.ndim == 0 else array


def _seed_test(design: Design, n: int, estimate: Any, result: Any, alternative: Alternative, level: float) -> SeedTest:
    interval = result.confidence_interval(confidence_level=level)
    return SeedTest(design, n, _scalar(estimate), _scalar(interval.low), _scalar(interval.high),
                    _scalar(result.pvalue), _scalar(result.df), alternative, level)


def _no_interval(design: Design, n: int, estimate: Any, alternative: Alternative, level: float) -> SeedTest:
    return SeedTest(design, n, _scalar(estimate), None, None, None, None, alternative, level)


def paired_t(cell: Any, baseline: Any, alternative: Alternative = "two-sided", level: float = 0.95) -> SeedTest:
    """cell - baseline paired by position on the last axis (the same seed, which the caller ensures shares one
    data order): the t interval of the mean difference with n - 1 degrees of freedom, and its p-value."""
    _check_test_arguments(alternative, level)
    cell, baseline = np.asarray(cell, dtype=float), np.asarray(baseline, dtype=float)
    if cell.shape[-1:] != baseline.shape[-1:]:
        raise ValueError(f"paired_t: cell and baseline need the same seeds, got {cell.shape[-1]} and {baseline.shape[-1]}")
    n, estimate = cell.shape[-1], (cell - baseline).mean(axis=-1)
    if n < 2:
        return _no_interval("paired", n, estimate, alternative, level)
    return _seed_test("paired", n, estimate, stats.ttest_rel(cell, baseline, axis=-1, alternative=alternative),
                      alternative, level)


def welch_t(cell: Any, baseline: Any, alternative: Alternative = "two-sided", level: float = 0.95) -> SeedTest:
    """Mean of cell - mean of baseline over independent seeds (sizes may differ): Welch's t interval and p-value."""
    _check_test_arguments(alternative, level)
    cell, baseline = np.asarray(cell, dtype=float), np.asarray(baseline, dtype=float)
    n, estimate = min(cell.shape[-1], baseline.shape[-1]), cell.mean(axis=-1) - baseline.mean(axis=-1)
    if n < 2:
        return _no_interval("unpaired", n, estimate, alternative, level)
    result = stats.ttest_ind(cell, baseline, axis=-1, equal_var=False, alternative=alternative)
    return _seed_test("unpaired", n, estimate, result, alternative, level)


def per_seed_t(estimates: Any, alternative: Alternative = "two-sided", level: float = 0.95) -> SeedTest:
    """The t interval of the mean of per-seed estimates (e.g. a saving refitted on each seed), p against zero."""
    _check_test_arguments(alternative, level)
    estimates = np.asarray(estimates, dtype=float)
    n = estimates.shape[-1]
    if n < 2:
        return _no_interval("per-seed", n, estimates.mean(axis=-1), alternative, level)
    result = stats.ttest_1samp(estimates, 0.0, axis=-1, alternative=alternative)
    return _seed_test("per-seed", n, estimates.mean(axis=-1), result, alternative, level)


def run_data_seed(config: Mapping[str, Any]) -> int | None:
    """The seed of a run's training order from its resolved config: data.seed, or when that is null the run's
    seed_everything; None when neither is an integer (no known order)."""
    data_seed = (config.get("data") or {}).get("seed")
    seed = data_seed if data_seed is not None else config.get("seed_everything")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def seed_design(cell_data_seeds: Mapping[int, int | None], baseline_data_seeds: Mapping[int, int | None]) -> Design:
    """"paired" when, for every seed both sides ran (at least two), the cell's and the baseline's run share one
    known data order and different seeds have different orders: pairing then removes noise the pair shares.
    Otherwise "unpaired": pairs that do not share the order have nothing in common to remove, and when every run
    has the same order the seeds vary only the initialisation, which differs between architectures anyway."""
    seeds = sorted(set(cell_data_seeds) & set(baseline_data_seeds))
    orders = [cell_data_seeds[s] for s in seeds]
    shared = all(cell_data_seeds[s] is not None and cell_data_seeds[s] == baseline_data_seeds[s] for s in seeds)
    return "paired" if len(seeds) >= 2 and shared and len(set(orders)) == len(orders) else "unpaired"


def compare_seeds(cell: Mapping[int, float], baseline: Mapping[int, float], design: Design,
                  alternative: Alternative = "two-sided", level: float = 0.95) -> SeedTest:
    """cell - baseline from per-seed values in `design` (see `seed_design`): paired over the seeds both have,
    unpaired over every finite value of each side."""
    if design == "paired":
        seeds = [s for s in sorted(set(cell) & set(baseline)) if math.isfinite(cell[s]) and math.isfinite(baseline[s])]
        return paired_t([cell[s] for s in seeds], [baseline[s] for s in seeds], alternative, level)
    if design == "unpaired":
        finite = [[v for v in side.values() if math.isfinite(v)] for side in (cell, baseline)]
        return welch_t(*finite, alternative=alternative, level=level)
    raise ValueError(f"design: must be 'paired' or 'unpaired' for a comparison of two sides, got {design!r}")


# ----------------------------------------------------------------------------------------------
# Looking for a critical point seed by seed (paper Fig. 14: vanilla overtakes SVFormer in the end). A seed either
# crossed within its budget (critical_point) or did not; when every seed crossed, the critical step gets a t
# interval over seeds on the log scale (a step count is positive and skewed, and Fig. 14 reads it on log axes): the
# geometric mean of 1 + step, minus one, with the back-transformed interval. When some did not, what is known is the
# lead at the last step and where it is heading: the gap's least-squares slope over the last quarter of training,
# per seed, with the t interval over seeds.

TREND_TAIL = 0.25  # the gap's trend is fitted on this last fraction of the steps every seed logged
TREND_UNIT = 1000  # steps per unit of the trend: nats per 1,000 steps


@dataclass(frozen=True)
class CrossingSearch:
    """Where a baseline overtakes a cell for good, looked for in each seed's relative training-loss curve (cell
    minus baseline, smoothed; below zero the cell is ahead) up to the last step every seed logged."""

    steps: dict[int, int | None]  # seed -> critical step; None: the cell is still ahead at last_step
    last_step: int
    tail_start: int  # first step of the trend's fit
    crossing: tuple[float, float | None, float | None]  # geometric-mean critical step, its interval (None unless all crossed)
    last_gap: SeedTest  # relative loss at last_step, one-sided "less": is the cell still ahead?
    trend: SeedTest  # slope in nats per TREND_UNIT steps, one-sided "greater": is the lead shrinking?

    @property
    def crossed(self) -> int:
        return sum(step is not None for step in self.steps.values())

    @property
    def steps_to_close(self) -> float | None:
        """Steps after last_step until the mean gap reaches zero if the mean trend held: a straight line drawn past
        the measured range, an extrapolation and not a measurement. None unless the cell is ahead on average and
        its lead shown to shrink (the trend's one-sided test rejects at ALPHA)."""
        gap, slope = float(self.last_gap.estimate), float(self.trend.estimate)
        if gap >= 0 or slope <= 0 or self.trend.p is None or float(self.trend.p) >= ALPHA:
            return None
        return -gap / slope * TREND_UNIT


def search_crossing(curves: Mapping[int, pd.Series], tail: float = TREND_TAIL, level: float = 0.95) -> CrossingSearch:
    """CrossingSearch over seed -> relative curve, on the steps every curve logged."""
    if not 0 < tail <= 1:
        raise ValueError(f"tail: must be in (0, 1], got {tail!r}")
    frame = pd.concat(dict(curves), axis=1).dropna() if curves else pd.DataFrame()
    if frame.empty:
        raise ValueError("search_crossing: needs at least one seed's curve with logged steps")
    steps = {int(seed): critical_point(frame[seed]) for seed in frame.columns}
    logs = np.log1p([s for s in steps.values() if s is not None])
    mean_step = float(np.expm1(logs.mean())) if len(logs) else math.nan
    low = high = None
    if len(logs) == len(steps) >= 2:
        if np.ptp(logs) == 0:
            low = high = mean_step
        else:
            low, high = (float(np.expm1(v)) for v in stats.t.interval(level, len(logs) - 1, loc=logs.mean(),
                                                                      scale=stats.sem(logs)))
    index = frame.index.to_numpy(dtype=float)
    tail_rows = frame.loc[index >= index[0] + (1 - tail) * (index[-1] - index[0])]
    if len(tail_rows) >= 2:
        slopes = [float(np.polyfit(tail_rows.index.to_numpy(dtype=float), tail_rows[s].to_numpy(), 1)[0]) * TREND_UNIT
                  for s in frame.columns]
    else:
        slopes = [math.nan] * len(frame.columns)
    return CrossingSearch(steps=steps, last_step=int(frame.index[-1]), tail_start=int(tail_rows.index[0]),
                          crossing=(mean_step, low, high),
                          last_gap=_spread_t(frame.iloc[-1].to_numpy(), "less", level),
                          trend=_spread_t(np.array(slopes), "greater", level))


def change_between(after: SeedTest, before: SeedTest) -> SeedTest:
    """How far an effect moved between two regimes: `after.estimate - before.estimate`, two estimates from disjoint
    runs (independent), each a two-sided t interval with its degrees of freedom. Each interval gives back its
    standard error (half-width over its t quantile); the change's interval is Welch's: the standard errors added in
    quadrature, the Welch-Satterthwaite degrees of freedom, at the level both were built at. No interval where
    either has none, or either is not a two-sided t interval (a saving's log-scale interval is not symmetric)."""
    if (after.low is None or before.low is None or after.df is None or before.df is None
            or (after.alternative, before.alternative) != ("two-sided", "two-sided")):
        return _no_interval("unpaired", min(after.n, before.n), np.asarray(after.estimate) - np.asarray(before.estimate),
                            "two-sided", after.level)
    if after.level != before.level:
        raise ValueError(f"change_between: both intervals need one level, got {after.level} and {before.level}")
    quantile = (1 + after.level) / 2
    se_after = (np.asarray(after.high) - np.asarray(after.low)) / (2 * stats.t.ppf(quantile, after.df))
    se_before = (np.asarray(before.high) - np.asarray(before.low)) / (2 * stats.t.ppf(quantile, before.df))
    se = np.sqrt(se_after**2 + se_before**2)
    df = se**4 / (se_after**4 / np.asarray(after.df) + se_before**4 / np.asarray(before.df))
    estimate = np.asarray(after.estimate) - np.asarray(before.estimate)
    half = stats.t.ppf(quantile, df) * se
    p = 2 * stats.t.sf(np.abs(estimate) / se, df)
    return SeedTest("unpaired", min(after.n, before.n), _scalar(estimate), _scalar(estimate - half),
                    _scalar(estimate + half), _scalar(p), _scalar(df), "two-sided", after.level)


def _spread_t(estimates: np.ndarray, alternative: Alternative, level: float) -> SeedTest:
    """per_seed_t, or no interval where the seeds agree exactly (a t interval needs a spread; only constructed
    curves have none)."""
    if len(estimates) >= 2 and (not np.all(np.isfinite(estimates)) or np.ptp(estimates) == 0):
        return _no_interval("per-seed", len(estimates), float(np.mean(estimates)), alternative, level)
    return per_seed_t(estimates, alternative, level)


def _p_values(p_values: Any) -> np.ndarray:
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"p-values: must be a 1-d list of numbers in [0, 1], got {p_values!r}")
    return p


def holm(p_values: Any) -> np.ndarray:
    """Holm's step-down adjusted p-values (controls the family-wise error rate within one family, e.g. the claims
    of one figure): the k-th smallest of m is multiplied by m - k + 1, then made non-decreasing in that order."""
    p = _p_values(p_values)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate(np.minimum(p[order] * (len(p) - np.arange(len(p))), 1.0))
    adjusted = np.empty_like(p)
    adjusted[order] = stepped
    return adjusted


def benjamini_yekutieli(p_values: Any) -> np.ndarray:
    """Benjamini-Yekutieli q-values: the false-discovery rate across a whole scoreboard under any dependence between
    the tests (comparisons sharing a baseline's runs are positively dependent, and some share more), at the price of
    Benjamini-Hochberg's q times sum_{i<=m} 1/i. A robustness column beside the per-grid Holm rule, never the rule."""
    p = _p_values(p_values)
    return stats.false_discovery_control(p, method="by") if len(p) else p
