"""One run of a grid or a re-derivation: train (or resume) through the training command, record its outcome, then run
the optional eval/analysis steps. Executors call `execute` locally or inside a SLURM job.

Both happen in processes of their own, for the same reasons: a process sees the GPUs its slot gives it
(CUDA_VISIBLE_DEVICES is read once per process) and the slot's intra-op threads; the memory a model held is
returned when it ends; and a run that crashes, is killed for memory or diverges fails that run, not the runner
and the other runs beside it. Training is `lit-resformer fit` (or $LIT_RESFORMER_TRAIN_CMD, e.g. a stand-in in
tests); a post-training step is a call of its function in a spawned process.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lit_resformer.provenance import device_use, git_patch, run_provenance
from lit_resformer.runs.run_dir import FINISHED, RunBusy, RunDir
from lit_resformer.runs.summary import error_lines, now, results
from lit_resformer.writing import atomic_write

TRAIN_COMMAND_ENV = "LIT_RESFORMER_TRAIN_CMD"


def _evaluate():
    from lit_resformer.eval.run import evaluate_run_dir

    return evaluate_run_dir


def _analyze():
    from lit_resformer.analysis import analyze_run_dir

    return analyze_run_dir


# The steps that can follow training: kind -> the function(run_dir) that writes the run's results, imported only
# when a grid asks for it (lm-eval takes seconds to import).
POST_TRAINING = {"eval": _evaluate, "analyze": _analyze}


def post_training_step(kind: str):
    """The function of `--eval` / `--analyze`; a clear error, before any training, when it cannot run here."""
    try:
        return POST_TRAINING[kind]()
    except ImportError as e:
        raise RuntimeError(f"--{kind} cannot run here: {e}") from e


def post_training_result(kind: str, run: RunDir) -> Path:
    """The file whose presence says the step is done."""
    return run.eval_results if kind == "eval" else run.analysis_results


def default_train_command() -> list[str]:
    """`$LIT_RESFORMER_TRAIN_CMD` if set, else `lit-resformer fit` from this interpreter's environment."""
    if os.environ.get(TRAIN_COMMAND_ENV):
        return shlex.split(os.environ[TRAIN_COMMAND_ENV])
    script = Path(sys.executable).parent / "lit-resformer"
    if not script.is_file():
        found = shutil.which("lit-resformer")
        if found is None:
            raise FileNotFoundError(
                f"no `lit-resformer` console script next to {sys.executable} or on PATH; "
                f"install the package or set {TRAIN_COMMAND_ENV}"
            )
        script = Path(found)
    return [str(script), "fit"]


@dataclass
class RunJob:
    grid: str
    cell: str
    seed: int
    run_dir: Path
    command: list[str]  # the training command before --config ...
    train: bool = True  # False: training is finished, only post-training steps are pending
    post_training: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # set for the training process (e.g. devices)

    @property
    def name(self) -> str:
        return f"{self.grid}/{self.cell}/seed{self.seed}"


BUSY = "busy"  # the status `execute` returns (never writes) for a run another process works in


def execute(job: RunJob, env: dict[str, str] | None = None, lock_wait_s: float = 60.0,
            stop: threading.Event | None = None) -> dict:
    """Run the job in its directory and return its summary (also written to summary.json).

    The run directory is locked for the whole job; the lock is inherited by the training process,
    so a restarted grid waits (up to `lock_wait_s`) for a still-exiting process. A run still locked
    then belongs to another runner: it is left alone and {"status": "busy", "error": who holds it} returned.
    Setting `stop` (the runner was interrupted, or its time is up) stops the training process and records
    the run as interrupted, for the next grid run to resume.
    """
    run = RunDir(job.run_dir)
    env = {**os.environ, **job.env, **(env or {})}
    try:
        with lock_with_wait(run, lock_wait_s) as lock_fd:
            return _execute_locked(job, run, env, lock_fd, stop)
    except RunBusy as busy:
        return {"status": BUSY, "error": str(busy)}


def _execute_locked(job: RunJob, run: RunDir, env: dict, lock_fd: int, stop: threading.Event | None) -> dict:
    summary = run.read_summary() or {}
    if job.train and summary.get("status") not in FINISHED:
        command = [*job.command, "--config", str(run.experiment_file), "--trainer.default_root_dir", str(run.path)]
        command += ["--ckpt_path", "last"] if run.has_checkpoint() or run.has_training_output() else []
        summary = train_in_one_process([(job, run, summary)], command, env, (lock_fd,), stop)[0]
    if summary.get("status") == "done":
        for kind in job.post_training:
            summary = post_train(kind, run, summary, env)
    return summary


