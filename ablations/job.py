"""One run of a grid: train (or resume) through the training command, record its outcome, then run
the optional eval/analysis hooks. Executors call `execute` locally or inside a SLURM job."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import metrics as M
from .store import FINISHED, RunBusy, RunDir, diverged_step, error_lines, now

TRAIN_COMMAND_ENV = "LIT_RESFORMER_TRAIN_CMD"

# Post-training plug-ins provided by other packages: kind -> (module, function, result file). The
# function takes the run directory and writes the result file into it.
HOOKS = {
    "eval": ("eval.run", "evaluate_run_dir", "eval/results.json"),
    "analyze": ("lit_resformer.analysis", "analyze_run_dir", "analysis/analysis.json"),
}


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


def hook_function(kind: str):
    """The plug-in function for `--eval` / `--analyze`, with a clear error while it does not exist."""
    module_name, function_name, _ = HOOKS[kind]
    try:
        module = importlib.import_module(module_name)
        return getattr(module, function_name)
    except (ImportError, AttributeError) as e:
        raise RuntimeError(
            f"--{kind} needs {module_name}.{function_name}(run_dir), which is not available yet ({e})"
        ) from e


@dataclass
class RunJob:
    grid: str
    cell: str
    seed: int
    run_dir: Path
    command: list[str]  # the training command before --config ...
    train: bool = True  # False: training is finished, only hooks are pending
    hooks: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # set for the training process (e.g. devices)

    @property
    def name(self) -> str:
        return f"{self.grid}/{self.cell}/seed{self.seed}"


def execute(job: RunJob, env: dict[str, str] | None = None, lock_wait_s: float = 60.0) -> dict:
    """Run the job in its directory and return its summary (also written to summary.json).

    The run directory is locked for the whole job; the lock is inherited by the training process,
    so a restarted grid waits (up to `lock_wait_s`) for a still-exiting process before giving up
    with RunBusy.
    """
    run = RunDir(job.run_dir)
    env = {**os.environ, **job.env, **(env or {})}
    with _lock_with_wait(run, lock_wait_s) as lock_fd:
        summary = run.read_summary() or {}
        if job.train and summary.get("status") not in FINISHED:
            summary = _train(job, run, summary, env, lock_fd)
        if summary.get("status") == "done":
            for kind in job.hooks:
                summary = _run_hook(kind, job, run, summary, env)
        return summary


@contextlib.contextmanager
def _lock_with_wait(run: RunDir, wait_s: float):
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


def _train(job: RunJob, run: RunDir, previous: dict, env: dict, lock_fd: int) -> dict:
    attempt = previous.get("attempts", 0) + 1
    resume = run.resumable()
    command = [*job.command, "--config", str(run.experiment), "--trainer.default_root_dir", str(run.path)]
    if resume or run.has_training_output():
        command += ["--ckpt_path", "last"]
    summary = {
        "grid": job.grid,
        "cell": job.cell,
        "seed": job.seed,
        "status": "running",
        "attempts": attempt,
        "resumed": resume,
        "started_at": now(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "slurm_job_id": env.get("SLURM_JOB_ID"),
        "command": command,
        "wall_time_sec": previous.get("wall_time_sec", 0.0),
    }
    run.write_summary(summary)

    under_submitit = "SUBMITIT_EXECUTOR" in env
    if under_submitit:
        # Inside a SLURM job the trainer runs as a plain process that launches its own devices:
        # with SLURM_* visible, Lightning would expect one SLURM task per device and manage requeues,
        # both of which this job (one task, requeued by submitit) does differently.
        env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    # Lightning draws a Rich progress bar, which renders live only on a terminal: declare the log one,
    # so that `tail -f logs/stdout.log` (or `less -R`) shows the run's own bar while it trains.
    env = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", **env}
    run.logs.mkdir(parents=True, exist_ok=True)
    stderr_offset = run.stderr.stat().st_size if run.stderr.exists() else 0
    stdout_offset = run.stdout.stat().st_size if run.stdout.exists() else 0
    started = time.monotonic()
    banner = f"===== attempt {attempt} at {summary['started_at']}{' (resuming)' if resume else ''}: {shlex.join(command)}\n"
    with open(run.stdout, "a") as out, open(run.stderr, "a") as err:
        for path, log in ((run.stdout, out), (run.stderr, err)):
            # a killed attempt may have stopped mid-line (a progress bar): start the banner on its own line
            log.write(("\n" if not _ends_with_newline(path) else "") + banner)
            log.flush()
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=err,
            env=env,
            pass_fds=(lock_fd,),
            preexec_fn=_child_setup(under_submitit),
        )
        try:
            returncode = process.wait()
        except BaseException:
            # The runner itself is stopping (Ctrl-C, SLURM requeue): stop the training process,
            # record the attempt as interrupted and let the next grid run resume it.
            _stop(process)
            summary.update(status="interrupted", wall_time_sec=summary["wall_time_sec"] + time.monotonic() - started)
            run.write_summary(summary)
            raise
    summary["wall_time_sec"] += time.monotonic() - started
    summary["finished_at"] = now()
    summary["returncode"] = returncode
    log_text = _read_from(run.stderr, stderr_offset) + _read_from(run.stdout, stdout_offset)
    try:
        summary.update(run.results())
    except Exception as e:  # a half-written metrics file must not stop the grid; say what happened
        summary["results_error"] = f"{type(e).__name__}: {e}"
    nan_step = M.first_non_finite_step(run.path)
    step = diverged_step(log_text)
    if step is None and nan_step is not None:
        step = nan_step
    summary["diverged_step"] = step
    if step is not None:
        summary["status"] = "diverged"
        summary["error"] = f"diverged: non-finite loss at step {step}"
    elif returncode == 0:
        summary["status"] = "done"
        summary["error"] = None
    else:
        summary["status"] = "failed"
        error, tail = error_lines(_read_from(run.stderr, stderr_offset))
        if returncode < 0:
            error = f"killed by {signal.Signals(-returncode).name}" + (f" (last output: {error})" if error else "")
        summary["error"] = error or f"exit code {returncode}"
        summary["error_tail"] = tail
    run.write_summary(summary)
    return summary


def _run_hook(kind: str, job: RunJob, run: RunDir, summary: dict, env: dict) -> dict:
    """Run a plug-in as its own process (on the run's devices); skipped when its result exists."""
    _, _, result_file = HOOKS[kind]
    if (run.path / result_file).is_file():
        summary[kind] = {"status": "done", "result": result_file}
        run.write_summary(summary)
        return summary
    log = run.logs / f"{kind}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        returncode = subprocess.call(
            [sys.executable, "-m", "ablations", "hook", kind, str(run.path)], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    if returncode == 0 and (run.path / result_file).is_file():
        summary[kind] = {"status": "done", "result": result_file}
    else:
        error, _ = error_lines(log.read_text())
        summary[kind] = {"status": "failed", "error": error or f"exit code {returncode}", "log": str(log)}
    run.write_summary(summary)
    return summary


def run_hook_in_process(kind: str, run_dir: Path) -> None:
    """Entry point of `python -m ablations hook KIND RUN_DIR`."""
    hook_function(kind)(Path(run_dir))


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
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _child_setup(under_submitit: bool):
    """Runs in the training process before exec. On Linux the process gets SIGTERM when the thread
    that started it dies, so killing the runner does not leave trainers writing into run directories
    (Lightning stops at the end of the current step). Under submitit the job gets SIGUSR2 before
    preemption; it is meant for the job (which checkpoints and requeues), not for the trainer."""

    def setup() -> None:
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if under_submitit:
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)

    return setup
