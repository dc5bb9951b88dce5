"""Synthetic grids of the select block (a pilot over learning rates, confirmation seeds at the chosen points) and of
the ladder (rungs at several budgets), as the runner leaves them, with known effects: for the verdict and report
tests. Each builder copies a manifest made once (`manifest` fixtures: load_grid resolves every cell) and writes
the runs' summaries."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from lit_resformer.runs.claim_spec import Claim
from lit_resformer.runs.results import GridResults, load_results
from tests.helpers.claims_grids import grid_dir_from, write_summary

LRS = [5.0e-4, 1.0e-3, 2.0e-3, 4.0e-3]
GRID = {
    "baseline": "vanilla",
    "seeds": [0, 1],
    "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"},
              "svformer": {"model.config.share.svformer": True}},
    "matrix": {"model.lr": LRS},
    "select": {"over": "model.lr", "arms": ["vanilla", "resformer"], "seeds": [2, 3, 4],
               "confirm": {"vanilla": ["best"], "resformer": ["best", "best:vanilla"]}},
    "claims": [{"claim": "tuned", "a": "resformer", "b": "vanilla", "metric": "val_loss_each_at_best",
                "direction": "lower"}],
}
# pilot means: vanilla is best at 1e-3, ResFormer at 2e-3
PILOT = {"vanilla": {5.0e-4: 5.0, 1.0e-3: 4.6, 2.0e-3: 4.7, 4.0e-3: 4.9},
         "resformer": {5.0e-4: 4.9, 1.0e-3: 4.55, 2.0e-3: 4.2, 4.0e-3: 4.8}}


def name(arm: str, lr: float) -> str:
    return f"{arm},lr={lr:g}"


def tuned_manifest(folder: Path) -> Path:
    """The select grid's manifest as the runner writes it."""
    return grid_dir_from(folder, "tuned", GRID) / "grid.yaml"


def tuned_grid(tmp_path: Path, manifest: Path, confirmed: dict[str, float]) -> GridResults:
    """The pilot (seeds 0-1) and the confirmation seeds 2-4 at the chosen points, with `confirmed`: cell -> its
    final loss on every confirmation seed (plus a seed's offset, shared by its runs)."""
    grid_dir = tmp_path / "runs" / "tuned"
    grid_dir.mkdir(parents=True)
    shutil.copy(manifest, grid_dir / "grid.yaml")
    for arm, losses in PILOT.items():
        for lr, loss in losses.items():
            for seed in (0, 1):
                write_summary(grid_dir, name(arm, lr), seed, loss + 0.01 * seed)
    for lr in LRS:
        for seed in (0, 1):
            write_summary(grid_dir, name("svformer", lr), seed, 4.7 + (0.2 + 0.03 * seed) * LRS.index(lr))
    for cell, loss in confirmed.items():
        for seed, offset in zip((2, 3, 4), (0.0, 0.05, -0.04), strict=True):
            write_summary(grid_dir, cell, seed, loss + offset + (0.004 * seed if cell.startswith("resformer") else 0))
    return load_results(grid_dir)


BUDGETS = [1000, 2000, 4000, 8000]
LADDER_GRID = {"baseline": "vanilla", "seeds": [0, 1, 2],
               "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}},
               "ladder": {"budgets": BUDGETS, "decay_fraction": 0.2},
               "claims": [{"claim": "constant", "a": "resformer", "b": "vanilla", "metric": "data_saving_slope",
                           "over": "trainer.max_steps", "direction": "flat", "margin": 0.05}]}
SAVING_CLAIM = Claim("constant", "resformer", "vanilla", "data_saving_slope", "flat", over="trainer.max_steps",
                     margin=0.05)


def ladder_manifest(folder: Path) -> Path:
    """The ladder grid's manifest as the runner writes it."""
    return grid_dir_from(folder, "ladder", LADDER_GRID) / "grid.yaml"


def vanilla(budget: float, offset: float) -> float:
    return 5.5 - 0.3 * math.log2(budget / 1000) + offset


def ladder(tmp_path: Path, manifest: Path, multiplier) -> GridResults:
    """vanilla's end-of-decay loss falls 0.3 nats per doubling; ResFormer at budget B reaches vanilla's loss at
    multiplier(B, seed) x B."""
    grid_dir = tmp_path / "runs" / "ladder"
    grid_dir.mkdir(parents=True)
    shutil.copy(manifest, grid_dir / "grid.yaml")
    for seed, offset in enumerate((0.0, 0.02, -0.03)):
        for budget in BUDGETS:
            write_summary(grid_dir, f"vanilla,max_steps={budget}", seed, vanilla(budget, offset))
            write_summary(grid_dir, f"resformer,max_steps={budget}", seed,
                          vanilla(multiplier(budget, seed) * budget, offset))
    return load_results(grid_dir)
