"""Runner, store and executors with a fake training command that honours the `lit-resformer fit`
contract: `--config YAML --trainer.default_root_dir RUN [--ckpt_path last]`, a new
`csv/version_N/metrics.csv` per start, `checkpoints/last.ckpt`, and, when the loss blows up, the run's
divergence record and a non-zero exit."""

import hashlib
import importlib.metadata
import io
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
import yaml

from lit_resformer.grids import GridError, GridOptions, PoolOptions, load_grid, run_grid
from lit_resformer.provenance import FIELDS as PROVENANCE_FIELDS
from lit_resformer.reports import write_report
from lit_resformer.runs.curves import read_metrics
from lit_resformer.runs.directory import MANIFEST_VERSION
from lit_resformer.runs.run_dir import RunConflict, RunDir
from tests.helpers.fake_trainer import BASE, THREE_CELLS, alive, calls, summary, write_grid


@pytest.mark.integration
def test_grid_is_idempotent_resumes_killed_runs_and_records_divergence(tmp_path, fake, monkeypatch):
    grid = write_grid(tmp_path, THREE_CELLS)
    runs = tmp_path / "runs"
    g = runs / "g"

    monkeypatch.setenv("FAKE_KILL_CELL", "resformer")
    monkeypatch.setenv("FAKE_KILL_AFTER", "10")
    first = run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=fake, report=write_report), progress=False)
    assert summary(g / "vanilla/seed0")["status"] == "done"
    killed = summary(g / "resformer/seed0")
    assert killed["status"] == "failed" and killed["error"].startswith("killed by SIGKILL")
    diverged = summary(g / "boom/seed0")
    assert diverged["status"] == "diverged" and diverged["diverged_step"] == 3
    assert first.failed == ["g/resformer/seed0"]
    # The resolved config went into the run before it started, and the report exists already.
    assert yaml.safe_load((g / "vanilla/seed0/experiment.yaml").read_text())["seed_everything"] == 0
    assert "diverged at step 3" in (g / "report.md").read_text()

    monkeypatch.delenv("FAKE_KILL_CELL")
    second = run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=fake), progress=False)
    assert second.failed == []
    assert len(calls(g / "vanilla/seed0")) == 1  # finished: not retrained
    assert len(calls(g / "boom/seed0")) == 1  # diverged is a result, not retried
    resumed = calls(g / "resformer/seed0")
    assert len(resumed) == 2
    assert "--ckpt_path" not in resumed[0]["argv"]
    assert resumed[1]["argv"][-2:] == ["--ckpt_path", "last"]
    final = summary(g / "resformer/seed0")
    assert final["status"] == "done" and final["attempts"] == 2 and final["resumed"]
    assert final["steps"] == 19

    # The interrupted-and-resumed run ends exactly like an uninterrupted one.
    clean = run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "clean", train_command=fake), progress=False)
    assert clean.failed == []
    clean_dir = tmp_path / "clean/g/resformer/seed0"
    assert read_metrics(g / "resformer/seed0").equals(read_metrics(clean_dir))
    for key in ("final_train_loss", "best_train_loss", "final_val_loss", "final_val_loss_by_domain", "steps"):
        assert final[key] == summary(clean_dir)[key]
    assert final["final_val_loss_by_domain"].keys() == {"code", "english"}
    assert final["params"] > 0 and final["kv_cache_bytes_per_token"] > 0
    assert final["tokens_per_sec"] == 1000.0
    # What each run and the grid ran on: versions, device, precision, the code's commit.
    for record in (final, yaml.safe_load((g / "grid.yaml").read_text())):
        provenance = record["provenance"]
        assert set(provenance) == set(PROVENANCE_FIELDS)
        assert provenance["torch"] == torch.__version__ and provenance["python"] == platform.python_version()
        assert provenance["lightning"] == importlib.metadata.version("lightning")
        assert provenance["precision"] == "32-true" and provenance["device"]
        assert provenance["device"].startswith("CPU: ") or torch.cuda.is_available()
        assert provenance["git_commit"] is None or len(provenance["git_commit"]) == 40
    assert final["provenance"]["threads"] == os.environ.get("OMP_NUM_THREADS")  # one slot: the environment's
    # a CPU run shares no GPU and its starter measured no peak (a GPU run's MFU needs them: reports/budget.py)
    assert final["device_use"] == {"measured_peak_flops": None, "runs_sharing_device": None}
    assert yaml.safe_load((g / "grid.yaml").read_text())["version"] == MANIFEST_VERSION
    assert "## Provenance" in (g / "report.md").read_text()

    # A third run has nothing to do.
    out = tmp_path / "dry.txt"
    with open(out, "w") as f:
        run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=fake, dry_run=True), out=f)
    listing = out.read_text()
    assert "0 of 3 runs would start" in listing
    assert "skip: diverged at step 3" in listing


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the trainer's parent-death signal is Linux-only")
def test_killing_the_runner_stops_its_trainer_and_a_rerun_resumes(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_STEP_SLEEP", "0.2")  # 20 steps: ~4 s, long enough to be killed mid-run
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}}})
    runs = tmp_path / "runs"
    run_dir = runs / "g/vanilla/seed0"
    runner = subprocess.Popen(
        [sys.executable, "-m", "lit_resformer.cli", "grid", str(grid), "--runs-dir", str(runs), "--no-report"],
        env={**os.environ, "LIT_RESFORMER_TRAIN_CMD": shlex.join(fake)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while not (run_dir / "checkpoints/last.ckpt").exists():
        assert time.time() < deadline and runner.poll() is None
        time.sleep(0.1)
    runner.kill()  # only the runner: its trainer must not live on, writing into the run
    runner.wait()
    trainer = calls(run_dir)[0]["pid"]
    while alive(trainer):
        assert time.time() < deadline, "the trainer outlived its runner"
        time.sleep(0.1)
    outcome = run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=fake), progress=False)
    assert outcome.failed == []
    assert calls(run_dir)[1]["argv"][-2:] == ["--ckpt_path", "last"]
    assert summary(run_dir)["attempts"] == 2


