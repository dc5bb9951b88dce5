"""Executors run a list of RunJobs and report each outcome as it arrives.

`LocalExecutor` is a pool over this machine's devices: one run per GPU (or per group of
`gpus_per_run` GPUs, for runs that use a multi-GPU Lightning strategy themselves), or `cpu_slots`
concurrent runs on a CPU-only machine, each with `threads_per_run` threads (default: the cores shared
out). `SlurmExecutor` submits one submitit job per run; a job that is preempted or reaches its time
limit checkpoints (resubmits itself) and the requeued job resumes training from `checkpoints/last.ckpt`.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from tqdm import tqdm

from lit_resformer.execution.jobs import RunJob, execute
from lit_resformer.execution.stack_jobs import StackJob, execute_job, stacked_runs
from lit_resformer.provenance import RUNS_SHARING_ENV
from lit_resformer.runs.run_dir import RunDir

# on_done(job, summary, error): summary is None when the job could not run at all (error says why).
OnDone = Callable[[RunJob, dict | None, str | None], None]


def visible_gpus() -> list[str]:
    """GPU ids this process may hand out: CUDA_VISIBLE_DEVICES' entries if set, else 0..n-1."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        return [d for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


class LocalExecutor:
    name = "local"

    def __init__(self, devices: Sequence[str] | None = None, gpus_per_run: int = 1, cpu_slots: int = 1,
                 threads_per_run: int | None = None, runs_per_gpu: int = 1, time_limit_s: float | None = None):
        devices = list(visible_gpus() if devices is None else devices)
        if min(gpus_per_run, cpu_slots, runs_per_gpu) < 1 or (threads_per_run is not None and threads_per_run < 1):
            raise ValueError(f"gpus_per_run ({gpus_per_run}), cpu_slots ({cpu_slots}), runs_per_gpu ({runs_per_gpu}) "
                             f"and threads_per_run ({threads_per_run}) must be >= 1")
        if runs_per_gpu > 1 and gpus_per_run > 1:
            raise ValueError("runs_per_gpu > 1 shares one GPU between small runs; it needs gpus_per_run=1")
        # Wall-clock seconds from the start of `run`: then no run starts any more and running ones are stopped
        # (recorded as interrupted, resumed by the next call): time-bounded slices of a grid.
        self.time_limit_s = time_limit_s
        # Intra-op threads of each run (OMP_NUM_THREADS is what torch starts with): as asked, else on a CPU-only
        # machine the cores split between the concurrent runs unless the environment already says.
        threads = {} if threads_per_run is None else {"OMP_NUM_THREADS": str(threads_per_run)}
        if devices:
            if len(devices) < gpus_per_run:
                raise ValueError(f"gpus_per_run={gpus_per_run} but only devices {devices} are available")
            groups = [devices[i : i + gpus_per_run] for i in range(0, len(devices) - gpus_per_run + 1, gpus_per_run)]
            if runs_per_gpu > 1 and not threads:  # small runs side by side: the host's cores split between them
                threads = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // (len(groups) * runs_per_gpu)))}
            # each run records how many share its GPU: its MFU is a share of the card's (reports/budget.py)
            self.slots = [{"CUDA_VISIBLE_DEVICES": ",".join(group), RUNS_SHARING_ENV: str(runs_per_gpu), **threads}
                          for group in groups] * runs_per_gpu
        else:
            if not threads and cpu_slots > 1 and "OMP_NUM_THREADS" not in os.environ:
                threads = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // cpu_slots))}
            self.slots = [{"CUDA_VISIBLE_DEVICES": "", **threads} for _ in range(cpu_slots)]  # CPU runs: GPUs hidden

    def describe(self) -> str:
        limit = f", stopping after {self.time_limit_s:g} s" if self.time_limit_s is not None else ""
        if self.slots[0]["CUDA_VISIBLE_DEVICES"]:
            return f"local pool over GPUs: {[s['CUDA_VISIBLE_DEVICES'] for s in self.slots]} (one run per slot){limit}"
        threads = self.slots[0].get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "default"))
        return f"local pool on CPU: {len(self.slots)} concurrent run(s), {threads} thread(s) each{limit}"

    def run(self, jobs: Sequence[RunJob | StackJob], on_done: OnDone) -> None:
        """A stack takes one slot. Ctrl-C (KeyboardInterrupt) stops the running trainers, which record their runs as
        interrupted, starts no other job, and is raised again once they have stopped. The time limit does the same
        without raising: the stopped runs come back interrupted, the ones not started fail with TimeLimitReached."""
        free: queue.Queue[dict] = queue.Queue()
        for slot in self.slots:
            free.put(slot)
        stop = threading.Event()
        timer = threading.Timer(self.time_limit_s, stop.set) if self.time_limit_s is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()

        def work(job: RunJob | StackJob) -> list[tuple[RunJob, dict]]:
            slot = free.get()  # at most len(slots) workers, so a slot is always free here
            try:
                if stop.is_set():
                    raise TimeLimitReached(f"not started: the time limit of {self.time_limit_s:g} s was reached")
                return execute_job(job, env=slot, stop=stop)
            finally:
                free.put(slot)

        with ThreadPoolExecutor(max_workers=len(self.slots), thread_name_prefix="run") as pool:
            futures = {pool.submit(work, job): job for job in jobs}
            try:
                for future in _as_done(futures):
                    error = future.exception()
                    outcomes = [(run, None) for run in stacked_runs(futures[future])] if error else future.result()
                    for run, summary in outcomes:
                        on_done(run, summary, f"{type(error).__name__}: {error}" if error else None)
            except KeyboardInterrupt:
                stop.set()
                for future in futures:
                    future.cancel()  # not started yet: never starts
                raise  # leaving the pool waits for the running jobs to stop their trainers
            finally:
                if timer is not None:
                    timer.cancel()


