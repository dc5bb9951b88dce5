"""run_grid: expand and validate a grid, then train its runs through an executor, idempotently.

- runs whose summary says done (or diverged: a deterministic outcome) are skipped;
- runs with a checkpoint resume from it (`--ckpt_path last`); failed and interrupted runs are retried;
- a failing or diverging run is recorded in its summary.json and the grid goes on;
- at the end the report is written by `GridOptions.report` (the command line passes
  lit_resformer.reports.write_report: a grid run imports nothing that judges or reports).
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from lit_resformer.config.trust import ALLOW_ANY_CLASS_FLAG
from lit_resformer.execution.executors import (
    DeviceError,
    LocalExecutor,
    SlurmExecutor,
    TimeLimitReached,
    check_devices,
    run_with_progress,
)
from lit_resformer.execution.jobs import (
    BUSY,
    POST_TRAINING,
    RunJob,
    default_train_command,
    post_training_step,
)
from lit_resformer.execution.stack_jobs import StackSettingError, describe, pack, stacked_runs
from lit_resformer.grids.changes import describe_changes
from lit_resformer.grids.grid import Grid, GridError
from lit_resformer.grids.selection import SelectionError
from lit_resformer.provenance import collect as collect_provenance
from lit_resformer.runs.directory import (
    GridDir,
)
from lit_resformer.runs.run_dir import FINISHED


@dataclass
class GridOutcome:
    grid: Grid
    grid_dir: Path
    summaries: dict[str, dict] = field(default_factory=dict)  # run name -> summary (None: could not run)
    errors: dict[str, str] = field(default_factory=dict)  # run name -> why it could not run
    left: list[str] = field(default_factory=list)  # runs a time limit stopped or kept from starting
    report: Path | None = None

    @property
    def failed(self) -> list[str]:
        bad = [name for name, s in self.summaries.items() if s and s.get("status") not in (*FINISHED, BUSY)]
        return sorted((set(bad) | set(self.errors)) - set(self.left))

    @property
    def busy(self) -> list[str]:
        """Runs another process works in: left to it, neither run nor reported here."""
        return sorted(name for name, s in self.summaries.items() if s and s.get("status") == BUSY)

    def record(self, job: RunJob, summary: dict | None, error: str | None) -> tuple[str, str | None]:
        """A job's outcome as the executor reports it: (what to count it as, a line to show or None)."""
        stopped = summary is not None and summary.get("status") == "interrupted"
        if stopped or (error is not None and error.startswith(TimeLimitReached.__name__)):
            self.left.append(job.name)  # the next call of the same command runs it (again)
            return "left for the next call", None
        if summary is None:
            self.errors[job.name] = error
            return "error", f"{job.name}: could not run: {error}"
        self.summaries[job.name] = summary
        status = summary.get("status", "?")
        if status == BUSY:
            return status, f"{job.name}: skipped, busy in another process ({summary.get('error')})"
        return status, None if status == "done" else f"{job.name}: {status}: {summary.get('error')}"


EXECUTORS = ("local", "slurm")


@dataclass(frozen=True)
class PoolOptions:
    """Where and how the runs train: the executor (`local` or `slurm`) and its settings."""

    executor: str = "local"
    devices: Sequence[str] | None = None  # GPU ids the local pool hands out (None: every visible GPU)
    gpus_per_run: int = 1  # GPUs per run (also for slurm)
    cpu_slots: int = 1  # concurrent runs on a CPU-only machine
    threads_per_run: int | None = None  # intra-op threads of each run (None: the cores split between the slots)
    runs_per_gpu: int = 1  # concurrent small runs sharing each GPU
    stack: int | str = 1  # runs trained in one process, stacked (lit_resformer.stacking): N at most, or "auto"
    time_limit_s: float | None = None  # local pool: after it no run starts and running ones are stopped
    # SlurmExecutor options: partition, cpus_per_task, mem_gb, time_min, account, qos, constraint, max_requeues, cluster
    slurm: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GridOptions:
    """How `run_grid` runs a grid."""

    runs_dir: str | Path = "runs"  # runs go to RUNS_DIR/<grid>/<cell>/seed<k>
    allow_any_class: bool = False  # let the grid's configs construct any class (validation and training alike)
    post_training: Sequence[str] = ()  # steps on every finished run: "eval", "analyze"
    # writes the grid's report at the end (grid folder -> report path); None: no report
    report: Callable[[Path], Path] | None = None
    dry_run: bool = False  # list what would run, write nothing
    pool: PoolOptions = field(default_factory=PoolOptions)
    # the training command before `--config YAML --trainer.default_root_dir RUN_DIR [--ckpt_path last]`
    # (None: `lit-resformer fit`, or $LIT_RESFORMER_TRAIN_CMD)
    train_command: Sequence[str] | None = None
    # shell-style patterns of cell names: only their runs train in this call (a slice of the grid); () trains all
    cells: Sequence[str] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.post_training) - set(POST_TRAINING))
        if unknown:
            raise GridError(f"post_training: unknown step(s) {unknown}; choose from {sorted(POST_TRAINING)}")

    def in_slice(self, cell: str) -> bool:
        return not self.cells or any(fnmatch.fnmatchcase(cell, pattern) for pattern in self.cells)


