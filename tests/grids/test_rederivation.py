"""`lit-resformer rederive`: committed runs trained again from the configs they recorded, and their final numbers set
beside the committed ones: identical for a deterministic trainer, a difference shown where there is one, a dirty
checkout refused unless asked for."""

from __future__ import annotations

import json
import shutil

import pytest

from lit_resformer.grids import GridOptions, load_grid, rederivation, run_grid
from lit_resformer.grids.rederivation import RederivationError, committed_runs, markdown, rederive
from tests.helpers.fake_trainer import calls, write_grid

GRID = {"baseline": "vanilla", "seeds": [0, 1],
        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}}


@pytest.fixture
def committed(tmp_path, fake):
    """A finished grid copied where results are committed (run directories without their checkpoints)."""
    run_grid(load_grid(write_grid(tmp_path, GRID)), GridOptions(runs_dir=tmp_path / "runs", train_command=fake), progress=False)
    results = tmp_path / "docs" / "g"
    shutil.copytree(tmp_path / "runs" / "g", results, ignore=shutil.ignore_patterns("checkpoints", "*.lock"))
    return results


def test_a_deterministic_trainer_rederives_every_number_to_the_last_digit(tmp_path, fake, committed):
    assert [r.name for r in committed_runs([committed])] == ["g/resformer/seed0", "g/vanilla/seed0",
                                                             "g/resformer/seed1", "g/vanilla/seed1"]
    runs = committed_runs([committed], cells=["vanilla"])
    assert [r.name for r in runs] == ["g/vanilla/seed0", "g/vanilla/seed1"]
    rows = rederive(runs, tmp_path / "again", train_command=fake, allow_dirty=True)
    assert [row["identical"] for row in rows] == [True, True]
    assert rows[0]["values"]["final_val_loss"]["difference"] == 0.0
    assert (tmp_path / "again" / "g" / "vanilla" / "seed0" / "experiment.yaml").read_text() == \
        (committed / "vanilla" / "seed0" / "experiment.yaml").read_text()  # the recorded config, as it was
    written = json.loads((tmp_path / "again" / "rederivation.json").read_text())
    assert [r["run"] for r in written["runs"]] == ["g/vanilla/seed0", "g/vanilla/seed1"]
    assert "2 of 2 identical to the last digit" in (tmp_path / "again" / "rederivation.md").read_text()
    # the grid's manifest beside them: the re-derived runs are read as the grid they belong to
    assert (tmp_path / "again" / "g" / "grid.yaml").read_text() == (committed / "grid.yaml").read_text()

    # a second call trains nothing again
    rederive(runs, tmp_path / "again", train_command=fake, allow_dirty=True)
    assert len(calls(tmp_path / "again" / "g" / "vanilla" / "seed0")) == 1


def test_a_difference_is_shown_with_its_size(tmp_path, fake, committed):
    summary_file = committed / "resformer" / "seed1" / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary["final_val_loss"] += 0.001  # as if the committed run had been trained by other code
    summary_file.write_text(json.dumps(summary))
    rows = rederive(committed_runs([committed / "resformer"], seeds=[1]), tmp_path / "again", train_command=fake,
                    allow_dirty=True)
    assert not rows[0]["identical"]
    assert rows[0]["values"]["final_val_loss"]["difference"] == pytest.approx(-0.001)
    assert "0 of 1 identical" in (tmp_path / "again" / "rederivation.md").read_text()
    assert "(-1.00e-03)" in (tmp_path / "again" / "rederivation.md").read_text()


def test_a_dirty_checkout_or_nothing_to_rederive_is_refused_before_any_training(tmp_path, fake, committed,
                                                                                monkeypatch):
    monkeypatch.setattr(rederivation, "git_state", lambda: ("abc", True))
    with pytest.raises(RederivationError, match="uncommitted changes"):
        rederive(committed_runs([committed]), tmp_path / "again", train_command=fake)
    assert not (tmp_path / "again").exists()
    with pytest.raises(RederivationError, match="matches cells=\\['nope'\\]"):
        committed_runs([committed], cells=["nope"])
    with pytest.raises(RederivationError, match="no run under it"):
        committed_runs([tmp_path / "empty-folder-that-is-missing"])


def test_each_row_names_the_commit_its_run_was_rederived_at():
    """Runs re-derived by two calls (a stopped one, then the rest) keep their own commits; the page's header names
    only the call that wrote it."""
    def row(run, rederived_at):
        return {"run": run, "identical": False, "status": "done", "machine_differences": {},
                "values": {"final_val_loss": {"committed": 4.5, "rederived": 4.4, "difference": -0.1}},
                "commits": {"committed": "a" * 40, "committed_dirty": True, "rederived": rederived_at,
                            "rederived_dirty": False}}

    page = markdown([row("g/vanilla/seed0", "b" * 40), row("g/vanilla/seed1", "c" * 40)], "c" * 40, False)
    assert "Written at " + "c" * 40 in page
    assert "| g/vanilla/seed0 | aaaaaaaaaa (dirty) | bbbbbbbbbb |" in page
    assert "| g/vanilla/seed1 | aaaaaaaaaa (dirty) | cccccccccc |" in page
