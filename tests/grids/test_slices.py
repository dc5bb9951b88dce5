"""Time-bounded slices of a grid: export of finished runs, merge into a results folder, and the slice script
end to end on the CPU (stopped by its time limit, resumed by a second call, nothing trained twice)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from lit_resformer.runs.archive import SliceError, export_grid, merge_export
from lit_resformer.runs.directory import GridDir
from lit_resformer.runs.run_dir import RunConflict, RunDir
from tests.helpers.experiments import tiny_experiment

REPO = Path(__file__).resolve().parents[2]


def fake_grid(root: Path, statuses: dict[str, str], loss: float = 3.0) -> Path:
    """A grid run directory as the runner leaves it, one seed per cell, with the given statuses."""
    grid = root / "g"
    grid.mkdir(parents=True)
    (grid / "grid.yaml").write_text(yaml.safe_dump({"name": "g", "baseline": "a", "overrides": {},
                                                    "cells": [{"name": c} for c in statuses]}))
    for cell, status in statuses.items():
        run = RunDir(grid / cell / "seed0")
        run.write_experiment({"cell": cell})
        run.write_summary({"status": status, "final_val_loss": loss})
        run.csv_dir.joinpath("version_0").mkdir(parents=True)
        (run.csv_dir / "version_0/metrics.csv").write_text(f"step,train/loss\n1,{loss}\n")
        run.checkpoints_dir.mkdir()
        run.last_checkpoint.write_bytes(b"x" * 1000)
    return grid


def test_export_holds_finished_runs_without_checkpoints(tmp_path):
    grid = fake_grid(tmp_path / "runs", {"a": "done", "b": "failed", "c": "diverged", "d": "interrupted"})
    held = export_grid(grid, tmp_path / "g.tar.gz", note="cpu test")
    assert held["runs"] == ["a/seed0", "c/seed0"] and held["note"] == "cpu test"
    with tarfile.open(tmp_path / "g.tar.gz") as tar:
        names = sorted(tar.getnames())
    assert names == ["g/a/seed0/csv/version_0/metrics.csv.gz", "g/a/seed0/experiment.yaml", "g/a/seed0/summary.json",
                     "g/c/seed0/csv/version_0/metrics.csv.gz", "g/c/seed0/experiment.yaml", "g/c/seed0/summary.json",
                     "g/grid.yaml", "g/provenance.json"]


def test_exported_metrics_are_compressed_read_back_the_same_and_merge_beside_plain_ones(tmp_path):
    """Results keep metrics gzip-compressed: read back as the logged CSV was, the same bytes at every export, and
    a results folder merged before exports compressed them (plain metrics.csv) still counts as holding the run."""
    grid = fake_grid(tmp_path / "runs", {"a": "done"})
    logged = RunDir(grid / "a/seed0")
    logged.csv_dir.joinpath("version_1").mkdir()  # a resumed run: two CSV versions, the later one wins from step 2
    (logged.csv_dir / "version_1/metrics.csv").write_text("step,train/loss\n2,2.5\n")
    export_grid(grid, tmp_path / "first.tar.gz")
    results = tmp_path / "results"
    merge_export(tmp_path / "first.tar.gz", results)
    merged = RunDir(results / "g/a/seed0")
    assert [f.name for f in merged.metric_files()] == ["metrics.csv.gz", "metrics.csv.gz"]
    assert merged.read_metrics() == logged.read_metrics() == {"train/loss": [(1, 3.0), (2, 2.5)]}
    export_grid(results / "g", tmp_path / "again.tar.gz")  # exporting merged results again changes no byte
    with tarfile.open(tmp_path / "first.tar.gz") as first, tarfile.open(tmp_path / "again.tar.gz") as again:
        name = "g/a/seed0/csv/version_0/metrics.csv.gz"
        assert first.extractfile(name).read() == again.extractfile(name).read()
    plain = tmp_path / "plain"  # merged by an older version: plain CSVs
    merge_export(tmp_path / "first.tar.gz", plain)
    for compressed in RunDir(plain / "g/a/seed0").metric_files():
        compressed.with_name("metrics.csv").write_bytes(gzip.decompress(compressed.read_bytes()))
        compressed.unlink()
    assert merge_export(tmp_path / "again.tar.gz", plain)["already_there"] == ["a/seed0"]


def test_export_results_and_merge_results_commands(tmp_path, capsys):
    from lit_resformer.cli import main

    grid = fake_grid(tmp_path / "runs", {"a": "done", "b": "failed"})
    main(["export-results", str(grid), "--out", str(tmp_path / "out"), "--note", "cpu test"])
    assert f"{tmp_path / 'out/g.tar.gz'}: 1 finished run(s) of g" in capsys.readouterr().out
    main(["merge-results", str(tmp_path / "out/g.tar.gz"), str(tmp_path / "results")])
    assert "1 run(s) added, 0 already there" in capsys.readouterr().out
    assert (tmp_path / "results/g/a/seed0/summary.json").is_file()
    with pytest.raises(SystemExit) as stop:
        main(["merge-results", str(tmp_path / "out/missing.tar.gz"), str(tmp_path / "results")])
    assert stop.value.code == 2 and "lit-resformer merge-results: error:" in capsys.readouterr().err


def test_merge_adds_new_runs_keeps_identical_ones_and_refuses_other_results(tmp_path):
    grid = fake_grid(tmp_path / "one", {"a": "done", "b": "running"})
    export_grid(grid, tmp_path / "first.tar.gz", note="slice 1")
    results = tmp_path / "results"
    assert merge_export(tmp_path / "first.tar.gz", results)["added"] == ["a/seed0"]
    assert not (results / "g/b").exists()  # unfinished runs are never merged
    # the next slice finished b; a is the same file again
    grid2 = fake_grid(tmp_path / "two", {"a": "done", "b": "done"})
    export_grid(grid2, tmp_path / "second.tar.gz", note="slice 2")
    merged = merge_export(tmp_path / "second.tar.gz", results)
    assert merged["added"] == ["b/seed0"] and merged["already_there"] == ["a/seed0"]
    assert [p["note"] for p in json.loads((results / "g/provenance.json").read_text())] == ["slice 1", "slice 2"]
    # a different result for a run already kept: refused, nothing changed
    other = fake_grid(tmp_path / "three", {"a": "done", "b": "done"}, loss=2.5)
    export_grid(other, tmp_path / "third.tar.gz")
    before = (results / "g/a/seed0/summary.json").read_text()
    with pytest.raises(SliceError, match="already holds other results for a/seed0, b/seed0"):
        merge_export(tmp_path / "third.tar.gz", results)
    assert (results / "g/a/seed0/summary.json").read_text() == before
    # results of another version of the grid (other cells) go elsewhere
    edited = fake_grid(tmp_path / "four", {"a": "done", "c": "done"})
    export_grid(edited, tmp_path / "fourth.tar.gz")
    with pytest.raises(SliceError, match="another version of grid g"):
        merge_export(tmp_path / "fourth.tar.gz", results)
    # the grid grown by a cell keeps its runs: the new cell's runs join them and its manifest lists all three
    grown = fake_grid(tmp_path / "five", {"a": "done", "b": "done", "c": "done"})
    export_grid(grown, tmp_path / "fifth.tar.gz")
    merged = merge_export(tmp_path / "fifth.tar.gz", results)
    assert merged["added"] == ["c/seed0"] and merged["already_there"] == ["a/seed0", "b/seed0"]
    assert [c["name"] for c in yaml.safe_load((results / "g/grid.yaml").read_text())["cells"]] == ["a", "b", "c"]
    # but a slice of the grown grid, one cell short, would drop that cell from the merged manifest: refused
    export_grid(grid2, tmp_path / "second.tar.gz")
    with pytest.raises(SliceError, match="another version of grid g"):
        merge_export(tmp_path / "second.tar.gz", results)


def test_a_merged_results_folder_is_a_runs_folder(tmp_path):
    grid = fake_grid(tmp_path / "runs", {"a": "done"})
    export_grid(grid, tmp_path / "g.tar.gz")
    merge_export(tmp_path / "g.tar.gz", tmp_path / "results")
    run = RunDir(tmp_path / "results/g/a/seed0")
    assert run.read_summary()["status"] == "done" and run.read_metrics()["train/loss"] == [(1, 3.0)]


def slice_grid(tmp_path: Path, corpus: Path, cache: Path) -> Path:
    # long enough that four runs cannot finish within the first slice's time limit even on an idle fast machine
    # (at 600 steps all four finished in 39 s on the idle 2-core box: ~120 steps/s after start-up)
    base = tiny_experiment(tmp_path / "base.yaml", corpus, cache, trainer={"max_steps": 3000, "val_check_interval": 1000},
                           checkpoint={"every_n_train_steps": 1000})
    grid = {"name": "sliced", "base": str(base), "baseline": "vanilla", "seeds": [0, 1],
            "cells": {"vanilla": {"model.config.residual.target": "none"}, "resformer": {}}}
    path = tmp_path / "sliced.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def run_slice(tmp_path: Path, grid: Path, budget: int, name: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GRIDS": str(grid), "OUT": str(tmp_path / name), "RUNS": str(tmp_path / f"{name}-runs"),
           "RESULTS": str(tmp_path / "results"), "BUDGET": str(budget), "MARGIN": "5", "PARALLEL": "1",
           "SET": "trainer.accelerator=cpu", "PREPARE": "none", "WHEELS": str(tmp_path / "no-wheels"),
           "PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    return subprocess.run(["bash", str(REPO / "scripts/gpu-grids.sh")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def merge_slice(tmp_path: Path, name: str) -> list[str]:
    unpacked = tmp_path / f"{name}-exports"
    unpacked.mkdir()
    with tarfile.open(tmp_path / name / "exports.tar") as tar:
        tar.extractall(unpacked, filter="data")
    return merge_export(unpacked / "sliced.tar.gz", tmp_path / "results")["added"]


@pytest.mark.integration
def test_slice_script_stops_at_its_time_limit_and_the_next_call_finishes_the_grid(tmp_path, tiny_corpus, data_cache):
    grid = slice_grid(tmp_path, tiny_corpus, data_cache)
    first = run_slice(tmp_path, grid, budget=40, name="slice1")  # room for a run or two, not four
    assert first.returncode == 0, first.stderr
    added_first = merge_slice(tmp_path, "slice1")
    assert len(added_first) < 4, first.stdout
    with tarfile.open(tmp_path / "slice1/logs.tar.gz") as tar:
        assert "time limit: " in tar.extractfile("./sliced.log").read().decode()  # the runner stopped, said so
    # later calls, each on a fresh machine (only results/ carries over), until the grid is done: one normally,
    # more when the machine is slow (a loaded CI box); every call skips exactly what the earlier ones finished
    added, wanted = list(added_first), sorted(f"{c}/seed{s}" for c in ("vanilla", "resformer") for s in (0, 1))
    for call in range(2, 6):
        later = run_slice(tmp_path, grid, budget=400, name=f"slice{call}")
        assert later.returncode == 0, later.stderr
        with tarfile.open(tmp_path / f"slice{call}/logs.tar.gz") as tar:
            log = tar.extractfile("./sliced.log").read().decode()
        # nothing was trained twice: this call skipped what the earlier ones finished
        assert sum("skip: done" in line for line in log.splitlines()) == len(added)
        added += merge_slice(tmp_path, f"slice{call}")
        if len(added) == len(wanted):
            break
    assert sorted(added) == wanted
    for run in (tmp_path / "results/sliced").glob("*/seed*"):
        assert RunDir(run).read_summary()["attempts"] == 1


def test_a_finished_run_counts_wherever_it_trained_an_unfinished_one_does_not(tmp_path, tiny_corpus, data_cache):
    """Results merged from a GPU slice are skipped by a CPU run of the same grid; anything else that differs is
    still a different run, and an unfinished run cannot resume on other hardware than its config names."""
    from lit_resformer.grids import load_grid

    grid = slice_grid(tmp_path, tiny_corpus, data_cache)
    spec = load_grid(grid)
    (run,) = [r for r in spec.runs() if r.cell == "vanilla" and r.seed == 0]
    on_gpu = yaml.safe_load(yaml.safe_dump(run.config))
    on_gpu["trainer"].update(accelerator="gpu", devices=1)
    assert spec.same_run(on_gpu, run.config, True)
    assert not spec.same_run(on_gpu, run.config, False)
    in_bf16 = {**on_gpu, "trainer": {**on_gpu["trainer"], "precision": "bf16-mixed"}}
    assert not spec.same_run(in_bf16, run.config, True)  # precision changes the numbers: another run

    grid_dir = tmp_path / "runs" / spec.name
    finished = RunDir(grid_dir / "vanilla/seed0")
    finished.write_experiment(on_gpu)
    finished.write_summary({"status": "done"})
    actions = {p.run.name: p.action for p in spec.plan(None, GridDir(grid_dir).survey(spec.run_keys), []).runs}
    assert actions["sliced/vanilla/seed0"] == "skip: done"
    finished.write_summary({"status": "interrupted"})
    with pytest.raises(RunConflict, match=r"trainer.accelerator: 'gpu' -> 'cpu'"):
        spec.plan(None, GridDir(grid_dir).survey(spec.run_keys), [])
