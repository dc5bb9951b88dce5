"""A ladder's claim that a's data saving is constant across budgets: contradicted by a trend, reproduced within its
margin, judged on the per-seed slope of the saving against log2 budget."""

import math
import shutil

import pytest

from lit_resformer.grids.claim_spec import Claim
from lit_resformer.measures.grid_results import load_results
from tests.helpers.claims_grids import grid_dir_from, judged, write_summary

BUDGETS = [1000, 2000, 4000, 8000]
GRID = {"baseline": "vanilla", "seeds": [0, 1, 2], "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}},
        "ladder": {"budgets": BUDGETS, "decay_fraction": 0.2}}
CLAIM = Claim("constant", "resformer", "vanilla", "data_saving_slope", "flat", over="trainer.max_steps", margin=0.05)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return grid_dir_from(tmp_path_factory.mktemp("ladder"), "ladder", GRID) / "grid.yaml"


def vanilla(budget: float, offset: float) -> float:
    return 5.5 - 0.3 * math.log2(budget / 1000) + offset


def ladder(tmp_path, manifest, multiplier) -> object:
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


def test_a_constant_multiplier_reproduces_a_constant_saving(tmp_path, manifest):
    # 25% more data at every budget, with seed-to-seed noise that has no trend
    noise = {(b, s): 0.02 * ((i + s) % 3 - 1) for i, b in enumerate(BUDGETS) for s in range(3)}
    verdict = judged(CLAIM, ladder(tmp_path, manifest, lambda budget, seed: 1.25 + noise[budget, seed]))
    assert verdict.n == 3 and abs(verdict.delta) < 0.01
    assert verdict.unadjusted == "reproduced" and "within the margin +-0.05" in verdict.note
    assert verdict.p_two_sided < 0.05  # the two one-sided tests' p, which the grid's Holm adjustment sees
    assert "saving(s) need vanilla's losses extended beyond its rungs" in verdict.note  # the top rung's B' > 8000


def test_a_saving_that_shrinks_with_the_budget_contradicts_it(tmp_path, manifest):
    verdict = judged(CLAIM, ladder(tmp_path, manifest,
                                         lambda budget, seed: 1.6 - 0.1 * math.log2(budget / 1000) + 0.01 * seed))
    assert verdict.unadjusted == "contradicted" and verdict.delta < 0 and verdict.high < 0