def test_changed_config_is_refused_naming_the_run(tmp_path, fake):
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}}})
    runs = tmp_path / "runs"
    run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=fake), progress=False)
    changed = {**BASE, "trainer": {**BASE["trainer"], "max_steps": 30}}
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}}}, base=changed)
    with pytest.raises(RunConflict, match=r"g/vanilla/seed0 .*trainer.max_steps: 20 -> 30"):
        run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=fake), progress=False)
    assert len(calls(runs / "g/vanilla/seed0")) == 1


def test_config_that_runs_the_same_is_no_conflict(tmp_path, fake):
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}}})
    runs = tmp_path / "runs"
    run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=fake), progress=False)
    spelled_out = {**BASE, "data": {**BASE["data"], "holdout_fraction": 0.02}}  # LMDataModule's default, written out
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}}}, base=spelled_out)
    assert run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=fake), progress=False).failed == []
    assert len(calls(runs / "g/vanilla/seed0")) == 1  # done already: not retrained


def test_dry_run_lists_runs_and_writes_nothing(tmp_path, fake):
    grid = write_grid(tmp_path, {**THREE_CELLS, "seeds": [0, 1]})
    out = tmp_path / "dry.txt"
    with open(out, "w") as f:
        run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", train_command=fake, dry_run=True), out=f)
    listing = out.read_text()
    assert "3 cells x 2 seeds = 6 runs" in listing
    assert listing.count(" run\n") == 6
    assert "g/boom/seed1" in listing
    assert not (tmp_path / "runs").exists()