class TimeLimitReached(RuntimeError):
    """A run that was not started because the executor's time limit had passed (it stays pending)."""


def _as_done(futures):
    pending = set(futures)
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        yield from done


class SlurmExecutor:
    """One submitit job per run. `cluster="local"` runs the same jobs through submitit's local
    executor (tests, or a workstation without SLURM)."""

    name = "slurm"

    def __init__(
        self,
        folder: str | Path | None = None,
        partition: str | None = None,
        gpus_per_run: int = 1,
        cpus_per_task: int | None = None,
        mem_gb: float | None = None,
        time_min: int = 24 * 60,
        account: str | None = None,
        qos: str | None = None,
        constraint: str | None = None,
        max_requeues: int = 5,
        cluster: str = "slurm",
        poll_s: float = 10.0,
    ):
        self.folder = None if folder is None else Path(folder)  # None: each job's grid folder's .submitit
        self.cluster = cluster
        self.poll_s = poll_s
        self.max_requeues = max_requeues
        self.parameters = {
            "timeout_min": int(time_min),
            "nodes": 1,
            "tasks_per_node": 1,
            "gpus_per_node": int(gpus_per_run),
        }
        if cpus_per_task is not None:
            self.parameters["cpus_per_task"] = int(cpus_per_task)
        if mem_gb is not None:
            self.parameters["mem_gb"] = mem_gb
        slurm_only = {"partition": partition, "account": account, "qos": qos, "constraint": constraint}
        self.slurm_parameters = {f"slurm_{k}": v for k, v in slurm_only.items() if v is not None}
        # SIGUSR2 two minutes before the time limit: time to checkpoint (resubmit) the job.
        self.slurm_parameters["slurm_signal_delay_s"] = 120

    def describe(self) -> str:
        shown = {**self.parameters, **self.slurm_parameters}
        return f"submitit ({self.cluster}) one job per run: " + ", ".join(f"{k}={v}" for k, v in shown.items())

    def job_folder(self, job: RunJob) -> Path:
        """Where submitit keeps the job's files (%j: its Slurm job id): the executor's folder, else .submitit in the
        folder of the job's grid (RUNS/<grid>/<cell>/seed<k>)."""
        return (self.folder or Path(job.run_dir).parent.parent / ".submitit") / "%j"

    def _executor(self, job: RunJob):
        import submitit

        executor = submitit.AutoExecutor(
            folder=self.job_folder(job), cluster=self.cluster, slurm_max_num_timeout=self.max_requeues
        )
        executor.update_parameters(name=job.name.replace("/", "."), **self.parameters, **self.slurm_parameters)
        return executor

    def sbatch_script(self, job: RunJob) -> str:
        """The sbatch file submitit would write for this job (for --dry-run; works without SLURM)."""
        import shlex
        import sys

        from submitit.slurm import slurm

        renames = slurm.SlurmExecutor._equivalence_dict()
        params = {renames.get(k, k): v for k, v in self.parameters.items()}
        params.update({k.removeprefix("slurm_"): v for k, v in self.slurm_parameters.items()})
        if "mem" in params:
            params["mem"] = slurm._convert_mem(params["mem"])
        folder = self.job_folder(job)
        command = f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {shlex.quote(str(folder))}"
        return slurm._make_sbatch_string(command=command, folder=folder, job_name=job.name.replace("/", "."), **params)

    @staticmethod
    def _left_queue(handle) -> bool:
        """Without Slurm accounting (no sacct) submitit reports a job that vanished from the queue without a
        result (cancelled, node failure, out of requeues) as UNKNOWN forever; squeue tells."""
        if handle.state != "UNKNOWN":
            return False
        try:
            listed = subprocess.run(["squeue", "-h", "-j", str(handle.job_id)], capture_output=True, text=True)
        except FileNotFoundError:  # not on a Slurm host (submitit's local stand-in)
            return False
        return listed.returncode == 0 and not listed.stdout.strip() or "Invalid job id" in listed.stderr

    def run(self, jobs: Sequence[RunJob], on_done: OnDone) -> None:
        submitted = []
        for job in jobs:
            executor = self._executor(job)
            submitted.append((job, executor.submit(CheckpointableRun(job))))
        pending = list(submitted)
        while pending:
            still = []
            for job, handle in pending:
                if not handle.done():
                    if not self._left_queue(handle):
                        still.append((job, handle))
                        continue
                    if not handle.done(force_check=True):
                        on_done(job, None, f"Slurm job {handle.job_id} left the queue without a result; "
                                           f"see {handle.paths.stderr}")
                        continue
                try:
                    on_done(job, handle.result(), None)
                except Exception as e:  # the job itself failed (node failure, cancelled, ...)
                    on_done(job, None, f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}")
            pending = still
            if pending:
                time.sleep(self.poll_s)


