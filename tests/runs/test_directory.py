"""A grid's run directory (lit_resformer.runs.directory) and the results loaded from it (lit_resformer.runs.results)."""

from __future__ import annotations

import json

import pytest
import yaml

from lit_resformer.runs.directory import MANIFEST_VERSION, GridDir, ManifestError, migrate_manifest
from lit_resformer.runs.results import load_results

OLD = {"name": "g", "baseline": "a", "seeds": [0], "overrides": {"trainer.max_steps": 50},
       "cells": [{"name": "a", "overrides": {}, "baseline": "a", "family": None, "coords": {}},
                 {"name": "b", "overrides": {"model.lr": 0.1}, "baseline": "a", "family": None, "coords": {}}]}


def test_an_unversioned_manifest_is_migrated_once_and_an_unknown_versionrefused():
    migrated = migrate_manifest(OLD, "grid.yaml")
    assert migrated["version"] == MANIFEST_VERSION and migrated["provenance"] == {}
    assert migrated["base_values_recorded"] is False
    assert [c["changes"] for c in migrated["cells"]] == [{"trainer.max_steps": [None, 50]},
                                                         {"trainer.max_steps": [None, 50], "model.lr": [None, 0.1]}]
    assert migrate_manifest(migrated, "grid.yaml") == migrated
    recorded = {**OLD, "cells": [{**c, "changes": {}} for c in OLD["cells"]]}  # changes recorded, no version yet
    assert "base_values_recorded" not in migrate_manifest(recorded, "grid.yaml")
    with pytest.raises(ManifestError, match=r"grid.yaml: manifest version 9 is not one this version reads \(1 to 2\)"):
        migrate_manifest({**OLD, "version": 9}, "grid.yaml")


def test_runs_by_cell_and_seed_their_states_and_the_plan(tmp_path):
    grid = GridDir.of(tmp_path, "g")
    grid.write_manifest({**OLD, "cells": migrate_manifest(OLD, "")["cells"]}, provenance={"torch": "x"})
    assert yaml.safe_load(grid.manifest_file.read_text())["version"] == MANIFEST_VERSION
    for cell, seed, status in (("a", 10, "done"), ("a", 2, "failed"), ("b", 0, "diverged")):
        grid.run_dir(cell, seed).write_summary({"status": status})
    assert grid.run_dir("a", 2).path == tmp_path / "g/a/seed2"
    assert [(c, s) for c, s, _ in grid.runs(["b", "a"])] == [("b", 0), ("a", 2), ("a", 10)]
    assert [(c, s) for c, s, _ in grid.finished_runs()] == [("a", 10), ("b", 0)]
    assert grid.progress(["a", "b"], [0, 2]) == {"pending": [("a", 0), ("b", 2)], "failed": [("a", 2)],
                                                 "done": [("a", 10)], "diverged": [("b", 0)]}
    grid.run_dir("b", 5).path.mkdir()  # a run the runner planned beyond the grid's seeds (a confirmation seed)
    assert grid.progress(["b"], [0]) == {"diverged": [("b", 0)], "pending": [("b", 5)]}  # b at 2 or 10: not planned
    with pytest.raises(FileNotFoundError, match=r"is not a grid run directory \(no grid.yaml\); grids under it: \['g'\]"):
        GridDir(tmp_path).read_manifest()


def test_a_summary_without_its_losses_has_them_computed_from_its_metrics(tmp_path):
    grid = GridDir.of(tmp_path, "g")
    grid.write_manifest(migrate_manifest(OLD, ""), provenance={})
    run = grid.run_dir("a", 0)
    (run.csv_dir / "version_0").mkdir(parents=True)
    (run.csv_dir / "version_0/metrics.csv").write_text("step,train/loss,val/loss\n0,4.0,\n1,3.0,\n1,,2.5\n")
    run.write_summary({"status": "done"})  # e.g. its metrics could not be read when it ended
    grid.run_dir("b", 0).write_summary({"status": "done", "final_val_loss": 2.0, "final_train_loss": 1.9})
    results = load_results(grid.path)
    a, b = results.done["a"][0], results.done["b"][0]
    assert (a.final("val_loss"), a.final("train_loss"), a.summary["steps"]) == (2.5, 3.5, 1)
    assert (b.final("val_loss"), b.final("train_loss")) == (2.0, 1.9)  # the summary's values stand
    assert results.finals("val_loss") == {"a": {0: 2.5}, "b": {0: 2.0}}
    assert json.loads(run.summary_file.read_text()) == {"status": "done"}  # reading changes nothing