def make_executor(pool: PoolOptions):
    if pool.executor == "local":
        return LocalExecutor(devices=pool.devices, gpus_per_run=pool.gpus_per_run, cpu_slots=pool.cpu_slots,
                             threads_per_run=pool.threads_per_run, runs_per_gpu=pool.runs_per_gpu,
                             time_limit_s=pool.time_limit_s)
    if pool.time_limit_s is not None:
        raise GridError("--time-limit applies to the local executor (a Slurm job has its own --time)")
    if pool.executor == "slurm":
        return SlurmExecutor(gpus_per_run=pool.gpus_per_run, **pool.slurm)
    raise GridError(f"unknown executor {pool.executor!r}; choose one of {list(EXECUTORS)}")


def run_grid(spec: Grid, options: GridOptions = GridOptions(), *, progress: bool = True,
             out: TextIO | None = None) -> GridOutcome:
    """Train every run of a grid (as load_grid read it: the file's cells resolved once, with the CLI's seeds and
    forced overrides) into RUNS_DIR/<grid>/<cell>/seed<k>/ and write the report.

    Runs already done are skipped and interrupted ones resume; with `options.pool.time_limit_s` the same call
    resumes the grid in the next time-bounded slice. A grid whose runs wait on others trains in rounds until no run
    is left that can start: a `select:` block's runs at the points its finished pilot chose (Selection.choose), a
    `ladder:` rung once its trunk has kept the checkpoint it starts from. A run is attempted at most once a call (a
    failed one is retried by the next call). `progress` draws a progress bar on stderr; the listing of the runs and
    what happens to them goes to `out` (stdout).
    """
    out = out or sys.stdout
    for kind in options.post_training:
        post_training_step(kind)  # fail now, not after training, if a step cannot run here
    pool = make_executor(options.pool)
    command = list(options.train_command) if options.train_command is not None else default_train_command()
    if options.allow_any_class:
        command.append(ALLOW_ANY_CLASS_FLAG)
    unmatched = [pattern for pattern in options.cells
                 if not any(fnmatch.fnmatchcase(cell, pattern) for cell, _ in spec.run_keys)]
    if unmatched:
        raise GridError(f"--cells {' '.join(unmatched)}: no cell of {spec.name} matches; its cells: "
                        f"{', '.join(dict.fromkeys(cell for cell, _ in spec.run_keys))}")
    folder = GridDir.of(options.runs_dir, spec.name)
    outcome = GridOutcome(spec, folder.path)
    attempted: set[str] = set()
    while _round(spec, folder, options, pool, command, outcome, progress, out, attempted):
        if outcome.left:
            break
    if options.dry_run:
        return outcome
    if outcome.busy:
        # the runner working in them writes the report when it ends; one written now would show them unfinished
        print(f"{len(outcome.busy)} run(s) busy in another process, left to it: {', '.join(outcome.busy)}"
              + ("; the report is left to that runner" if options.report else ""), file=out)
    elif options.report:
        outcome.report = options.report(outcome.grid_dir)
        print(f"report: {outcome.report}", file=out)
    if outcome.left:
        print(f"time limit: {len(outcome.left)} run(s) left for the next call of the same command: "
              f"{', '.join(sorted(outcome.left))}", file=out)
    if outcome.failed:
        print(f"{len(outcome.failed)} run(s) did not finish: {', '.join(outcome.failed)}", file=out)
    return outcome


