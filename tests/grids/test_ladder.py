"""A grid's `ladder:` block: trunks and decay branches, each branch a run of its own that equals a straight
warmup-stable-decay run step for step, resumes exactly after a kill, and has a straight run's identity."""

import io
import json
import re

import pytest
import yaml

from lit_resformer.grids import GridError, GridOptions, load_grid, run_grid
from lit_resformer.grids.spec import parse_ladder
from lit_resformer.runs.run_dir import BRANCH_FILE, RunDir, kept_checkpoint
from tests.helpers.experiments import fit, fit_killed_at, read_metrics, tiny_experiment
from tests.helpers.fake_trainer import calls, summary
from tests.helpers.ladder_grids import LADDER, write_grid


@pytest.mark.parametrize(("raw", "message"), [
    ({"budgets": [10]}, "must be a mapping with fields"),
    ({"budgets": [10], "decay_fraction": 0.2}, "budgets must be at least two ascending"),
    ({"budgets": [20, 10], "decay_fraction": 0.2}, "budgets must be at least two ascending"),
    ({"budgets": [10, 20], "decay_fraction": 1.0}, "decay_fraction must be a fraction in"),
])
def test_a_malformed_ladder_is_refused_naming_the_field(raw, message):
    with pytest.raises(GridError, match=message):
        parse_ladder(raw, "g.yaml")


def test_a_ladder_is_a_trunk_per_cell_and_a_rung_per_budget(tmp_path):
    grid = load_grid(write_grid(tmp_path, LADDER))
    assert [c.name for c in grid.cells] == ["vanilla,trunk", "resformer,trunk",
                                            *(f"{f},max_steps={b}" for f in ("vanilla", "resformer") for b in (10, 20, 30))]
    trunk = grid.configs["resformer,trunk"]
    assert trunk["trainer"]["max_steps"] == 24 and trunk["model"]["decay_start"] is None
    assert trunk["model"]["schedule"] == "wsd" and trunk["checkpoint"]["keep_steps"] == [8, 16, 24]
    assert trunk["model"]["config"]["residual"] == {"target": "v"}
    rung = grid.configs["resformer,max_steps=20"]
    assert (rung["trainer"]["max_steps"], rung["model"]["decay_start"], rung["model"]["schedule"]) == (20, 16, "wsd")
    assert grid.branch_point("resformer,max_steps=20").trunk == "resformer,trunk"
    assert grid.branch_point("resformer,max_steps=20").step == 16 and grid.branch_point("vanilla,trunk") is None
    assert grid.manifest()["ladder"]["decay_starts"] == [8, 16, 24]
    with pytest.raises(GridError, match="its budgets are its trainer.max_steps"):
        load_grid(write_grid(tmp_path, {**LADDER, "matrix": {"trainer.max_steps": [10]}}))


def test_a_ladder_with_a_matrix_has_a_trunk_per_cell_and_point(tmp_path):
    grid = load_grid(write_grid(tmp_path, {**LADDER, "matrix": {"model.lr": [1e-3, 2e-3]}}))
    heads = [f"{f},lr={lr}" for f in ("vanilla", "resformer") for lr in (0.001, 0.002)]
    assert [c.name for c in grid.cells] == [*(f"{h},trunk" for h in heads),
                                            *(f"{h},max_steps={b}" for h in heads for b in (10, 20, 30))]
    assert grid.configs["resformer,lr=0.002,trunk"]["model"]["lr"] == 2e-3
    rung = next(c for c in grid.cells if c.name == "resformer,lr=0.002,max_steps=20")
    assert rung.coords == {"model.lr": 2e-3, "trainer.max_steps": 20} and rung.family == "resformer"
    assert grid.configs[rung.name]["model"]["lr"] == 2e-3 and grid.configs[rung.name]["model"]["decay_start"] == 16
    assert grid.branch_point(rung.name).trunk == "resformer,lr=0.002,trunk"
    assert next(c for c in grid.cells if c.name == "resformer,lr=0.002,trunk").coords == {}
    # each cell compared with the baseline's at its own rate: a trunk with the baseline's trunk its rungs' baselines
    # branch from (a trunk has no coordinates to match by)
    baselines = {c.name: c.baseline for c in grid.cells}
    assert baselines["resformer,lr=0.001,trunk"] == "vanilla,lr=0.001,trunk"
    assert baselines["resformer,lr=0.002,trunk"] == "vanilla,lr=0.002,trunk"
    assert baselines["resformer,lr=0.002,max_steps=20"] == "vanilla,lr=0.002,max_steps=20"
    assert baselines["vanilla,lr=0.001,trunk"] == "vanilla,lr=0.001,trunk"


