"""Cluster execution against a real single-node Slurm that this module starts (scripts/local-slurm.sh):
the ablation grid's slurm executor, Lightning DDP under srun, and a requeued job resuming exactly.

Run with `.venv/bin/pytest -m slurm` as root; the fixture installs Debian's slurm-wlm and munge if they
are missing and stops every daemon it started at the end.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from lit_resformer.corpora.sources import SNIFF_BYTES
from lit_resformer.runs.run_dir import RunDir
from tests.helpers.experiments import tiny_experiment

pytestmark = pytest.mark.slurm


def metric_files(run: Path) -> list[Path]:
    return RunDir(run).metric_files()


def read_metrics(run: Path) -> dict:
    return RunDir(run).read_metrics()


REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "local-slurm.sh"
HELPERS = Path(__file__).parents[1] / "helpers"
BIN = Path(sys.executable).parent  # the venv's bin: python and the lit-resformer console script
SLURM_TOOLS = ("slurmctld", "slurmd", "sinfo", "sbatch", "srun", "squeue", "scontrol", "munged", "mungekey")
JOB_TIMEOUT_S = 300


# ------------------------------------------------------------------------------------------------
# the cluster


def _port_pair_is_free(port: int) -> bool:
    for p in (port, port + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def free_port_pair() -> int:
    """Slurm's default ports (6817 for slurmctld, 6818 for slurmd) unless something holds them."""
    for port in (6817, *range(26817, 27817, 2)):
        if _port_pair_is_free(port):
            return port
    raise RuntimeError("no free pair of ports for slurmctld and slurmd")


