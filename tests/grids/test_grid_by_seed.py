"""scripts/grid-by-seed.sh end to end with the fake trainer: a ladder grid trained one seed at a time, each finished
seed kept (exported, merged) before the next starts, a new machine resuming from the kept seeds without training
them again, the last seed putting the whole grid in the results folder, a seed that cannot finish here said so,
and a GPU slice (scripts/gpu-grids.sh) that starts from the kept seeds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from lit_resformer.execution.jobs import TRAIN_COMMAND_ENV
from lit_resformer.runs.archive import merge_export
from lit_resformer.runs.directory import GridDir
from tests.helpers.ladder_grids import LADDER, write_grid

REPO = Path(__file__).resolve().parents[2]
RUNS_A_SEED = 8  # two trunks and three rungs each


def by_seed(tmp_path: Path, grid: Path, fake: list[str], runs: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "GRID": str(grid), "RUNS": str(tmp_path / runs), "KEPT": str(tmp_path / "kept"),
                   "RESULTS": str(tmp_path / "results"), "PYTHON": sys.executable, "PYTHONPATH": str(REPO),
                   TRAIN_COMMAND_ENV: " ".join(fake), **env}
    return subprocess.run(["bash", str(REPO / "scripts/grid-by-seed.sh")], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=300)


def finished(grid_dir: Path) -> list[str]:
    return sorted(GridDir(grid_dir).relative(run) for _, _, run in GridDir(grid_dir).finished_runs())


@pytest.mark.integration
def test_each_seed_is_kept_as_it_ends_and_a_new_machine_resumes_from_the_kept_seeds(tmp_path, fake):
    grid = write_grid(tmp_path, LADDER)
    first = by_seed(tmp_path, grid, fake, "machine1", SEEDS="0")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "ladder seed(s) 0: kept in" in first.stdout
    kept = finished(tmp_path / "kept/ladder")
    assert len(kept) == RUNS_A_SEED and all(run.endswith("/seed0") for run in kept)
    assert not (tmp_path / "kept/ladder/vanilla,trunk/seed0/checkpoints").exists()  # results only
    assert not (tmp_path / "results").exists()  # the board sees the grid only once it is whole

    second = by_seed(tmp_path, grid, fake, "machine2")  # a new machine: only the kept folder carries over
    assert second.returncode == 0, second.stdout + second.stderr
    assert "seeded" in second.stdout and "ladder seed(s) 0: training" not in second.stdout
    assert not list((tmp_path / "machine2/ladder").glob("*/seed0/calls.jsonl"))  # seed 0 was not trained again
    assert len(list((tmp_path / "machine2/ladder").glob("*/seed1/calls.jsonl"))) == RUNS_A_SEED
    assert len(finished(tmp_path / "kept/ladder")) == 2 * RUNS_A_SEED
    results = tmp_path / "results/ladder"
    assert len(finished(results)) == 2 * RUNS_A_SEED, second.stdout + second.stderr
    assert yaml.safe_load((results / "grid.yaml").read_text())["seeds"] == [0, 1]  # the manifest names both
    assert (results / "report.md").is_file()
    assert "every seed done" in second.stdout


@pytest.mark.integration
def test_a_slice_of_cells_trains_two_seeds_together_and_keeps_them_without_finishing_the_grid(tmp_path, fake):
    grid = write_grid(tmp_path, LADDER)
    sliced = by_seed(tmp_path, grid, fake, "machine1", TOGETHER="2", SLICE="resformer,*")
    assert sliced.returncode == 0, sliced.stdout + sliced.stderr
    assert "ladder seed(s) 0 1: training (8 of 8 runs left)" in sliced.stdout  # 4 runs of the slice a seed
    assert "ladder seed(s) 0 1: kept in" in sliced.stdout
    kept = finished(tmp_path / "kept/ladder")
    assert len(kept) == 8 and all(run.startswith("resformer,") for run in kept)
    assert not (tmp_path / "results").exists() and "of the cells resformer,*" in sliced.stdout


@pytest.mark.integration
def test_a_seed_whose_rungs_cannot_start_here_is_said_and_not_kept(tmp_path, fake):
    """A trunk kept without its rungs (its checkpoints stayed on a machine that went) leaves them waiting: the seed is
    reported unfinished, with what to do, and nothing of it is kept."""
    grid = write_grid(tmp_path, LADDER)
    assert by_seed(tmp_path, grid, fake, "machine1", SEEDS="0").returncode == 0
    for rung in (tmp_path / "kept/ladder").glob("*,max_steps=*"):
        shutil.rmtree(rung)
    stuck = by_seed(tmp_path, grid, fake, "machine2", SEEDS="0")
    assert stuck.returncode == 1
    assert "6 run(s) could not start here; train this seed again" in stuck.stdout
    assert len(finished(tmp_path / "kept/ladder")) == 2  # the trunks only, as before


@pytest.mark.integration
def test_seeding_leaves_a_run_already_here_as_it_is_and_complains_of_nothing(tmp_path, fake):
    """A run of the runs folder that links to a shared grid's run (the kept folder holds a copy of it) is seeded
    around: the link stays a link, the other kept runs are copied in (cells named with a dot, as a swept rate names
    them, among them), and no `cp` complaint reaches the log."""
    grid = write_grid(tmp_path, {**LADDER, "matrix": {"model.lr": [2.0e-3]}})
    assert by_seed(tmp_path, grid, fake, "machine1", SEEDS="0").returncode == 0
    link = tmp_path / "machine2/ladder/vanilla,lr=0.002,trunk/seed0"
    link.parent.mkdir(parents=True)
    link.symlink_to(tmp_path / "machine1/ladder/vanilla,lr=0.002,trunk/seed0")
    seeded = by_seed(tmp_path, grid, fake, "machine2", SEEDS="0")
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    assert "cp:" not in seeded.stdout + seeded.stderr and link.is_symlink()
    assert len(finished(tmp_path / "machine2/ladder")) == RUNS_A_SEED and "ladder seed(s) 0: training" not in seeded.stdout


@pytest.mark.integration
def test_a_gpu_slice_seeded_with_the_kept_seeds_trains_only_the_rest(tmp_path, fake):
    """scripts/gpu-grids.sh on a lent machine starts from the seeds a CPU kept: it trains the others and exports the
    whole grid."""
    grid = write_grid(tmp_path, LADDER)
    assert by_seed(tmp_path, grid, fake, "cpu", SEEDS="0").returncode == 0
    env = {**os.environ, "GRIDS": str(grid), "OUT": str(tmp_path / "slice"), "RUNS": str(tmp_path / "gpu"),
           "RESULTS": str(tmp_path / "results"), "KEPT": str(tmp_path / "kept"), "SET": "trainer.accelerator=cpu",
           "PREPARE": "none", "PARALLEL": "1", "WHEELS": str(tmp_path / "no-wheels"), "PYTHON": sys.executable,
           "PYTHONPATH": str(REPO), TRAIN_COMMAND_ENV: " ".join(fake)}
    sliced = subprocess.run(["bash", str(REPO / "scripts/gpu-grids.sh")], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=300)
    assert sliced.returncode == 0, sliced.stdout + sliced.stderr
    assert f"ladder: seeded with {RUNS_A_SEED} finished run(s) of {tmp_path / 'kept/ladder'}" in sliced.stdout
    assert not list((tmp_path / "gpu/ladder").glob("*/seed0/calls.jsonl"))
    assert len(list((tmp_path / "gpu/ladder").glob("*/seed1/calls.jsonl"))) == RUNS_A_SEED
    with tarfile.open(tmp_path / "slice/exports.tar") as tar:
        tar.extractall(tmp_path / "exports", filter="data")
    merge_export(tmp_path / "exports/ladder.tar.gz", tmp_path / "results")
    assert len(finished(tmp_path / "results/ladder")) == 2 * RUNS_A_SEED


@pytest.mark.integration
def test_a_queue_trains_its_entries_in_order_and_a_second_call_after_landing_trains_and_keeps_nothing(tmp_path, fake):
    grid = write_grid(tmp_path, LADDER)
    queue = tmp_path / "queue.txt"
    queue.write_text(f"# order\n{grid} resformer,*   # one arm first\n\n{grid}\n")
    env = {**os.environ, "QUEUE": str(queue), "RUNS": str(tmp_path / "runs"), "KEPT": str(tmp_path / "kept"),
           "RESULTS": str(tmp_path / "results"), "PYTHON": sys.executable, "PYTHONPATH": str(REPO),
           TRAIN_COMMAND_ENV: " ".join(fake)}

    def queued() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(REPO / "scripts/grid-queue.sh")], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)

    first = queued()
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.index("(slice resformer,*)") < first.stdout.index("ladder seed(s) 0 1: training (8 of 8"), first.stdout
    assert "every entry of" in first.stdout and len(finished(tmp_path / "results/ladder")) == 2 * RUNS_A_SEED
    trained = list((tmp_path / "runs/ladder").glob("*/seed*/calls.jsonl"))
    assert len(trained) == 2 * RUNS_A_SEED and all(len(path.read_text().splitlines()) == 1 for path in trained)
    shutil.rmtree(tmp_path / "kept/ladder")  # landed: its kept folder goes, as docs/unfinished-grids/README.md says
    again = queued()
    assert again.returncode == 0 and "training" not in again.stdout, again.stdout + again.stderr
    assert "seeds 0 1 already in" in again.stdout and "kept in" not in again.stdout
    assert not (tmp_path / "kept/ladder").exists()  # a landed grid's seeds are not kept again