@pytest.mark.integration
def test_local_pool_gives_concurrent_runs_distinct_devices(tmp_path, fake, monkeypatch):
    device_dir = tmp_path / "devices"
    device_dir.mkdir()
    monkeypatch.setenv("FAKE_DEVICE_DIR", str(device_dir))
    monkeypatch.setenv("FAKE_WAIT_FOR", "3")  # each run waits until three runs hold devices at once
    monkeypatch.setenv("FAKE_STEP_SLEEP", "0.01")
    grid = write_grid(tmp_path, {"baseline": "lr=0.001", "matrix": {"model.lr": [1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 6e-3]}})
    outcome = run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", train_command=fake,
                                         pool=PoolOptions(devices=["0", "1", "2"])), progress=False)
    assert outcome.failed == [], {k: s.get("error") for k, s in outcome.summaries.items()}
    used = [calls(p)[0]["cuda"] for p in (tmp_path / "runs/g").glob("*/seed0")]
    assert len(used) == 6 and set(used) == {"0", "1", "2"}
    assert not list(device_dir.glob("busy-*"))


@pytest.mark.integration
def test_slurm_executor_job_is_requeued_on_preemption_and_resumes(tmp_path, fake, monkeypatch):
    """Through submitit's local executor: SIGUSR2 (what SLURM sends before preemption or the time
    limit) makes the job checkpoint itself and requeue; the requeued job resumes training from
    last.ckpt and the run completes."""
    monkeypatch.setenv("FAKE_BLOCK_CELL", "vanilla")  # hangs after its step-10 checkpoint until stopped
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}}})
    run_dir = tmp_path / "runs/g/vanilla/seed0"
    outcome = []
    slurm = PoolOptions(executor="slurm", gpus_per_run=0, slurm={"cluster": "local", "poll_s": 0.2, "time_min": 10})
    options = GridOptions(runs_dir=tmp_path / "runs", train_command=fake, pool=slurm)
    runner = threading.Thread(target=lambda: outcome.append(run_grid(load_grid(grid), options, progress=False)))
    runner.start()
    ckpt = run_dir / "checkpoints/last.ckpt"
    deadline = time.time() + 120
    while not (ckpt.exists() and json.loads(ckpt.read_text())["step"] >= 10):
        assert time.time() < deadline, "the job never reached its checkpoint"
        time.sleep(0.1)
    os.kill(summary(run_dir)["pid"], signal.SIGUSR2)  # the submitit job process, not the trainer
    runner.join(120)
    assert not runner.is_alive()
    assert outcome[0].failed == []
    result = summary(run_dir)
    assert result["status"] == "done" and result["attempts"] == 2 and result["resumed"]
    assert [c["argv"][-2:] == ["--ckpt_path", "last"] for c in calls(run_dir)] == [False, True]
    assert list((tmp_path / "runs/g/.submitit").iterdir())  # submitit's job folders


def test_slurm_dry_run_prints_sbatch_parameters(tmp_path, fake):
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}}})
    out = tmp_path / "dry.txt"
    with open(out, "w") as f:
        run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", train_command=fake, dry_run=True,
                                   pool=PoolOptions(executor="slurm", slurm={"partition": "gpu", "time_min": 600, "cpus_per_task": 8, "mem_gb": 64})), out=f)
    text = out.read_text()
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=600", "#SBATCH --cpus-per-task=8", "#SBATCH --mem=64GB",
                 "#SBATCH --gpus-per-node=1", "#SBATCH --signal=USR2@120", "#SBATCH --job-name=g.vanilla.seed0"):
        assert line in text, line
    assert not (tmp_path / "runs").exists()


def test_gpu_runs_are_checked_against_the_executor(tmp_path, fake):
    gpu_base = {**BASE, "trainer": {**BASE["trainer"], "accelerator": "gpu", "devices": 8}}
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}}}, base=gpu_base)
    with pytest.raises(GridError, match="no GPU is visible"):
        run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", train_command=fake, dry_run=True,
                                   pool=PoolOptions(devices=[])))
    with pytest.raises(GridError, match="trainer.devices=8 .* pass --gpus-per-run 8"):
        run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", train_command=fake, dry_run=True,
                                   pool=PoolOptions(executor="slurm")))
    run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", train_command=fake, dry_run=True,
                               pool=PoolOptions(executor="slurm", gpus_per_run=8)), out=io.StringIO())
    assert not (tmp_path / "runs").exists()