def _round(spec: Grid, folder: GridDir, options: GridOptions, pool, command: list[str], outcome: GridOutcome,
           progress: bool, out: TextIO, attempted: set[str]) -> bool:
    """One round, in phases each owned by one module: the folder's state (GridDir.survey), the `select:` block's
    choice from it, the grid's plan of every run (Grid.plan), the jobs that can start and were not attempted yet in
    this call (packed into stacks), listed (the whole plan in the first round, what starts in later ones), the folder
    made ready for them (GridDir.prepare) and the jobs run. Whether any training job ran."""
    first = not attempted
    state = folder.survey(spec.run_keys)
    try:
        choice = spec.selection.choose(state.finals) if spec.selection is not None else None
    except SelectionError as e:
        raise GridError(f"{spec.path}: select: {e}") from None
    plan = spec.plan(choice, state, options.post_training)
    try:
        check_devices(pool, {p.run.name: p.run.config for p in plan.runs}, options.pool.gpus_per_run)
    except DeviceError as e:
        raise GridError(str(e)) from None
    jobs = [RunJob(p.run.grid, p.run.cell, p.run.seed, p.run_dir.path, command, train=p.train,
                   post_training=tuple(p.post_training))
            for p in plan.runs if (p.train or p.post_training) and p.run.name not in attempted and not p.waits
            and options.in_slice(p.run.cell)]
    resolved = {p.run_dir.path: p.run.resolved for p in plan.runs}
    try:
        jobs = pack(jobs, lambda job: resolved[job.run_dir], options.pool.stack, options.pool.executor, pool)
    except StackSettingError as err:
        raise GridError(str(err)) from None
    starting = {run.name for job in jobs for run in stacked_runs(job)}
    lines = []
    if first:
        added = sum(p.selected for p in plan.runs)
        lines += [f"grid {spec.name}: {len(spec.cells)} cells x {len(spec.seeds)} seeds = {len(plan.runs) - added} runs"
                  + (f", {added} more from its select block so far" if spec.selection else "") + f" -> {folder.path}",
                  f"executor: {pool.describe()}{describe(jobs)}"]
    elif jobs:
        lines.append(f"next round: {len(jobs)} job(s) can start now{describe(jobs)}")
    lines += [f"  {p.run.name:<48} {p.waits or p.action}" + (f" then {'+'.join(p.post_training)}" if p.post_training
                                                              else "")
              for p in plan.runs if first or p.run.name in starting]
    if choice is not None and (first or jobs):
        chosen = ", ".join(f"{arm} {spec.selection.over}={value:g}" if not isinstance(value, dict) else
                           f"{arm} {spec.selection.over} " + " ".join(f"{v:g}@{per:g}" for per, v in value.items())
                           for arm, value in choice.best.items())
        lines.append(f"select: best {spec.selection.over} per arm: {chosen or 'none chosen yet'}")
        lines += [f"  waiting: {line}" for line in choice.waiting]
    if options.dry_run:
        lines.append(describe_changes(plan.changes))
        if isinstance(pool, SlurmExecutor) and jobs:
            lines += [f"\nsbatch script of the first job ({jobs[0].name}); the others differ only in the name:",
                      pool.sbatch_script(jobs[0])]
        waiting = sum(bool(p.waits) for p in plan.runs)
        lines.append(f"dry run: {len(jobs)} of {len(plan.runs)} runs would start"
                     + (f" ({waiting} wait for others first)" if waiting else ""))
    if lines:
        print("\n".join(lines), file=out)
    if options.dry_run:
        return False
    for p in plan.runs:  # before any return: a call that finds only done and busy runs still leaves the report to them
        if p.busy:
            outcome.summaries[p.run.name] = {"status": BUSY, "error": p.action}
    if not jobs:
        return False
    folder.prepare(plan.manifest, collect_provenance(plan.precision, accelerator=plan.accelerator),
                   [(p.run_dir, p.run.config, p.shared, p.branch if p.run.name in starting else None)
                    for p in plan.runs if not p.busy])
    attempted.update(job.name for job in jobs)
    run_with_progress(pool, jobs, outcome.record, f"grid {spec.name}", progress)
    for p in plan.runs:
        if not p.busy and p.run.name not in outcome.summaries and p.run.name not in outcome.errors:
            outcome.summaries[p.run.name] = p.run_dir.read_summary()
    return any(run.train for job in jobs for run in stacked_runs(job))