@contextlib.contextmanager
def lock_with_wait(run: RunDir, wait_s: float):
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with run.lock() as fd:
                yield fd
            return
        except RunBusy:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def _resume_note(run: RunDir) -> tuple[str | None, str | None]:
    """(the checkpoint the attempt resumes from, why last.ckpt was passed over): what training will pick."""
    try:
        point = run.resume_point()
    except ValueError as error:  # no intact checkpoint: the training command says so and fails
        return None, str(error)
    if point is None:
        return None, None
    return str(point.path), point.fallback_reason and f"resuming from {point.path.name}: {point.fallback_reason}"


def train_in_one_process(members: list[tuple[RunJob, RunDir, dict]], command: list[str], env: dict,
                         lock_fds: tuple[int, ...], stop: threading.Event | None, note: dict | None = None) -> list[dict]:
    """One attempt at the runs (job, run directory, previous summary) in one process of `command` (`fit`; for several
    runs, their stack: lit_resformer.stacking): each run's summary written as running (with `note`), kept up, then
    its outcome; the output in the first run's logs, the attempt's banner in every run's. Returns the summaries."""
    summaries = []
    for job, run, previous in members:
        resume = run.has_checkpoint()
        resumed_from, resume_note = _resume_note(run) if resume else (None, None)
        summaries.append({
            "grid": job.grid, "cell": job.cell, "seed": job.seed, "status": "running", "attempts": previous.get("attempts", 0) + 1,
            "resumed": resume, "resumed_from": resumed_from, "resume_note": resume_note,
            "started_at": now(), "host": socket.gethostname(), "pid": os.getpid(),
            "slurm_job_id": env.get("SLURM_JOB_ID"), "command": command,
            "wall_time_sec": previous.get("wall_time_sec", 0.0),
            "provenance": run_provenance(run.read_experiment() or {}, env),
            "device_use": device_use(env),  # the peak and the sharing a GPU run's MFU is stated with (reports/budget.py)
            **(note or {}),
        })
        if summaries[-1]["provenance"].get("git_dirty"):  # the code that trained it is the commit plus this patch
            atomic_write(run.diff_file, git_patch())
        run.write_summary(summaries[-1])
    runs = [run for _, run, _ in members]

    under_submitit = "SUBMITIT_EXECUTOR" in env
    if under_submitit:
        # Inside a SLURM job the trainer runs as a plain process that launches its own devices:
        # with SLURM_* visible, Lightning would expect one SLURM task per device and manage requeues,
        # both of which this job (one task, requeued by submitit) does differently.
        env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    # The log is no terminal: training writes plain progress lines into it (`tail -f logs/stdout.log`), not a bar
    # redrawn with escape codes (lit_resformer.training.lightning_cli.PlainProgress).
    output = runs[0]
    for run, summary in zip(runs, summaries, strict=True):
        run.logs_dir.mkdir(parents=True, exist_ok=True)
        banner = (f"===== attempt {summary['attempts']} at {summary['started_at']}{' (resuming)' if summary['resumed'] else ''}"
                  f": {shlex.join(command)}\n" + (f"===== {summary['resume_note']}\n" if summary["resume_note"] else ""))
        banner += f"===== its output: {output.logs_dir}\n" if run is not output else ""
        for path in (run.stdout_log, run.stderr_log):
            # a killed attempt may have stopped mid-line (a progress bar): start the banner on its own line
            with open(path, "a") as log:
                log.write(("\n" if not _ends_with_newline(path) else "") + banner)
    stderr_offset = output.stderr_log.stat().st_size
    started = time.monotonic()
    with open(output.stdout_log, "a") as out, open(output.stderr_log, "a") as err:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
            pass_fds=lock_fds,
            preexec_fn=_child_setup(under_submitit),
        )
        def heartbeat() -> None:
            for run, summary in zip(runs, summaries, strict=True):
                run.write_summary({**summary, "wall_time_sec": summary["wall_time_sec"] + time.monotonic() - started})

        try:
            returncode = _wait(process, stop, heartbeat)
        except BaseException:
            # The runner itself is stopping (Ctrl-C, SLURM requeue): stop the training process,
            # record the attempt as interrupted and let the next grid run resume it.
            _stop(process)
            for run, summary in zip(runs, summaries, strict=True):
                summary.update(status="interrupted", wall_time_sec=summary["wall_time_sec"] + time.monotonic() - started)
                run.write_summary(summary)
            raise
    seconds, stderr = time.monotonic() - started, _read_from(output.stderr_log, stderr_offset)
    for run, summary in zip(runs, summaries, strict=True):
        summary["wall_time_sec"] += seconds
        summary["finished_at"] = now()
        summary["returncode"] = returncode
        summary.update(_outcome(run, returncode, stderr, interrupted=stop is not None and stop.is_set()))
        run.write_summary(summary)
    return summaries


