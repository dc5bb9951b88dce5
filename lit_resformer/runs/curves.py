"""A run's logged metrics as one table, and the smoothing the paper uses for loss curves (§4.1.2).

`RunDir.read_metrics` reads the logs (restarts merged); this module turns its series into a pandas table
indexed by step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lit_resformer.runs.run_dir import (
    TOKENS_SEEN as TOKENS_SEEN,  # one of the metric names below, defined with the run
)
from lit_resformer.runs.run_dir import RunDir

TRAIN_LOSS = "train/loss"
VAL_LOSS = "val/loss"
VAL_DOMAIN_PREFIX = "val/loss/"
UNIGRAM_LOSS = "val/unigram_loss"  # the validation tokens' loss under the training split's unigram (plateau)
UNIGRAM_DOMAIN_PREFIX = "val/unigram_loss/"
BIGRAM_LOSS = "val/bigram_loss"  # ... under the training split's smoothed bigram (the evidence gate)
BIGRAM_DOMAIN_PREFIX = "val/bigram_loss/"
# tokens/s: Lightning's ThroughputMonitor logs items/s (the training module counts items as tokens): the
# all-device rate `items_per_sec` under several devices, only the per-device rate on a single device.
TOKENS_PER_SEC = ("train/tokens_per_sec", "train/items_per_sec", "train/device/items_per_sec")


def read_metrics(run: str | Path | RunDir) -> pd.DataFrame:
    """One row per logged step, one column per metric (NaN where a metric was not logged)."""
    series = (run if isinstance(run, RunDir) else RunDir(run)).read_metrics()
    frame = pd.DataFrame({name: pd.Series(dict(points), dtype=float) for name, points in series.items()})
    frame.index.name = "step"
    return frame.sort_index()


def series(metrics: pd.DataFrame, column: str | tuple[str, ...]) -> pd.Series:
    """A metric without its missing rows; for a tuple, the first of the names that was logged."""
    for name in (column,) if isinstance(column, str) else column:
        if name in metrics.columns:
            return metrics[name].dropna().astype(float)
    return pd.Series(dtype=float, index=pd.Index([], name="step"))


def smooth(values: pd.Series, window: int) -> pd.Series:
    """Trailing moving average over `window` logged steps (shorter at the start of the run)."""
    return values.rolling(window, min_periods=1).mean()


def domains(metrics: pd.DataFrame) -> list[str]:
    return sorted(c.removeprefix(VAL_DOMAIN_PREFIX) for c in metrics.columns if c.startswith(VAL_DOMAIN_PREFIX))


def train_curve(metrics: pd.DataFrame, window: int) -> pd.Series:
    """The training loss smoothed over `window` logged steps, its non-finite values (a diverging run) left out."""
    loss = series(metrics, TRAIN_LOSS)
    return smooth(loss[np.isfinite(loss)], window)