def test_a_rungs_identity_differs_by_budget_and_equals_a_straight_run_in_another_grid(tmp_path):
    grid = load_grid(write_grid(tmp_path / "a", LADDER))
    other = load_grid(write_grid(tmp_path / "b", {**LADDER, "name": "other", "ladder": {"budgets": [20, 40],
                                                                                        "decay_fraction": 0.2}}))
    straight = load_grid(write_grid(tmp_path / "c", {
        "name": "straight", "baseline": "vanilla", "seeds": [0],
        "cells": {"vanilla": {"model.schedule": "wsd", "model.decay_start": 16, "trainer.max_steps": 20}}}))

    def identity(g, cell, seed=0):
        return g.identity(next(r for r in g.runs() if r.cell == cell and r.seed == seed).config)

    assert identity(grid, "vanilla,max_steps=10") != identity(grid, "vanilla,max_steps=20")
    assert identity(grid, "vanilla,max_steps=20") == identity(other, "vanilla,max_steps=20")
    assert identity(grid, "vanilla,max_steps=20") == identity(straight, "vanilla")
    assert identity(grid, "vanilla,max_steps=20") != identity(grid, "vanilla,max_steps=20", seed=1)
    # the trunks differ (they run to the grid's last decay start): a rung, not its trunk, is what is compared
    assert identity(grid, "vanilla,trunk") != identity(other, "vanilla,trunk")


def test_dry_run_lists_trunks_and_the_rungs_waiting_for_them(tmp_path):
    out = io.StringIO()
    run_grid(load_grid(write_grid(tmp_path, LADDER)), GridOptions(runs_dir=tmp_path / "runs", dry_run=True), progress=False,
             out=out)
    text = out.getvalue()
    assert "ladder/vanilla,trunk/seed1" in text and "ladder/resformer,trunk/seed0" in text
    assert re.search(r"ladder/resformer,max_steps=30/seed1 +waits for its trunk ladder/resformer,trunk/seed1 to reach "
                     r"step 24", text)
    assert "dry run: 4 of 16 runs would start (12 wait for others first)" in text


@pytest.mark.integration
def test_the_runner_trains_the_trunks_then_each_rung_from_its_trunks_checkpoint(tmp_path, fake):
    outcome = run_grid(load_grid(write_grid(tmp_path, LADDER)), GridOptions(runs_dir=tmp_path / "runs", train_command=fake),
                       progress=False, out=io.StringIO())
    assert outcome.failed == []
    g = tmp_path / "runs/ladder"
    trunk = calls(g / "vanilla,trunk/seed1")
    assert len(trunk) == 1 and "--ckpt_path" not in trunk[0]["argv"]
    rung = g / "resformer,max_steps=20/seed1"
    assert calls(rung)[0]["argv"][-2:] == ["--ckpt_path", "last"]  # it resumed from its trunk's step-16 checkpoint
    assert json.loads((rung / BRANCH_FILE).read_text())["trunk"] == "ladder/resformer,trunk/seed1"
    assert json.loads((rung / BRANCH_FILE).read_text())["step"] == 16
    assert calls(g / "resformer,trunk/seed1")[0]["time"] < calls(rung)[0]["time"]
    assert summary(rung)["status"] == "done" and summary(rung)["steps"] == 19  # the last logged step
    # its merged log is the trunk's before step 16 and its own after: every step once
    assert [s for s, _ in read_metrics(rung)["train/loss"]] == list(range(20))
    again = run_grid(load_grid(write_grid(tmp_path, LADDER)), GridOptions(runs_dir=tmp_path / "runs", train_command=fake),
                     progress=False, out=io.StringIO())
    assert again.failed == [] and len(calls(rung)) == 1  # finished: not trained again