# How often a running attempt's wall time so far is written into its summary: an attempt killed with the runner (a
# signal it cannot catch, the machine going away) then loses at most this much of the run's recorded compute.
HEARTBEAT_S = 60.0


def _wait(process: subprocess.Popen, stop: threading.Event | None, heartbeat, poll_s: float = 0.5) -> int:
    """The training process's exit code; once `stop` is set, after stopping the process. `heartbeat()` is called
    every HEARTBEAT_S while it runs."""
    beat = time.monotonic()
    while True:
        try:
            return process.wait(poll_s)
        except subprocess.TimeoutExpired:
            if stop is not None and stop.is_set():
                _stop(process)
                return process.returncode
            if time.monotonic() - beat >= HEARTBEAT_S:
                heartbeat()
                beat = time.monotonic()


def _outcome(run: RunDir, returncode: int, stderr: str, interrupted: bool = False) -> dict:
    """The attempt's results and status: diverged (the run's divergence record), done, interrupted (stopped by the
    runner before it finished), or failed with its error."""
    summary: dict = {}
    try:
        summary.update(results(run))
    except Exception as e:  # a half-written metrics file must not stop the grid; say what happened
        summary["results_error"] = f"{type(e).__name__}: {e}"
    step = run.diverged_step()
    summary["diverged_step"] = step
    if step is not None:
        summary["status"] = "diverged"
        summary["error"] = f"non-finite loss at step {step}"  # the status already says "diverged"
    elif returncode == 0:
        summary["status"] = "done"
        summary["error"] = None
    elif interrupted:
        summary["status"] = "interrupted"
        summary["error"] = None
    else:
        summary["status"] = "failed"
        error, tail = error_lines(stderr)
        if returncode < 0:
            error = f"killed by {signal.Signals(-returncode).name}" + (f" (last output: {error})" if error else "")
        summary["error"] = error or f"exit code {returncode}"
        summary["error_tail"] = tail
    return summary


def post_train(kind: str, run: RunDir, summary: dict, env: dict) -> dict:
    """Run a post-training step in its own process (on the run's devices); skipped when its result exists."""
    result = post_training_result(kind, run)
    done = {"status": "done", "result": str(result.relative_to(run.path))}
    if result.is_file():
        summary[kind] = done
        run.write_summary(summary)
        return summary
    log = run.logs_dir / f"{kind}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    # spawn, not fork: the runner has threads (one per slot) and may hold CUDA, neither of which survives a fork
    process = multiprocessing.get_context("spawn").Process(
        target=_post_training_process, args=(kind, str(run.path), str(log), env), name=f"{kind} {run.path}")
    process.start()
    process.join()
    if process.exitcode == 0 and result.is_file():
        summary[kind] = done
    else:
        error, _ = error_lines(log.read_text())
        summary[kind] = {"status": "failed", "error": error or f"exit code {process.exitcode}", "log": str(log)}
    run.write_summary(summary)
    return summary


def _post_training_process(kind: str, run_path: str, log_path: str, env: dict[str, str]) -> None:
    """The post-training process: the environment of the run's slot, all output (tracebacks included) into the
    step's log, then the step's function on the run."""
    os.environ.clear()
    os.environ.update(env)
    if env.get("OMP_NUM_THREADS"):  # torch is imported by now (with this package), so its thread count is set here
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    with open(log_path, "a") as log:
        os.dup2(log.fileno(), sys.stdout.fileno())
        os.dup2(log.fileno(), sys.stderr.fileno())
    post_training_step(kind)(Path(run_path))


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _read_from(path: Path, offset: int) -> str:
    if not path.exists():
        return ""
    with open(path, errors="replace") as f:
        f.seek(offset)
        return f.read()


def _stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """Stop the training process as Ctrl-C would (Lightning shuts down cleanly, saving what it trained since its last
    checkpoint where that resumes exactly: InterruptCheckpoint); kill it if that takes longer than `grace_s`. The
    signal goes to its process group, so the processes a multi-device strategy started stop with it."""
    if process.poll() is not None:
        return
    _signal_group(process, signal.SIGINT)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _child_setup(under_submitit: bool):
    """Runs in the training process before exec. On Linux the process gets SIGTERM when the thread
    that started it dies, so killing the runner does not leave trainers writing into run directories
    (Lightning stops at the end of the current step). Under submitit the job gets SIGUSR2 before
    preemption; it is meant for the job (which checkpoints and requeues), not for the trainer.
    The process leads its own process group: Ctrl-C in a terminal reaches the runner only, which then stops its
    trainers itself and so knows their runs were interrupted rather than failed."""

    def setup() -> None:
        os.setpgid(0, 0)
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if under_submitit:
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)

    return setup