class DeviceError(ValueError):
    """Runs that want GPUs the executor cannot give them; the message names the run and the remedy."""


def check_devices(pool, configs: Mapping[str, dict], gpus_per_run: int) -> None:
    """Runs (name -> config) that want GPUs must get them, and as many as their trainer uses (a run with
    trainer.devices: 8 under DDP needs --gpus-per-run 8)."""
    local_gpus = isinstance(pool, LocalExecutor) and bool(pool.slots[0]["CUDA_VISIBLE_DEVICES"])
    for name, config in configs.items():
        trainer = config.get("trainer") or {}
        if str(trainer.get("accelerator", "auto")) not in ("gpu", "cuda"):
            continue
        if isinstance(pool, LocalExecutor) and not local_gpus:
            raise DeviceError(f"{name} trains on GPUs (trainer.accelerator={trainer['accelerator']}) but no GPU is "
                              f"visible here; run it on a GPU machine or with --executor slurm")
        devices = trainer.get("devices")
        if isinstance(devices, int) and not isinstance(devices, bool) and devices > gpus_per_run:
            raise DeviceError(f"{name} uses trainer.devices={devices} GPUs but each run gets --gpus-per-run "
                              f"{gpus_per_run}; pass --gpus-per-run {devices}")


# record(job, summary, error) -> (what to count the outcome as, a line to show or None)
Record = Callable[[RunJob, dict | None, str | None], tuple[str, str | None]]