@pytest.mark.integration
def test_a_slice_of_cells_trains_only_its_ladder(tmp_path, fake):
    grid = load_grid(write_grid(tmp_path, LADDER))
    outcome = run_grid(grid, GridOptions(runs_dir=tmp_path / "runs", train_command=fake, cells=("resformer,*",)),
                       progress=False, out=io.StringIO())
    g = tmp_path / "runs/ladder"
    assert outcome.failed == [] and summary(g / "resformer,max_steps=30/seed1")["status"] == "done"
    assert not calls(g / "vanilla,trunk/seed0") and not calls(g / "vanilla,max_steps=10/seed0")
    with pytest.raises(GridError, match=r"--cells svformer,\*: no cell of ladder matches; its cells: vanilla,trunk"):
        run_grid(grid, GridOptions(runs_dir=tmp_path / "runs", train_command=fake, cells=("svformer,*",)),
                 progress=False, out=io.StringIO())


@pytest.mark.integration
def test_a_rung_equals_a_straight_wsd_run_and_resumes_exactly_after_a_kill(tmp_path, tiny_corpus, data_cache):
    """Trunk to step 6 (kept there) then a decay to 10 == one WSD run to 10 decaying from step 6, loss for loss on
    the CPU in fp32; a rung killed after its own step-8 checkpoint resumes to the same losses."""
    schedule = {"schedule": "wsd", "lr": 3e-3, "warmup_steps": 2}
    trunk_config = tiny_experiment(tmp_path / "trunk.yaml", tiny_corpus, data_cache, trainer={"max_steps": 8},
                                   model={**schedule, "decay_start": None},
                                   checkpoint={"every_n_train_steps": 2, "keep_steps": [6]})
    straight_config = tiny_experiment(tmp_path / "straight.yaml", tiny_corpus, data_cache,
                                      model={**schedule, "decay_start": 6})
    straight, trunk, branch, killed = (tmp_path / name for name in ("straight", "trunk", "branch", "killed"))
    fit(straight_config, straight)
    fit(trunk_config, trunk)
    assert kept_checkpoint(RunDir(trunk).checkpoints_dir, 6).is_file()  # kept past save_top_k's pruning
    assert not (RunDir(trunk).checkpoints_dir / "step000006.ckpt").exists()
    for rung in (branch, killed):
        assert RunDir(rung).start_branch(RunDir(trunk), 6, "trunk")
    fit(straight_config, branch, "--ckpt_path", "last")
    fit_killed_at(straight_config, killed, 9, "--ckpt_path", "last")
    assert max(s for s, _ in read_metrics(killed)["train/loss"]) < 9  # it died before its end
    fit(straight_config, killed, "--ckpt_path", "last")
    expected = read_metrics(straight)
    assert [s for s, _ in expected["train/loss"]] == list(range(10))
    for run in (branch, killed):
        got = read_metrics(run)
        for name in ("train/loss", "val/loss", "train/lr", "train/tokens_seen"):
            assert got[name] == expected[name], (run.name, name)
    assert not RunDir(tmp_path / "early").start_branch(RunDir(trunk), 4, "trunk")  # no checkpoint kept at step 4


def test_an_overlay_that_removes_a_ladder_cell_drops_its_claims_and_judges_its_own_at_each_rung(tmp_path):
    """The shared-rate ladder's shape: the parent's arm removed (with the claims naming it or its rungs), a new arm
    added with its own claim, which holds at each budget (never at the trunks, which end at the peak rate)."""
    parent = {**LADDER, "claims": [*LADDER["claims"], {"claim": "gain at 30", "a": "resformer,max_steps=30",
                                                       "b": "vanilla,max_steps=30", "metric": "val_loss",
                                                       "direction": "lower"}]}
    write_grid(tmp_path, parent, "parent.yaml")
    overlay = {"name": "shared", "extends": "parent.yaml",
               "cells": {"resformer": None, "resformer-slow": {"model.config.residual.target": "v", "model.lr": 1e-3}},
               "claims": [{"claim": "gain", "a": "resformer-slow", "b": "vanilla", "metric": "val_loss",
                           "direction": "lower"}]}
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay, sort_keys=False))
    grid = load_grid(tmp_path / "overlay.yaml")
    assert [(c["a"], c["b"]) for c in grid.claims] == [(f"resformer-slow,max_steps={b}", f"vanilla,max_steps={b}")
                                                       for b in (10, 20, 30)]