def local_slurm(action: str, state: Path, port: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "LOCAL_SLURM_PORT": str(port), "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run([str(SCRIPT), action, str(state)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="session")
def slurm():
    """A running single-node cluster for the session; yields its state directory. SLURM_CONF points
    every client (sbatch, squeue, submitit) at it while the tests run."""
    if os.geteuid() != 0:
        pytest.skip("the single-node Slurm needs root (slurmd and slurmctld run as root)")
    if not all(shutil.which(tool) for tool in SLURM_TOOLS) and shutil.which("apt-get") is None:
        pytest.skip("Slurm is not installed and there is no apt-get to install slurm-wlm and munge")
    # Not under pytest's tmp_path: its root is private to root, and munged (user munge) must reach its socket.
    state = Path(tempfile.mkdtemp(prefix="lit-resformer-slurm-"))
    port = free_port_pair()
    started = local_slurm("start", state, port)
    if started.returncode != 0:
        stopped = local_slurm("stop", state, port)
        shutil.rmtree(state, ignore_errors=True)
        assert stopped.returncode == 0, f"could not clean up a failed start: {stopped.stderr}"
        pytest.skip(f"the single-node Slurm did not start:\n{started.stderr[-3000:]}")
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(state / "slurm.conf")
    try:
        yield state
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF")
        else:
            os.environ["SLURM_CONF"] = previous
        stopped = local_slurm("stop", state, port)
        assert stopped.returncode == 0, f"local-slurm.sh stop failed:\n{stopped.stderr}"
        assert not (state / "pids").exists()  # stop removes its record only once every daemon is gone
        shutil.rmtree(state, ignore_errors=True)


def slurm_cmd(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=60).stdout


def job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job` as a dict (JobState, Restarts, JobName, NumTasks, ...)."""
    return dict(re.findall(r"(\w+)=(\S*)", slurm_cmd("scontrol", "show", "job", job_id)))


def in_queue(job_id: str) -> bool:
    return bool(slurm_cmd("squeue", "-h", "-j", job_id).strip())


def wait_for(condition, what: str, job_id: str, log: Path, timeout_s: float = JOB_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], timeout=60)
            pytest.fail(f"timed out waiting for {what} (job {job_id}); its log:\n{job_log(log)}")
        time.sleep(1)


def wait_until_ended(job_id: str, log: Path) -> None:
    wait_for(lambda: not in_queue(job_id), "the job to end", job_id, log)


def wait_until_held(run: Path, job_id: str, log: Path) -> None:
    """Until the job's first run holds for preemption (slurm_probe.HoldForRequeue), or the job ends."""
    wait_for(lambda: (run / "held").exists() or not in_queue(job_id), "the first run to reach its hold", job_id, log)
    assert (run / "held").exists(), f"the job ended before it could be preempted:\n{job_log(log)}"


def job_log(log: Path) -> str:
    return log.read_text()[-5000:] if log.exists() else "(no log)"


def submit(tmp_path: Path, name: str, sbatch_options: list[str], command: list[str]) -> tuple[str, Path]:
    """Write and sbatch a job script whose one step is `srun COMMAND`; returns (job id, log file)."""
    log = tmp_path / f"{name}.log"
    script = tmp_path / f"{name}.sbatch"
    script.write_text("\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --output={log}",
        "#SBATCH --open-mode=append",
        *(f"#SBATCH {option}" for option in sbatch_options),
        f"export PYTHONPATH={HELPERS}",  # the test callbacks (slurm_probe)
        "srun " + " ".join(command),
        "",
    ]))
    job_id = slurm_cmd("sbatch", "--parsable", str(script)).strip().split(";")[0]
    return job_id, log


# ------------------------------------------------------------------------------------------------
# runs


def experiment(path: Path, corpus: Path, cache: Path, **sections) -> Path:
    """The tiny experiment of tests/training/test_training.py, with 12 steps and validation every 8."""
    steps = {"max_steps": 12, "val_check_interval": 8, **sections.pop("trainer", {})}
    return tiny_experiment(path, corpus, cache, trainer=steps, **sections)


def fit_outside_slurm(config: Path, run_dir: Path, *extra: str) -> tuple[subprocess.Popen, Path]:
    """Start the same training command as a plain process that sees no Slurm job; returns (process, log)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PYTHONPATH"] = str(HELPERS)
    log = run_dir.parent / f"{run_dir.name}.log"
    with open(log, "w") as out:
        process = subprocess.Popen([str(BIN / "lit-resformer"), "fit", "--config", str(config),
                                    "--trainer.default_root_dir", str(run_dir), *extra],
                                   env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return process, log


def finish(started: tuple[subprocess.Popen, Path]) -> None:
    process, log = started
    assert process.wait(JOB_TIMEOUT_S) == 0, log.read_text()[-3000:]


def trained_steps(metrics_csv: Path) -> list[int]:
    with open(metrics_csv, newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]


# ------------------------------------------------------------------------------------------------
# 1. the ablation grid's slurm executor


def test_grid_runs_one_slurm_job_per_run_and_records_a_failing_one(slurm, tmp_path, tiny_corpus, data_cache):
    # `size` only fills vocab_size here (for the grid's model-config check; the run links it from the tokenizer).
    model = {"config": {"size": "tiny", "n_layer": 2, "n_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64},
             "lr": 3e-3, "warmup_steps": 3}
    experiment(tmp_path / "base.yaml", tiny_corpus, data_cache, trainer={"max_steps": 8, "val_check_interval": 4},
               model=model)
    # Valid for the grid (text as far as the grid's check reads), refused by `lit-resformer fit` when it reads the
    # whole file: a job that fails.
    (tmp_path / "blob").mkdir()
    (tmp_path / "blob" / "blob.txt").write_bytes(b"words and more words.\n\n" * (SNIFF_BYTES // 10) + b"caf\xe9\n")
    grid = tmp_path / "micro.yaml"
    grid.write_text(yaml.safe_dump({
        "name": "micro",
        "base": "base.yaml",
        "baseline": "vanilla",
        "seeds": [0],
        "cells": {
            # First, so that it frees its CPU early for the third job.
            "not_text": {"data.path": str(tmp_path / "blob")},
            "vanilla": {"model.config.residual.target": "none"},
            "resformer": {"model.config.residual.target": "v"},
        },
    }, sort_keys=False))
    runs = tmp_path / "runs"
    command = [str(BIN / "python"), "-m", "lit_resformer.cli", "grid", str(grid), "--runs-dir", str(runs),
               "--executor", "slurm", "--partition", "local", "--gpus-per-run", "0", "--cpus-per-task", "1",
               "--time", "10"]

    dry = subprocess.run([*command, "--dry-run"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    for line in ("#SBATCH --partition=local", "#SBATCH --time=10", "#SBATCH --cpus-per-task=1",
                 "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --signal=USR2@120",
                 "#SBATCH --job-name=micro.not_text.seed0", "3 of 3 runs would start"):
        assert line in dry.stdout, (line, dry.stdout)
    assert not (runs / "micro").exists() and not slurm_cmd("squeue", "-h").strip()  # nothing submitted

    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]  # one run failed, the others finished
    assert "1 run(s) did not finish: micro/not_text/seed0" in result.stdout

    grid_dir = runs / "micro"
    summaries = {cell: json.loads((grid_dir / cell / "seed0" / "summary.json").read_text())
                 for cell in ("vanilla", "resformer", "not_text")}
    job_ids = {cell: s["slurm_job_id"] for cell, s in summaries.items()}
    assert None not in job_ids.values() and len(set(job_ids.values())) == 3  # one Slurm job per run
    assert {p.name for p in (grid_dir / ".submitit").iterdir()} >= set(job_ids.values())
    for cell, job_id in job_ids.items():
        fields = job_fields(job_id)
        assert fields["JobName"] == f"micro.{cell}.seed0" and fields["Partition"] == "local"
        assert fields["JobState"] == "COMPLETED", fields  # the job itself ran; the training may have failed
    for cell in ("vanilla", "resformer"):
        assert summaries[cell]["status"] == "done", summaries[cell]
        assert summaries[cell]["steps"] == 7 and summaries[cell]["final_train_loss"] > 0
    failed = summaries["not_text"]
    assert failed["status"] == "failed" and failed["returncode"] == 2
    assert "blob.txt is not utf-8 text" in failed["error"]
    report = (grid_dir / "report.md").read_text()
    assert (grid_dir / "index.html").is_file()
    assert "not_text" in report and "blob.txt is not utf-8 text" in report


# ------------------------------------------------------------------------------------------------
# 2. Lightning DDP under srun


def test_ddp_under_srun_matches_a_single_process(slurm, tmp_path, tiny_corpus, data_cache):
    """2 Slurm tasks x micro-batch 2 (DDP, gloo) == 1 process outside Slurm with micro-batch 4."""
    probe = ["--allow-any-class", "--trainer.callbacks+=slurm_probe.RecordRank"]  # the test's own callback
    single = experiment(tmp_path / "single.yaml", tiny_corpus, data_cache)
    reference = fit_outside_slurm(single, tmp_path / "single", *probe)
    ddp = experiment(tmp_path / "ddp.yaml", tiny_corpus, data_cache, data={"micro_batch_size": 2})
    run = tmp_path / "ddp"
    job_id, log = submit(
        tmp_path, "ddp", ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1"],
        [str(BIN / "lit-resformer"), "fit", "--config", str(ddp), "--trainer.default_root_dir", str(run),
         "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu", *probe],
    )
    wait_until_ended(job_id, log)
    finish(reference)
    fields = job_fields(job_id)
    assert fields["JobState"] == "COMPLETED" and fields["NumTasks"] == "2", (fields, job_log(log))

    # Lightning took rank and world size from Slurm (one srun task per rank), not from its own launcher.
    text = log.read_text()
    assert "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2" in text
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in text
    ranks = [json.loads((run / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, seen in enumerate(ranks):
        assert seen["cluster_environment"] == "SLURMEnvironment"
        assert (seen["global_rank"], seen["world_size"], seen["slurm_procid"]) == (rank, 2, str(rank))
        assert seen["slurm_job_id"] == job_id
    # The ranks read disjoint halves of what the single process reads in its first micro-batch of 4.
    rows = [tuple(r) for seen in ranks for r in seen["first_batch"]]
    assert len(set(rows)) == 4
    single_rank = json.loads((tmp_path / "single" / "ranks" / "rank0.json").read_text())
    assert single_rank["cluster_environment"] is None and single_rank["slurm_job_id"] is None
    assert sorted(rows) == sorted(tuple(r) for r in single_rank["first_batch"])

    a, b = read_metrics(tmp_path / "single")["train/loss"], read_metrics(run)["train/loss"]
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(12))
    assert max(abs(x - y) for (_, x), (_, y) in zip(a, b, strict=True)) < 1e-3
    assert a[-1][1] < a[0][1] - 0.5  # it trained


# ------------------------------------------------------------------------------------------------
# 3. preemption: requeue and resume


def test_preempted_jobs_resume_from_their_last_checkpoint_with_identical_losses(slurm, tmp_path, tiny_corpus,
                                                                                data_cache):
    """Two jobs, each stopped before step 6 (after its step-6 checkpoint): one is requeued by Slurm, as a
    preemption with PreemptMode=REQUEUE does; the other gets SIGUSR1, as `#SBATCH --signal=USR1@90` sends
    before the time limit, and Lightning's SLURM auto-requeue requeues it. Both finish exactly like an
    undisturbed run outside Slurm."""
    config = experiment(tmp_path / "experiment.yaml", tiny_corpus, data_cache)
    reference = fit_outside_slurm(config, tmp_path / "undisturbed")
    jobs = {}
    for name in ("requeued", "signalled"):
        run = tmp_path / name
        # `--ckpt_path last` makes every start of the job script resume (the first one starts from scratch).
        # HoldForRequeue holds the first run before step 6 until Slurm's SIGTERM arrives.
        job_id, log = submit(
            tmp_path, name, ["--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=1", "--requeue"],
            [str(BIN / "lit-resformer"), "fit", "--config", str(config), "--trainer.default_root_dir", str(run),
             "--ckpt_path", "last", "--allow-any-class", "--trainer.callbacks+=slurm_probe.HoldForRequeue",
             "--trainer.callbacks.step=6"],
        )
        jobs[name] = (run, job_id, log)
    for run, job_id, log in jobs.values():
        wait_until_held(run, job_id, log)
        assert (run / "checkpoints" / "last.ckpt").is_file()

    slurm_cmd("scontrol", "requeue", jobs["requeued"][1])
    slurm_cmd("scancel", "--signal=USR1", jobs["signalled"][1])
    for _, job_id, log in jobs.values():
        wait_until_ended(job_id, log)
    finish(reference)

    undisturbed = read_metrics(tmp_path / "undisturbed")
    assert [s for s, _ in undisturbed["train/loss"]] == list(range(12))
    for run, job_id, log in jobs.values():
        fields = job_fields(job_id)
        assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", (fields, job_log(log))
        text = log.read_text()
        assert "DUE TO JOB REQUEUE" in text and "Received SIGTERM" in text  # Lightning saw the preemption
        # fit's own line on its restart names what it resumed from: the checkpoint fit writes on the SIGTERM
        # (on_exception.ckpt, after the last step trained) or, had the job been killed before writing it, last.ckpt
        resumed_from = re.search(rf"\(resuming from {re.escape(str(run / 'checkpoints'))}/(on_exception|last)\.ckpt\)",
                                 text)
        assert resumed_from, text
        first, second = metric_files(run)  # one CSV version per start of the job
        interrupted, resumed = trained_steps(first), trained_steps(second)
        assert interrupted[0] == 0 and 5 <= interrupted[-1] < 11
        # not from scratch: right after the last step trained, or from last.ckpt's step 6
        assert resumed[0] == (interrupted[-1] + 1 if resumed_from[1] == "on_exception" else 6), (resumed_from[1], interrupted)
        assert resumed[-1] == 11
        requeued = read_metrics(run)
        assert requeued["train/loss"] == undisturbed["train/loss"]  # step for step, bit for bit
        assert requeued["val/loss"] == undisturbed["val/loss"]
    signalled_log = jobs["signalled"][2].read_text()
    assert "Handling auto-requeue signal" in signalled_log
    assert f"Requeued SLURM job: {jobs['signalled'][1]}" in signalled_log
