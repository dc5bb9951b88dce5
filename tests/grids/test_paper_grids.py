"""The paper-figure grid files express the paper's equations (each tier read with its figure, as the runner reads it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lit_resformer.model import ModelConfig
from lit_resformer.model.config import ResidualConfig
from tests.helpers.repository_grids import repository_grid

# Each test reads the repository's grid files (a LightningCLI parser and every cell resolved, per grid).
pytestmark = pytest.mark.integration

GRIDS = Path(__file__).resolve().parents[2] / "configs" / "grids"
PAPER_TIER = "paper/"  # configs/grids/paper/<figure>.yaml; the quick tier's is configs/grids/<figure>.yaml


def _grid(name: str):
    return repository_grid(f"{name}.yaml")


def _cell(grid: str, cell: str) -> dict:
    return next(c.overrides for c in _grid(grid).cells if c.name == cell)


def _model(grid: str, cell: str) -> ModelConfig:
    prefix = "model.config."
    fields = {k[len(prefix):]: v for k, v in _cell(grid, cell).items() if k.startswith(prefix)}
    return ModelConfig.preset("82M" if grid.startswith(PAPER_TIER) else "tiny", **fields)


@pytest.mark.parametrize("tier", ["", PAPER_TIER])
def test_fig10_identity_cell_is_eq6_and_fig11_all_cell_is_eq5(tier):
    assert _model(f"{tier}fig10", "identity").residual == ResidualConfig(
        target="v", mapping="identity", source="all", self_weight=1.0, lam=1.0)
    assert _model(f"{tier}fig11", "source-all").residual == ResidualConfig(
        target="v", source="all", self_weight="uniform", lam="uniform")
    assert _model(f"{tier}fig11", "source-all-half").residual == ResidualConfig(target="v", source="all")
    assert _model(f"{tier}fig11", "source-previous").residual.source == "previous"


@pytest.mark.parametrize("tier", ["", PAPER_TIER])
def test_learnable_grid_has_the_tied_form_and_its_own_lr(tier):
    assert _model(f"{tier}learnable", "learnable-tied").residual.learnable == "tied"
    fast = _cell(f"{tier}learnable", "learnable-tied-fast")
    base_lr = 2e-3 if tier == "" else 6e-4
    assert fast["model.config.residual.learnable"] == "tied" and fast["model.mix_lr"] == pytest.approx(10 * base_lr)


@pytest.mark.parametrize("tier", ["", PAPER_TIER])
def test_fig7_left_panel_runs_resformer_and_vanilla_at_several_lengths_with_the_schedule_rescaled(tier):
    grid = _grid(f"{tier}fig7-lengths")
    schedules = {(c.overrides["trainer.max_steps"], c.overrides["model.warmup_steps"]) for c in grid.cells}
    assert len(schedules) >= 3
    assert len({warmup / steps for steps, warmup in schedules}) == 1  # the whole schedule scales with the length
    assert grid.baseline == "vanilla" and {c.family for c in grid.cells} == {"vanilla", "resformer"}
    assert _model(f"{tier}fig7", "denseformer").dwa.enabled


@pytest.mark.parametrize("tier", ["", PAPER_TIER])
def test_fig17_anchor_counts(tier):
    counts = [len(_model(f"{tier}fig17", f"anchors-{k}").value_anchors()) for k in (1, 2, 4)]
    assert counts == [1, 2, 4]


def test_gpu_tier_trains_the_82m_preset_on_at_least_25m_tokens_a_run(gpu_tier_corpus):
    """Every GPU-tier grid: the paper's 82M preset, bf16 on one GPU, >= 25M training tokens a run, the seeds the
    tier promises (3 where the paper's effect is the headline, else 2), its parent's cells."""

    three_seeds = {"fig7", "fig7-lengths", "fig9", "fig11", "fig13"}
    grids = sorted((GRIDS / "gpu").glob("*.yaml"))
    # the GPU tier decides at the paper's model size what the CPU evidence tier decides on two cores
    # (a confirmation grid, *-confirm, re-runs its figure's evidence grid on fresh seeds: no tier of its own)
    assert {p.stem for p in grids} == {p.stem for p in (GRIDS / "evidence").glob("*.yaml")
                                       if not p.stem.endswith("-confirm")}
    for path in grids:
        grid = repository_grid(f"gpu/{path.name}", str(gpu_tier_corpus))
        paper = repository_grid(f"{PAPER_TIER}{path.name}")
        assert grid.name == f"{path.stem}-gpu" and {c.family or c.name for c in grid.cells} == \
            {c.family or c.name for c in paper.cells}, path
        assert len(grid.seeds) == (3 if path.stem in three_seeds else 2), path
        for config in grid.configs.values():
            trainer, data = config["trainer"], config["data"]
            assert ModelConfig(**{**config["model"]["config"], "vocab_size": 1}).d_model == 512, path
            assert trainer["precision"] == "bf16-mixed" and trainer["devices"] == 1, path
            assert trainer["max_steps"] * data["micro_batch_size"] * data["seq_len"] >= 25_000_000, path
