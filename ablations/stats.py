"""Every statistic of the grid's results: seed aggregates, paired differences with a t confidence interval, percentile
intervals, the plateau gate, the verdict rule of the paper's claims, and the critical point of a relative loss curve
(paper Fig. 14) with its growth across a matrix key."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats


@dataclass(frozen=True)
class Difference:
    """mean of (cell - baseline) over the seeds both have, with a two-sided t interval."""

    mean: float
    low: float | None  # None when n < 2: no interval from a single seed
    high: float | None
    n: int


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    array = np.asarray(values, dtype=float)
    return float(array.mean()), (float(array.std(ddof=1)) if len(array) > 1 else None)


def paired_difference(cell: Mapping[int, float], baseline: Mapping[int, float], level: float = 0.95) -> Difference | None:
    """Difference cell - baseline paired by seed (same seed = same data order), t interval over
    the n paired seeds with n - 1 degrees of freedom."""
    seeds = sorted(set(cell) & set(baseline))
    diffs = np.array([cell[s] - baseline[s] for s in seeds], dtype=float)
    diffs = diffs[np.isfinite(diffs)]
    n = len(diffs)
    if n == 0:
        return None
    mean = float(diffs.mean())
    if n < 2:
        return Difference(mean, None, None, n)
    half = float(stats.t.ppf(0.5 + level / 2, df=n - 1) * diffs.std(ddof=1) / math.sqrt(n))
    return Difference(mean, mean - half, mean + half, n)


PLATEAU_MARGIN = 1.0  # nats below the unigram loss a final validation loss must be to count as evidence
VERDICTS = ("reproduced", "contradicted", "inconclusive")


def plateau_gap(final_val_loss: float | None, unigram_loss: float | None) -> float | None:
    """Nats by which a run's final validation loss is below its unigram reference (None: not both logged). A model
    at the plateau has learnt token frequencies, not the effect a claim is about."""
    return None if final_val_loss is None or unigram_loss is None else unigram_loss - final_val_loss


def past_plateau(final_val_loss: float | None, unigram_loss: float | None) -> bool:
    gap = plateau_gap(final_val_loss, unigram_loss)
    return gap is not None and gap >= PLATEAU_MARGIN


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


def percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates; the quantiles are order statistics, so -inf (a variant that never
    reaches a loss) is kept."""
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return float(lo), float(hi)


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