def test_epochs_are_the_passes_over_the_training_split_and_the_regime_names_the_most(tmp_path):
    from lit_resformer.verdicts.regime import grid_regime, regime_text

    grid = GridDir.of(tmp_path, "g")
    grid.write_manifest(migrate_manifest(OLD, ""), provenance={})
    done = {"status": "done", "final_val_loss": 4.1, "final_train_loss": 4.0, "steps": 1999}
    grid.run_dir("a", 0).write_summary({**done, "tokens_seen": 4_096_000.0, "epoch_tokens": 2_800_000.0})
    grid.run_dir("b", 0).write_summary({**done, "tokens_seen": 2_048_000.0, "epoch_tokens": None})  # one pass
    results = load_results(grid.path)
    assert results.done["a"][0].epochs == pytest.approx(4_096_000 / 2_800_000)
    assert results.done["b"][0].epochs is None
    regime = grid_regime(results)
    assert regime["epochs"] == pytest.approx(1.4629, abs=1e-4)
    assert "up to 1.46 epochs" in regime_text(regime)
    grid.run_dir("a", 0).write_summary({**done, "tokens_seen": 4_096_000.0, "epoch_tokens": None})
    assert "within one epoch" in regime_text(grid_regime(load_results(grid.path)))


def test_the_regime_counts_a_run_two_cells_of_the_grid_share_once(tmp_path):
    """A select block's at_best cell at the chosen value links the pilot cell's runs: one trained run, two names."""
    from lit_resformer.verdicts.regime import grid_regime

    grid = GridDir.of(tmp_path, "g")
    grid.write_manifest(migrate_manifest(OLD, ""), provenance={})
    for seed, loss in ((0, 4.1), (1, 4.2)):
        grid.run_dir("a", seed).write_summary({"status": "done", "grid": "g", "cell": "a", "seed": seed,
                                               "final_val_loss": loss, "final_train_loss": loss})
        grid.share("b", seed, grid.run_dir("a", seed))
    results = load_results(grid.path)
    assert [r.trained_as for r in results.done["b"].values()] == ["g/a/seed0", "g/a/seed1"]
    assert grid_regime(results)["runs"] == 2
    grid.run_dir("a", 2).write_summary({"status": "done", "grid": "g", "cell": "a", "seed": 2, "final_val_loss": 4.0})
    assert grid_regime(load_results(grid.path))["runs"] == 3


def test_a_survey_reads_each_run_folder_once_for_the_runner(tmp_path):
    """GridDir.survey: what the runner plans a round from (Grid.plan): each folder's state, followed through its link,
    the final loss of every finished run, and the finished runs of the other grids beside it."""
    other = GridDir.of(tmp_path, "other")
    other.write_manifest(migrate_manifest(OLD, ""), provenance={})
    trained = other.run_dir("a", 0)
    trained.write_experiment({"seed_everything": 0})
    trained.write_summary({"status": "done", "final_val_loss": 3.25})
    grid = GridDir.of(tmp_path, "g")
    grid.write_manifest(migrate_manifest(OLD, ""), provenance={})
    grid.share("a", 0, trained)
    grid.run_dir("b", 0).write_summary({"status": "diverged"})
    (grid.run_dir("b", 1).checkpoints_dir).mkdir(parents=True)
    (grid.run_dir("b", 1).checkpoints_dir / "kept-step000016.ckpt").write_text("")
    grid.run_dir("b", 1).write_summary({"status": "interrupted"})
    grid.run_dir("b", 2).path.parent.mkdir(parents=True, exist_ok=True)
    grid.run_dir("b", 2).path.symlink_to(tmp_path / "gone", target_is_directory=True)
    state = grid.survey([("a", 0), ("b", 0), ("b", 1), ("b", 2), ("a", 9)])
    assert state.runs["a", 0].shared.path == trained.path.resolve() and state.runs["a", 0].status == "done"
    assert state.finals == {"a": {0: 3.25}, "b": {0: None}}  # a diverged run has no final loss
    assert state.runs["b", 1].kept_steps == {16} and state.runs["b", 1].checkpointed
    assert not state.runs["b", 2].exists and not state.runs["a", 9].exists  # a broken link trains here again
    assert state.runs["a", 9].status == "pending"
    assert state.elsewhere == [({"seed_everything": 0}, trained)]
