"""Synthetic grid run directories for the report tests: the manifest the runner writes and runs' metrics in
Lightning's CSV layout with their summaries."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import yaml

from lit_resformer.grids.spec import load_grid

BASE = {
    "seed_everything": 0,
    "trainer": {"max_steps": 100},
    "model": {"config": {"size": "tiny"}, "lr": 1e-3},
    "data": {"seq_len": 64},
}


def make_grid_dir(tmp_path: Path, grid: dict) -> Path:
    """The grid.yaml manifest the runner writes, from a real grid file."""
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"name": "g", "base": "base.yaml", **grid}, sort_keys=False))
    grid_dir = tmp_path / "runs/g"
    grid_dir.mkdir(parents=True)
    (grid_dir / "grid.yaml").write_text(yaml.safe_dump(load_grid(path).manifest(), sort_keys=False))
    return grid_dir


def write_run(grid_dir: Path, cell: str, seed: int, train: dict[int, float], val: dict[int, dict[str, float]] | None = None,
              status: str = "done", **summary) -> Path:
    """csv/version_0/metrics.csv in Lightning's layout (train and val on separate rows) + summary.json."""
    run = grid_dir / cell / f"seed{seed}"
    (run / "csv/version_0").mkdir(parents=True)
    val = val or {}
    domains = sorted({d for v in val.values() for d in v})
    columns = ["step", "train/loss", "train/items_per_sec", "val/loss", *(f"val/loss/{d}" for d in domains)]
    with open(run / "csv/version_0/metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for step, loss in train.items():
            writer.writerow({"step": step, "train/loss": loss, "train/items_per_sec": 1000.0})
            if step in val:
                writer.writerow({"step": step, "val/loss": np.mean(list(val[step].values())),
                                 **{f"val/loss/{d}": v for d, v in val[step].items()}})
    (run / "summary.json").write_text(json.dumps({"grid": "g", "cell": cell, "seed": seed, "status": status,
                                                  "params": 1000, "kv_cache_bytes_per_token": 512,
                                                  "tokens_per_sec": 1000.0, **summary}))
    return run


VANILLA_VAL = {0: 3.00, 1: 3.10, 2: 2.90}
RESFORMER_VAL = {0: 2.97, 1: 3.05, 2: 2.89}


def synthetic_grid(tmp_path: Path) -> Path:
    """Three seeds of vanilla and ResFormer, and a cell whose runs diverged or failed."""
    grid_dir = make_grid_dir(tmp_path, {
        "baseline": "vanilla", "seeds": [0, 1, 2],
        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}, "bad": {"model.lr": 10.0}},
    })
    for seed in (0, 1, 2):
        base_curve = {s: 2 + 4 * math.exp(-s / 40) + 0.01 * seed for s in range(200)}
        write_run(grid_dir, "vanilla", seed, base_curve,
                  {99: {"code": 3.5, "english": 3.6}, 199: {"code": VANILLA_VAL[seed] - 0.1, "english": VANILLA_VAL[seed] + 0.1}})
        write_run(grid_dir, "resformer", seed, {s: v - 0.05 for s, v in base_curve.items()},
                  {99: {"code": 3.4, "english": 3.5}, 199: {"code": RESFORMER_VAL[seed] - 0.1, "english": RESFORMER_VAL[seed] + 0.1}},
                  params=1024, kv_cache_bytes_per_token=512)
    # each seed trains on its own data order (data.seed null follows seed_everything), shared by a seed's two runs
    for run in grid_dir.glob("*/seed*"):
        seed = int(run.name.removeprefix("seed"))
        (run / "experiment.yaml").write_text(yaml.safe_dump({**BASE, "seed_everything": seed, "data": {"seed": None}}))
    write_run(grid_dir, "bad", 0, {0: 5.0, 1: 6.0}, status="diverged", diverged_step=2)
    write_run(grid_dir, "bad", 1, {0: 5.0}, status="failed", error="RuntimeError: out of memory\nmore")
    return grid_dir