class StepProgress:
    """How far the jobs' runs have trained, in optimizer steps: each run's trainer.max_steps (its experiment.yaml)
    and the steps its metrics have logged (RunDir.steps_logged). A run resumed from a checkpoint, or a ladder rung
    started from its trunk's, starts with the steps it has, so a progress bar's rate and time left count only the
    steps trained here (counted in runs, a grid that resumes near-finished runs would promise the rest at their pace).
    None from `of` when a run states no max_steps (a bar then counts runs)."""

    def __init__(self, totals: Mapping[Path, int]):
        self.totals = dict(totals)
        self.finished: set[Path] = set()
        self.seen: dict[Path, int] = {}  # the most steps each run has shown: a resumed run logs its last steps again

    @classmethod
    def of(cls, jobs: Sequence[RunJob | StackJob]) -> StepProgress | None:
        totals = {}
        for run in (run for job in jobs for run in stacked_runs(job)):
            steps = ((RunDir(run.run_dir).read_experiment() or {}).get("trainer") or {}).get("max_steps")
            if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
                return None
            totals[run.run_dir] = steps if run.train else 0  # a run with only post-training steps left trains none
        return cls(totals) if sum(totals.values()) else None

    @property
    def total(self) -> int:
        return sum(self.totals.values())

    def done(self) -> int:
        """Steps trained by now: a finished run's (done or failed: none of its steps are still to come) all of them."""
        for path, total in self.totals.items():
            logged = total if path in self.finished else min(total, RunDir(path).steps_logged())
            self.seen[path] = max(self.seen.get(path, 0), logged)
        return sum(self.seen.values())

    def finish(self, job: RunJob | StackJob) -> None:
        self.finished.update(run.run_dir for run in stacked_runs(job))


def run_with_progress(pool, jobs: Sequence[RunJob | StackJob], record: Record, desc: str, progress: bool,
                      poll_s: float = 15.0) -> None:
    """Run the jobs through the executor, each outcome handed to `record` as it arrives, under a progress bar on
    stderr: the steps the runs have trained (StepProgress, polled every `poll_s` seconds; else one tick a run), the
    outcomes counted beside it, `record`'s lines above it."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    shown = progress and bool(jobs)
    steps = StepProgress.of(jobs) if shown else None
    runs = sum(len(stacked_runs(job)) for job in jobs)
    if steps is not None:
        bar = tqdm(total=steps.total, initial=steps.done(), desc=desc, unit="step", file=sys.stderr)
    else:
        bar = tqdm(total=runs, desc=desc, unit="run", disable=not shown, file=sys.stderr)
    finished = threading.Event()

    def show_steps() -> None:
        bar.update(steps.done() - bar.n)
        bar.set_postfix({"runs": f"{sum(counts.values())}/{runs}", **counts})

    def poll() -> None:
        while not finished.wait(poll_s):
            with lock:
                show_steps()

    def on_done(job: RunJob, summary: dict | None, error: str | None) -> None:
        with lock:
            counted, line = record(job, summary, error)
            counts[counted] += 1
            if line:
                bar.write(line)
            if steps is None:
                bar.update(1)
                bar.set_postfix(dict(counts))
            else:
                steps.finish(job)
                show_steps()

    poller = threading.Thread(target=poll, daemon=True) if steps is not None else None
    if poller is not None:
        poller.start()
    try:
        pool.run(jobs, on_done)
    finally:
        finished.set()
        if poller is not None:
            poller.join()
        bar.close()


try:
    from submitit.helpers import Checkpointable as _Checkpointable
except ImportError:  # submitit is the optional `slurm` extra; the local executor does not need it
    _Checkpointable = object


class CheckpointableRun(_Checkpointable):
    """The submitit job of one run. On preemption or timeout submitit calls `checkpoint()`, whose
    default (submitit's Checkpointable) resubmits this same object; the requeued job finds
    `checkpoints/last.ckpt` and `execute` resumes with `--ckpt_path last`."""

    def __init__(self, job: RunJob):
        self.job = job

    def __call__(self) -> dict:
        return execute(self.job)
