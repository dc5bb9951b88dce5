"""Statistics of the report: seed aggregates, paired differences with a t confidence interval, and
the critical point of a relative loss curve (paper Fig. 14)."""

from __future__ import annotations

import math
from collections.abc import Mapping
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
