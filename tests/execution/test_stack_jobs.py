"""The grid runner's packing: runs that may share a stack are grouped (at most --stack a stack, resuming runs only
with runs at the same step), the rest stay solo, --stack auto is one run a process on a CPU and a memory estimate on a
GPU; and a grid trained stacked leaves run directories that read back as the solo grid's."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from lit_resformer import load_checkpoint
from lit_resformer.execution.jobs import RunJob
from lit_resformer.execution.stack_jobs import (
    MAX_AUTO_STACK,
    StackJob,
    StackSettingError,
    auto_size,
    pack,
    run_memory_bytes,
)
from lit_resformer.grids import GridOptions, PoolOptions, load_grid, run_grid
from lit_resformer.runs.results import load_results
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.training.config_checker import ConfigChecker
from tests.helpers.experiments import experiment

CPU_POOL = SimpleNamespace(slots=[{"CUDA_VISIBLE_DEVICES": ""}])
FIT = ["lit-resformer", "fit"]


@pytest.fixture(scope="module")
def resolved(tmp_path_factory, tiny_corpus, data_cache):
    path = experiment(tmp_path_factory.mktemp("packing"), tiny_corpus, data_cache)
    return ConfigChecker().resolved(yaml.safe_load(path.read_text()))


def jobs_of(tmp_path, configs: dict[str, dict], train=True) -> tuple[list[RunJob], dict]:
    jobs = [RunJob("g", name, 0, tmp_path / name, FIT, train=train) for name in configs]
    return jobs, {job.run_dir: configs[job.cell] for job in jobs}


def packed(jobs, configs, stack):
    return pack(jobs, lambda job: configs[job.run_dir], stack, "local", CPU_POOL)


def names(job) -> list[str]:
    return [member.cell for member in job.members] if isinstance(job, StackJob) else [job.cell]


def test_runs_that_may_share_a_stack_are_packed_and_the_rest_stay_solo(tmp_path, resolved):
    seeds = {f"seed{i}": {**copy.deepcopy(resolved), "seed_everything": i} for i in range(5)}
    deeper = copy.deepcopy(resolved)
    deeper["model"]["config"]["n_layer"] = 3
    accumulating = copy.deepcopy(resolved)
    accumulating["trainer"]["accumulate_grad_batches"] = 2
    jobs, configs = jobs_of(tmp_path, {**seeds, "deeper": deeper, "accumulating": accumulating})
    assert packed(jobs, configs, 1) == jobs
    result = packed(jobs, configs, 2)
    assert sorted(names(job) for job in result) == [["accumulating"], ["deeper"], ["seed0", "seed1"],
                                                    ["seed2", "seed3"], ["seed4"]]
    assert {tuple(job.command) for job in result if isinstance(job, StackJob)} == {("lit-resformer", "fit-stacked")}
    assert sorted(names(job) for job in packed(jobs, configs, 3))[2:] == [["seed0", "seed1", "seed2"],
                                                                          ["seed3", "seed4"]]
    assert packed(jobs, configs, "auto") == jobs  # on a CPU: one run a process
    post_only, configs = jobs_of(tmp_path, seeds, train=False)  # nothing to train: nothing to stack
    assert packed(post_only, configs, 2) == post_only


def test_resuming_runs_stack_only_with_runs_at_the_same_step(tmp_path, resolved):
    jobs, configs = jobs_of(tmp_path, {f"seed{i}": {**copy.deepcopy(resolved), "seed_everything": i}
                                       for i in range(4)})
    for job, step in zip(jobs, (20, 20, 10, None), strict=True):
        if step is not None:
            folder = RunDir(job.run_dir).checkpoints_dir
            folder.mkdir(parents=True)
            torch.save({"state_dict": {}, "global_step": step, "loops": {}}, folder / "last.ckpt")
    assert sorted(names(job) for job in packed(jobs, configs, 4)) == [["seed0", "seed1"], ["seed2"], ["seed3"]]


def test_bad_stack_settings_are_refused(tmp_path, resolved):
    jobs, configs = jobs_of(tmp_path, {"a": resolved})
    for setting in (0, -1, "all", True):
        with pytest.raises(StackSettingError, match="--stack"):
            packed(jobs, configs, setting)
    with pytest.raises(StackSettingError, match="local executor"):
        pack(jobs, lambda job: configs[job.run_dir], 2, "slurm", CPU_POOL)
    twins, configs = jobs_of(tmp_path, {"a": resolved, "b": {**resolved, "seed_everything": 5}})
    for job in twins:
        job.command = ["python", "fake_trainer.py", "train"]
    with pytest.raises(StackSettingError, match="ends in `fit`"):
        packed(twins, configs, 2)


def test_auto_size_fills_a_gpus_memory_share(resolved):
    bf16 = {**copy.deepcopy(resolved), "trainer": {**resolved["trainer"], "precision": "bf16-mixed"}}
    per_run = run_memory_bytes(bf16)
    assert per_run < run_memory_bytes(resolved)  # fp32 activations take twice the bytes
    assert auto_size(bf16, None) == 1  # a CPU
    assert auto_size(bf16, 15 * per_run) == 10  # 70% of the memory
    assert auto_size(bf16, per_run) == 1
    assert auto_size(bf16, 1e6 * per_run) == MAX_AUTO_STACK
    bigger = copy.deepcopy(bf16)
    bigger["data"]["micro_batch_size"] *= 8
    assert run_memory_bytes(bigger) > per_run


@pytest.mark.integration
def test_a_grid_trained_stacked_reads_back_as_the_solo_grid(tmp_path, tiny_corpus, data_cache):
    """One cell, two seeds: trained by the runner alone (`fit`, one run after the other) and stacked (`--stack 2`,
    one `fit-stacked`): every summary field but when, where and how long is equal (losses within 1e-5), the grid
    results load alike and each checkpoint loads."""
    base = experiment(tmp_path, tiny_corpus, data_cache, trainer={"max_steps": 12, "val_check_interval": 6},
                      checkpoint={"every_n_train_steps": 6}, data={"val_sequences_per_domain": 8})
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "g", "base": str(base), "baseline": "resformer", "seeds": [0, 1],
                                    "cells": {"resformer": {}}}))
    train = [sys.executable, "-m", "lit_resformer.cli", "fit"]
    outcomes = {}
    for stack in (1, 2):
        runs = tmp_path / f"runs-stack{stack}"
        outcomes[stack] = run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=train,
                                                     pool=PoolOptions(stack=stack)), progress=False)
        assert not outcomes[stack].failed
    for name, solo in outcomes[1].summaries.items():
        stacked = outcomes[2].summaries[name]
        assert stacked["stacked"] == {"runs": 2, "with": ["g/resformer/seed0", "g/resformer/seed1"]}
        assert "stacked" not in solo
        timing = {"started_at", "finished_at", "wall_time_sec", "pid", "command", "tokens_per_sec", "provenance",
                  "stacked"}
        for key in set(solo) | set(stacked):
            if key in timing:
                continue
            a, b = solo[key], stacked[key]
            if isinstance(a, float):
                assert b == pytest.approx(a, abs=1e-5), key
            elif isinstance(a, dict):
                assert b.keys() == a.keys() and all(b[k] == pytest.approx(v, abs=1e-5) for k, v in a.items()), key
            else:
                assert a == b, key
        code = ("git_commit", "git_dirty")  # the same checkout, unless it changes between the two grid runs
        assert {k: v for k, v in stacked["provenance"].items() if k not in code} == \
            {k: v for k, v in solo["provenance"].items() if k not in code}
        load_checkpoint(Path(outcomes[2].grid_dir) / name.split("/", 1)[1] / "checkpoints/last.ckpt")
    solo_results, stacked_results = (load_results(outcomes[stack].grid_dir) for stack in (1, 2))
    for seed in (0, 1):
        a, b = solo_results.done["resformer"][seed], stacked_results.done["resformer"][seed]
        assert b.final("val_loss") == pytest.approx(a.final("val_loss"), abs=1e-5)
        assert (b.train_curve(10) - a.train_curve(10)).abs().max() < 1e-5