def test_eval_that_cannot_run_is_a_clear_error_before_training(tmp_path, fake, monkeypatch):
    monkeypatch.setitem(sys.modules, "lit_resformer.eval.run", None)  # as if lm-eval, which it imports, were missing
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}}})
    with pytest.raises(RuntimeError, match=r"--eval cannot run here: .*eval\.run"):
        run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", train_command=fake, post_training=("eval",)))
    assert not (tmp_path / "runs").exists()


def test_grid_options_refuse_unknown_steps_and_executors(tmp_path, fake):
    with pytest.raises(GridError, match=r"post_training: unknown step\(s\) \['evaluate'\]; choose from \['analyze', 'eval'\]"):
        GridOptions(post_training=("evaluate",))
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}}})
    with pytest.raises(GridError, match=r"unknown executor 'pbs'; choose one of \['local', 'slurm'\]"):
        run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", train_command=fake, pool=PoolOptions(executor="pbs")))
    with pytest.raises(GridError, match=r"--stack 0 is not allowed"):  # the packing's refusal, as the grid's error
        run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", train_command=fake, pool=PoolOptions(stack=0)))


def _exit_code(command: list[str]) -> int:
    from lit_resformer.cli import main

    with pytest.raises(SystemExit) as stop:
        main(command)
    return stop.value.code or 0


@pytest.mark.integration
def test_cli_grid_and_report(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("LIT_RESFORMER_TRAIN_CMD", " ".join(fake))
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}})
    assert _exit_code(["grid", str(grid), "--runs-dir", str(tmp_path / "runs")]) == 0
    assert (tmp_path / "runs/g/index.html").is_file()
    (tmp_path / "runs/g/index.html").unlink()
    from lit_resformer.cli import main

    main(["report", str(tmp_path / "runs/g")])
    assert (tmp_path / "runs/g/index.html").is_file()
    bad = write_grid(tmp_path, {"baseline": "nope", "cells": {"vanilla": {}}}, name="bad.yaml")
    assert _exit_code(["grid", str(bad), "--runs-dir", str(tmp_path / "runs")]) == 2


def test_a_grid_from_a_dirty_checkout_is_refused_unless_allowed_and_then_each_run_keeps_the_patch(tmp_path, fake,
                                                                                                    monkeypatch, capsys):
    """A run must name the code that trained it: `grid` refuses a checkout with uncommitted changes before anything is
    written; told to go on (--allow-dirty), every run keeps the patch beside its results and its hash in its
    provenance, so a dirty-tree run can be read back as the code it ran."""
    from lit_resformer import provenance
    from lit_resformer.execution import jobs

    patch = "diff --git a/lit_resformer/model/transformer.py b/lit_resformer/model/transformer.py\n+# changed\n"
    monkeypatch.setattr(provenance, "git_state", lambda: ("0123abcd", True))
    for module in (provenance, jobs):
        monkeypatch.setattr(module, "git_patch", lambda: patch)
    monkeypatch.delenv(provenance.ALLOW_DIRTY_ENV, raising=False)
    monkeypatch.setenv("LIT_RESFORMER_TRAIN_CMD", " ".join(fake))
    grid = write_grid(tmp_path, {"baseline": "vanilla", "seeds": [0], "cells": {"vanilla": {}}})
    runs = tmp_path / "runs"
    assert _exit_code(["grid", str(grid), "--runs-dir", str(runs), "--no-report"]) == 2
    assert "uncommitted changes" in capsys.readouterr().err and not runs.exists()
    assert _exit_code(["grid", str(grid), "--runs-dir", str(runs), "--dry-run"]) == 0  # a dry run trains nothing

    assert _exit_code(["grid", str(grid), "--runs-dir", str(runs), "--no-report", "--allow-dirty"]) == 0
    run = RunDir(runs / "g/vanilla/seed0")
    recorded = run.read_summary()["provenance"]
    assert (recorded["git_commit"], recorded["git_dirty"]) == ("0123abcd", True)
    assert run.diff_file.read_text() == patch and run.diff_file in run.result_files()
    assert recorded["git_diff_sha256"] == hashlib.sha256(patch.encode()).hexdigest()
