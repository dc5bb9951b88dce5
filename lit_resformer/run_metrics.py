"""Read a run's logged series back, across resumptions.

Every (re)start of a run writes a new `csv/version_N/metrics.csv` (Lightning's CSVLogger). A resumed run
repeats the steps after its last checkpoint, so when versions overlap the later version wins from its
first training step on. The result is one series per metric, as the uninterrupted run would have logged it.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path


def metric_files(run_dir: str | Path) -> list[Path]:
    files = Path(run_dir).glob("csv/version_*/metrics.csv")
    return sorted(files, key=lambda p: int(p.parent.name.split("_")[-1]))


def read_metrics(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """{metric name: [(step, value), ...]} sorted by step, merged over all restarts of the run."""
    series: dict[str, dict[int, float]] = {}
    for path in metric_files(run_dir):
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("step") not in (None, "")]
        if not rows:
            continue
        trained = [int(float(r["step"])) for r in rows if r.get("train/loss")]
        first_step = min(trained, default=None)
        for steps in series.values():  # this restart redoes everything from its first training step on
            for s in [s for s in steps if first_step is not None and s >= first_step]:
                del steps[s]
        for row in rows:
            step = int(float(row["step"]))
            for key, value in row.items():
                if key in ("step", "epoch") or value in (None, ""):
                    continue
                series.setdefault(key, {})[step] = float(value)
    return {k: sorted(v.items()) for k, v in series.items() if v}


def last_value(series: dict[str, list[tuple[int, float]]], name: str) -> float:
    values = series.get(name)
    return values[-1][1] if values else math.nan
