"""CPU slots of the local executor: concurrent runs and threads per run are settings, and a run's results do
not depend on how many runs trained beside it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from lit_resformer.execution.executors import LocalExecutor
from lit_resformer.grids import GridOptions, PoolOptions, load_grid, run_grid
from lit_resformer.provenance import RUNS_SHARING_ENV
from lit_resformer.runs.run_dir import RunDir
from tests.helpers.experiments import tiny_experiment


def test_slots_and_threads_per_run_are_set_for_every_run(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    pool = LocalExecutor(devices=[], cpu_slots=2, threads_per_run=1)
    assert pool.slots == [{"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}] * 2
    assert "2 concurrent run(s), 1 thread(s) each" in pool.describe()
    # asked for explicitly, the threads win over the environment's; otherwise the cores are shared out
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert LocalExecutor(devices=[], cpu_slots=1, threads_per_run=2).slots == [{"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2"}]
    assert LocalExecutor(devices=[], cpu_slots=2).slots[0] == {"CUDA_VISIBLE_DEVICES": ""}
    assert LocalExecutor(devices=["0", "1"], threads_per_run=4).slots[1] == \
        {"CUDA_VISIBLE_DEVICES": "1", RUNS_SHARING_ENV: "1", "OMP_NUM_THREADS": "4"}
    # runs sharing a GPU each record how many share it (their MFU is a share of the card's)
    shared = LocalExecutor(devices=["0"], runs_per_gpu=3, threads_per_run=1).slots
    assert shared == [{"CUDA_VISIBLE_DEVICES": "0", RUNS_SHARING_ENV: "3", "OMP_NUM_THREADS": "1"}] * 3
    with pytest.raises(ValueError, match=r"threads_per_run \(0\) must be >= 1"):
        LocalExecutor(devices=[], threads_per_run=0)


def interval(run: Path) -> tuple[datetime, datetime]:
    summary = RunDir(run).read_summary()
    return datetime.fromisoformat(summary["started_at"]), datetime.fromisoformat(summary["finished_at"])


@pytest.mark.slow  # four real training processes: ~40 s on an idle machine, minutes on a shared one
def test_results_do_not_depend_on_concurrent_runs(tmp_path, tiny_corpus, data_cache):
    base = tiny_experiment(tmp_path / "base.yaml", tiny_corpus, data_cache, trainer={"max_steps": 6, "val_check_interval": 3})
    grid = tmp_path / "pair.yaml"
    grid.write_text(f"name: pair\nbase: {base}\nbaseline: vanilla\nseeds: [0]\n"
                    "cells: {vanilla: {model.config.residual.target: none}, resformer: {}}\n")
    results = {}
    for slots in (1, 2):
        runs = tmp_path / f"slots{slots}"
        outcome = run_grid(load_grid(grid), GridOptions(runs_dir=runs,
                                             pool=PoolOptions(devices=[], cpu_slots=slots, threads_per_run=1)), progress=False)
        assert outcome.failed == [], outcome.summaries
        results[slots] = {cell: RunDir(runs / "pair" / cell / "seed0").read_metrics() for cell in ("vanilla", "resformer")}
        # the thread count its sums ran with is part of what a run is recorded as (rederive compares it)
        assert RunDir(runs / "pair" / "vanilla" / "seed0").read_summary()["provenance"]["threads"] == "1"
        (first_start, first_end), (second_start, second_end) = (interval(runs / "pair" / c / "seed0") for c in ("vanilla", "resformer"))
        side_by_side = second_start < first_end and first_start < second_end
        assert side_by_side == (slots == 2)
    for cell in ("vanilla", "resformer"):
        for name in ("train/loss", "val/loss"):
            assert results[1][cell][name] == results[2][cell][name], (cell, name)  # bit for bit
