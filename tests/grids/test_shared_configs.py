"""Cells of different grids that run the same config share their runs: the runner trains each such run once. A grid
that means to reuse another's runs must resolve, seed by seed, to exactly that grid's configs; this checks it."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GRIDS = REPO / "configs" / "grids"

# (grid that reuses runs, its cell) -> (grid that owns them, its cell)
SHARED = {
    ("value-path.yaml", "vanilla"): ("evidence/fig7.yaml", "vanilla"),
    ("value-path.yaml", "resformer"): ("evidence/fig7.yaml", "resformer"),
    ("attention-sink.yaml", "vanilla"): ("evidence/fig7.yaml", "vanilla"),
    ("attention-sink.yaml", "resformer"): ("evidence/fig7.yaml", "resformer"),
    ("attention-sink.yaml", "learnable-lambda"): ("value-path.yaml", "learnable-lambda"),
}


def _identities_by_seed(grid, cell: str) -> dict[int, dict]:
    """seed -> the run's identity (the grid spec's run_identity, which the runner shares runs by and the scoreboard
    counts comparisons by) of its config as load_grid resolved it."""
    from lit_resformer.runs import identity

    configs = {run.seed: identity.run_identity(run.resolved) for run in grid.runs() if run.cell == cell}
    assert configs, f"{grid.name} has no cell {cell!r}"
    return configs


@pytest.fixture(scope="module")
def grids():
    from lit_resformer.grids.spec import load_grid

    files = {file for pair in SHARED.items() for file, _ in pair}
    return {file: load_grid(GRIDS / file) for file in files}


@pytest.mark.integration
@pytest.mark.parametrize(("user", "owner"), SHARED.items(), ids=[f"{f}:{c}" for f, c in SHARED])
def test_shared_cells_resolve_to_the_same_config_at_every_seed(grids, user, owner):
    from lit_resformer.config.diff import config_differences

    mine = _identities_by_seed(grids[user[0]], user[1])
    theirs = _identities_by_seed(grids[owner[0]], owner[1])
    assert set(mine) <= set(theirs), f"{user} runs seeds {sorted(set(mine) - set(theirs))} that {owner} does not"
    for seed, config in mine.items():
        assert config == theirs[seed], (f"{user} and {owner} differ at seed {seed}: "
                                        f"{config_differences(config, theirs[seed])}")


def test_the_runner_the_scoreboard_and_this_check_judge_by_one_run_identity(tmp_path, monkeypatch):
    """`lit_resformer.runs.identity.run_identity` alone says what a run is: the runner's sharing (Grid.identity,
    Grid.same_run), the scoreboard's counting of a comparison once (verdicts.verdict._identity) and the check above
    all follow it. With an identity under which every run is the same, all three see one run."""
    from types import SimpleNamespace

    import yaml

    from lit_resformer.grids import spec
    from lit_resformer.runs import identity
    from lit_resformer.runs.claim_spec import Claim
    from lit_resformer.verdicts import verdict

    (tmp_path / "base.yaml").write_text(yaml.safe_dump({
        "trainer": {"max_steps": 20}, "model": {"config": {"size": "tiny"}}, "data": {"seq_len": 64}}))
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump({
        "base": "base.yaml", "baseline": "vanilla",
        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}}))
    grid = spec.load_grid(tmp_path / "grid.yaml")
    vanilla, resformer = grid.runs()
    claim = Claim("resformer ends below vanilla", "resformer", "vanilla", "val_loss", "lower")

    def scoreboard_identity(run):
        result = SimpleNamespace(resolved_config=run.resolved)  # a RunResult's config as the run resolved it
        return verdict._identity(claim, [{run.seed: result}])

    def judged():
        return (grid.identity(vanilla.config) == grid.identity(resformer.config),
                grid.same_run(vanilla.config, resformer.config, finished=True),
                scoreboard_identity(vanilla) == scoreboard_identity(resformer),
                _identities_by_seed(grid, "vanilla") == _identities_by_seed(grid, "resformer"))

    assert judged() == (False, False, False, False)
    monkeypatch.setattr(identity, "run_identity", lambda resolved: {})
    assert judged() == (True, True, True, True)


def test_a_run_identity_leaves_out_where_a_run_trains_and_writes_and_nothing_else():
    from lit_resformer.runs.identity import run_identity

    resolved = {"seed_everything": 3,
                "trainer": {"accelerator": "gpu", "devices": 2, "num_nodes": 1, "precision": "bf16-mixed",
                            "default_root_dir": "runs/a", "max_steps": 10,
                            "logger": [{"class_path": "CSVLogger", "init_args": {"save_dir": "runs/a", "name": "csv"}}]},
                "checkpoint": {"dirpath": "runs/a/checkpoints", "every_n_train_steps": 5},
                "model": {"config": {"devices": "not a placement: only trainer's is"}}}
    before = repr(resolved)
    assert run_identity(resolved) == {
        "seed_everything": 3,
        "trainer": {"precision": "bf16-mixed", "max_steps": 10,
                    "logger": [{"class_path": "CSVLogger", "init_args": {"name": "csv"}}]},
        "checkpoint": {"every_n_train_steps": 5},
        "model": {"config": {"devices": "not a placement: only trainer's is"}}}
    assert repr(resolved) == before  # a new dict: the resolved config is left as it is
