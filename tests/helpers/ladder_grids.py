"""A small ladder grid (two arms, three rungs, two seeds) for the fake trainer and for tiny real runs: the grid
file and its base experiment, written into a test's folder."""

from __future__ import annotations

import yaml

BASE = {
    "seed_everything": 0,
    "trainer": {"max_steps": 20, "val_check_interval": 5, "precision": "32-true"},
    "checkpoint": {"every_n_train_steps": 5},
    "model": {"config": {"size": "tiny"}, "lr": 2.0e-3, "warmup_steps": 2},
    "data": {"seq_len": 64, "micro_batch_size": 2},
}
LADDER = {
    "name": "ladder",
    "baseline": "vanilla",
    "seeds": [0, 1],
    "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}},
    "ladder": {"budgets": [10, 20, 30], "decay_fraction": 0.2},
    "claims": [{"claim": "constant", "a": "resformer", "b": "vanilla", "metric": "data_saving_slope",
                "over": "trainer.max_steps", "direction": "flat", "margin": 0.05}],
}


def write_grid(folder, grid: dict, name: str = "grid.yaml"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "base.yaml").write_text(yaml.safe_dump(BASE))
    path = folder / name
    path.write_text(yaml.safe_dump({"base": "base.yaml", **grid}, sort_keys=False))
    return path
