"""run_grid: expand and validate a grid, then train its runs through an executor, idempotently.

- runs whose summary says done (or diverged: a deterministic outcome) are skipped;
- runs with a checkpoint resume from it (`--ckpt_path last`); failed and interrupted runs are retried;
- a failing or diverging run is recorded in its summary.json and the grid goes on;
- at the end the report is written by `GridOptions.report` (the command line passes
  lit_resformer.reports.write_report: a grid run imports nothing that judges or reports).
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from lit_resformer.config.trust import ALLOW_ANY_CLASS_FLAG
from lit_resformer.execution.executors import LocalExecutor, SlurmExecutor, TimeLimitReached
from lit_resformer.execution.jobs import (
    BUSY,
    POST_TRAINING,
    RunJob,
    default_train_command,
    post_training_result,
    post_training_step,
)
from lit_resformer.execution.stack_jobs import StackJob, StackSettingError, describe, pack, stacked_runs
from lit_resformer.grids.changes import common_changes, show_value
from lit_resformer.grids.grid import Grid, GridError, Run
from lit_resformer.provenance import collect as collect_provenance
from lit_resformer.runs.directory import (
    GridDir,
    check_run_config,
    finished_elsewhere,
    run_state,
    write_run_config,
)
from lit_resformer.runs.summary import last_step
from lit_resformer.training.run_dir import FINISHED, RunConflict, RunDir


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

    def __post_init__(self) -> None:
        unknown = sorted(set(self.post_training) - set(POST_TRAINING))
        if unknown:
            raise GridError(f"post_training: unknown step(s) {unknown}; choose from {sorted(POST_TRAINING)}")


def make_executor(pool: PoolOptions, grid_dir: Path):
    if pool.executor == "local":
        return LocalExecutor(devices=pool.devices, gpus_per_run=pool.gpus_per_run, cpu_slots=pool.cpu_slots,
                             threads_per_run=pool.threads_per_run, runs_per_gpu=pool.runs_per_gpu,
                             time_limit_s=pool.time_limit_s)
    if pool.time_limit_s is not None:
        raise GridError("--time-limit applies to the local executor (a Slurm job has its own --time)")
    if pool.executor == "slurm":
        return SlurmExecutor(folder=grid_dir / ".submitit", gpus_per_run=pool.gpus_per_run, **pool.slurm)
    raise GridError(f"unknown executor {pool.executor!r}; choose one of {list(EXECUTORS)}")


@dataclass
class PlannedRun:
    run: Run
    run_dir: RunDir
    action: str  # what will happen, for --dry-run and the log
    train: bool  # False: training is finished (done or diverged)
    post_training: list[str]  # eval/analysis steps still to run on it
    busy: bool = False  # another process holds the run's lock
    shared: RunDir | None = None  # the same run trained elsewhere: the run directory becomes a link to it


class Twins:
    """Finds, for a run not started yet, the same run trained elsewhere: a finished run of another grid in the same
    runs folder, or an earlier run of this grid, whose config has the same identity (Grid.identity, the grid spec's
    run_identity: every field's value, seed included, where a run trains and writes left out). Identical configs
    are matched as written; others are resolved (a fraction of a second each, once: the grid keeps what it resolved),
    and only against candidates of the same seed."""

    def __init__(self, grid: Grid, grid_dir: Path):
        self.grid = grid
        self._elsewhere: dict[int, list[tuple[dict, RunDir]]] = {}  # seed -> finished runs of other grids
        for trained in finished_elsewhere(Path(grid_dir).parent, GridDir(grid_dir)):
            config = trained.read_experiment()
            if config is not None:
                self._elsewhere.setdefault(config.get("seed_everything"), []).append((config, trained))
        self._in_grid: dict[str, RunDir] = {}  # identity -> the first run of this grid with it

    def identity(self, config: dict) -> str | None:
        """The config's run identity as the grid knows it (Grid.identity; each config resolved once)."""
        return self.grid.identity(config)

    def register(self, run: Run, run_dir: RunDir) -> None:
        """A run of the grid that exists already (trained here, or through a link): later twins are linked to it."""
        identity = self.identity(run.config)
        if identity is not None:
            self._in_grid.setdefault(identity, run_dir)

    def find(self, run: Run, run_dir: RunDir) -> RunDir | None:
        """The run to share the not yet started `run` with (None: train it in `run_dir`)."""
        identity = self.identity(run.config)
        if identity is None:
            return None
        if identity in self._in_grid:
            return self._in_grid[identity]
        candidates = self._elsewhere.get(run.config.get("seed_everything"), [])
        shared = next((trained for config, trained in candidates if config == run.config), None)
        if shared is None:
            shared = next((trained for config, trained in candidates if self.identity(config) == identity), None)
        self._in_grid[identity] = shared or run_dir
        return shared


def plan(grid: Grid, runs: list[Run], grid_dir: Path, post_training: Sequence[str]) -> list[PlannedRun]:
    """What happens to every run. A run not started whose config another grid of the runs folder (or an earlier cell
    of this one) already trains is shared with that run, not trained again. Refuses (RunConflict) if any existing
    run directory holds a different config — checked for all runs before anything starts."""
    conflicts, planned = [], []
    twins = Twins(grid, grid_dir)
    own = GridDir(grid_dir).path.resolve()
    for run in runs:
        run_dir = GridDir(grid_dir).run_dir(run.cell, run.seed)
        if not run_dir.path.exists():  # not started, or a link whose run was deleted since
            shared = twins.find(run, run_dir)
        elif run_dir.path.is_symlink():  # shared by an earlier call
            shared = RunDir(run_dir.path.resolve())
            twins.register(run, shared)
        else:
            shared = None
            twins.register(run, run_dir)
        if shared is not None:
            if run_dir.path.is_symlink():
                try:
                    check_run_config(run_dir, run.config, run.name, grid.same_run)
                except RunConflict as e:
                    conflicts.append(str(e))
                    continue
            # a run of this grid does its own post-training steps; one finished elsewhere gets those it lacks here
            in_grid = own in shared.path.parents
            pending = [] if in_grid else [k for k in post_training if run_state(shared) == "done"
                                          and not post_training_result(k, shared).is_file()]
            planned.append(PlannedRun(run, run_dir, f"shared: trained as {_trained_as(shared, grid_dir)}",
                                      False, pending, shared=shared))
            continue
        try:
            check_run_config(run_dir, run.config, run.name, grid.same_run)
        except RunConflict as e:
            conflicts.append(str(e))
            continue
        summary = run_dir.read_summary() or {}
        status = summary.get("status")
        holder = run_dir.lock_holder()
        if holder is not None:  # another runner trains it (or evaluates it): leave it to that runner
            planned.append(PlannedRun(run, run_dir, f"skip: busy (locked by {holder})", False, [], busy=True))
            continue
        if status == "done":
            action = "skip: done"
        elif status == "diverged":
            action = f"skip: diverged at step {summary.get('diverged_step')}"
        elif run_dir.has_checkpoint():
            action = f"resume from checkpoint (logged up to step {last_step(run_dir)})"
        elif status in ("failed", "interrupted", "running"):
            action = f"retry ({status}{': ' + summary['error'] if summary.get('error') else ''})"
        else:
            action = "run"
        train = status not in FINISHED
        pending = [k for k in post_training
                   if (train or status == "done") and not post_training_result(k, run_dir).is_file()]
        planned.append(PlannedRun(run, run_dir, action, train, pending))
    if conflicts:
        raise RunConflict("\n".join(conflicts))
    return planned


def _trained_as(run: RunDir, grid_dir: Path) -> str:
    """How the plan names the run a link points to: <grid>/<cell>/seed<k> under the runs folder."""
    return os.path.relpath(run.path, Path(grid_dir).parent)


def check_devices(runs: list[Run], pool, gpus_per_run: int) -> None:
    """Runs that want GPUs must get them, and as many as their trainer uses (a run with
    trainer.devices: 8 under DDP needs --gpus-per-run 8)."""
    local_gpus = isinstance(pool, LocalExecutor) and bool(pool.slots[0]["CUDA_VISIBLE_DEVICES"])
    for run in runs:
        trainer = run.config.get("trainer") or {}
        if str(trainer.get("accelerator", "auto")) not in ("gpu", "cuda"):
            continue
        if isinstance(pool, LocalExecutor) and not local_gpus:
            raise GridError(f"{run.name} trains on GPUs (trainer.accelerator={trainer['accelerator']}) but no GPU is "
                            f"visible here; run it on a GPU machine or with --executor slurm")
        devices = trainer.get("devices")
        if isinstance(devices, int) and not isinstance(devices, bool) and devices > gpus_per_run:
            raise GridError(f"{run.name} uses trainer.devices={devices} GPUs but each run gets --gpus-per-run "
                            f"{gpus_per_run}; pass --gpus-per-run {devices}")


def describe_changes(changes: dict[str, dict[str, tuple]]) -> str:
    """What each cell changes relative to the base experiment, one field a line, those of every cell listed once."""
    common = common_changes(changes)
    lines = ["what each cell changes relative to the base experiment (base -> cell, defaults filled in):"]

    def show(fields: dict[str, tuple]) -> list[str]:
        return [f"      {key}: {show_value(before)} -> {show_value(after)}" for key, (before, after) in fields.items()]

    if common:
        lines += ["  every cell:", *show(common)]
    for cell, fields in changes.items():
        own = {key: change for key, change in fields.items() if key not in common}
        lines += [f"  {cell}:" + ("" if own else " nothing else" if common else " nothing (the base itself)"), *show(own)]
    return "\n".join(lines)


def _grid_provenance(grid: Grid) -> dict:
    """What the runner runs on, for the grid's manifest: its precision(s) as the cells' configs set them."""
    trainers = [config.get("trainer") or {} for config in grid.configs.values()]
    precision = ", ".join(dict.fromkeys(str(t.get("precision", "32-true")) for t in trainers))
    return collect_provenance(precision, accelerator=str(trainers[0].get("accelerator", "auto")))


def _run_jobs(pool, jobs: list[RunJob | StackJob], outcome: GridOutcome, progress: bool) -> None:
    """Run the jobs through the executor, recording each outcome as it arrives under a progress bar."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    bar = tqdm(total=sum(len(stacked_runs(job)) for job in jobs), desc=f"grid {outcome.grid.name}", unit="run",
               disable=not progress or not jobs, file=sys.stderr)

    def on_done(job: RunJob, summary: dict | None, error: str | None) -> None:
        with lock:
            stopped = summary is not None and summary.get("status") == "interrupted"
            if stopped or (error is not None and error.startswith(TimeLimitReached.__name__)):
                outcome.left.append(job.name)  # the next call of the same command runs it (again)
                counts["left for the next call"] += 1
                bar.update(1)
                bar.set_postfix(dict(counts))
                return
            if summary is None:
                outcome.errors[job.name] = error
                counts["error"] += 1
                bar.write(f"{job.name}: could not run: {error}")
            else:
                outcome.summaries[job.name] = summary
                counts[summary.get("status", "?")] += 1
                if summary.get("status") == BUSY:
                    bar.write(f"{job.name}: skipped, busy in another process ({summary.get('error')})")
                elif summary.get("status") != "done":
                    bar.write(f"{job.name}: {summary.get('status')}: {summary.get('error')}")
            bar.update(1)
            bar.set_postfix(dict(counts))

    try:
        pool.run(jobs, on_done)
    finally:
        bar.close()


def run_grid(spec: Grid, options: GridOptions = GridOptions(), *, progress: bool = True,
             out: TextIO | None = None) -> GridOutcome:
    """Train every run of a grid (as load_grid read it: the file's cells resolved once, with the CLI's seeds and
    forced overrides) into RUNS_DIR/<grid>/<cell>/seed<k>/ and write the report.

    Runs already done are skipped and interrupted ones resume; with `options.pool.time_limit_s` the same call
    resumes the grid in the next time-bounded slice. A grid whose runs wait on others trains in rounds until no run
    is left that can start: a `select:` block's runs at the points its finished pilot chose (Grid.chosen_runs), a
    `ladder:` rung once its trunk has kept the checkpoint it starts from. A run is attempted at most once a call (a
    failed one is retried by the next call). `progress` draws a progress bar on stderr; the listing of the runs and
    what happens to them goes to `out` (stdout).
    """
    out = out or sys.stdout
    grid_dir = GridDir.of(options.runs_dir, spec.name).path
    for kind in options.post_training:
        post_training_step(kind)  # fail now, not after training, if a step cannot run here
    pool = make_executor(options.pool, grid_dir)
    command = list(options.train_command) if options.train_command is not None else default_train_command()
    if options.allow_any_class:
        command.append(ALLOW_ANY_CLASS_FLAG)
    outcome = GridOutcome(spec, grid_dir)
    attempted: set[str] = set()
    while True:
        chosen, best, waiting = spec.chosen_runs(pilot_finals(spec, grid_dir))
        runs = list({run.name: run for run in [*spec.runs(), *chosen]}.values())
        trained = _round(spec, runs, grid_dir, options, pool, command, outcome, progress, out, attempted, best,
                         waiting)
        if options.dry_run:
            return outcome
        if not trained or outcome.left:
            return _finish(outcome, options, out)


def pilot_finals(grid: Grid, grid_dir: Path) -> dict[str, dict[int, float | None]]:
    """cell -> seed -> final validation loss of each finished pilot run of a grid's `select:` arms (None for a
    diverged run), read from their summaries; {} for a grid without one."""
    if grid.selection is None:
        return {}
    finals: dict[str, dict[int, float | None]] = {}
    for arm in grid.selection.arms:
        for cell in grid.pilot_cells(arm).values():
            for seed in grid.selection.pilot_seeds:
                summary = GridDir(grid_dir).run_dir(cell, seed).read_summary() or {}
                if summary.get("status") in FINISHED:
                    finals.setdefault(cell, {})[seed] = (summary.get("final_val_loss")
                                                         if summary["status"] == "done" else None)
    return finals


def _round(spec: Grid, runs: list[Run], grid_dir: Path, options: GridOptions, pool, command: list[str],
           outcome: GridOutcome, progress: bool, out: TextIO, attempted: set[str], best: dict,
           waiting: list[str]) -> bool:
    """Plan `runs` and train those that can start and were not attempted yet in this call, listing them (the whole
    plan in the first round, what starts in later ones); whether any training job ran."""
    first = not attempted
    planned = plan(spec, runs, grid_dir, options.post_training)
    check_devices(runs, pool, options.pool.gpus_per_run)
    ready = {p.run.name: _branch_wait(spec, p, grid_dir) for p in planned if p.train}
    jobs = [
        RunJob(p.run.grid, p.run.cell, p.run.seed, p.run_dir.path, command, train=p.train,
               post_training=tuple(p.post_training))
        for p in planned
        if (p.train or p.post_training) and p.run.name not in attempted and not ready.get(p.run.name)
    ]
    configs = {p.run_dir.path: p.run.config for p in planned}
    try:
        jobs = pack(jobs, lambda job: spec.resolve(configs[job.run_dir]), options.pool.stack, options.pool.executor,
                    pool)
    except StackSettingError as err:
        raise GridError(str(err)) from None
    if first:
        print(f"grid {spec.name}: {len(spec.cells)} cells x {len(spec.seeds)} seeds = {len(spec.runs())} runs"
              + (f", {len(runs) - len(spec.runs())} more from its select block so far" if spec.selection else "")
              + f" -> {grid_dir}", file=out)
        print(f"executor: {pool.describe()}{describe(jobs)}", file=out)
    elif jobs:
        print(f"next round: {len(jobs)} job(s) can start now{describe(jobs)}", file=out)
    for p in planned:
        if first or any(job.name == p.run.name for job in jobs):
            extra = f" then {'+'.join(p.post_training)}" if p.post_training else ""
            print(f"  {p.run.name:<48} {ready.get(p.run.name) or p.action}{extra}", file=out)
    if spec.selection is not None and (first or jobs):
        chosen = ", ".join(f"{arm} {spec.selection.over}={value:g}" for arm, value in best.items())
        print(f"select: best {spec.selection.over} per arm: {chosen or 'none chosen yet'}", file=out)
        for line in waiting:
            print(f"  waiting: {line}", file=out)
    if options.dry_run:
        print(describe_changes(spec.changes()), file=out)
        if isinstance(pool, SlurmExecutor) and jobs:
            print(f"\nsbatch script of the first job ({jobs[0].name}); the others differ only in the name:", file=out)
            print(pool.sbatch_script(jobs[0]), file=out)
        print(f"dry run: {len(jobs)} of {len(runs)} runs would start"
              + (f" ({sum(bool(w) for w in ready.values())} wait for others first)" if any(ready.values()) else ""),
              file=out)
        return False
    if not jobs:
        return False

    GridDir(grid_dir).write_manifest(spec.manifest(), _grid_provenance(spec))
    for p in planned:
        if p.shared is not None:
            GridDir(grid_dir).share(p.run.cell, p.run.seed, p.shared)
        else:
            GridDir(grid_dir).drop_broken_link(p.run.cell, p.run.seed)  # its run was deleted: it trains here now
        write_run_config(p.run_dir, p.run.config, p.run.name, spec.same_run)
    for job in jobs:
        for run in stacked_runs(job):
            _start_branch(spec, run, grid_dir)
    attempted.update(job.name for job in jobs)
    _run_jobs(pool, jobs, outcome, progress)
    for p in planned:
        if p.busy:
            outcome.summaries[p.run.name] = {"status": BUSY, "error": p.action}
        elif p.run.name not in outcome.summaries and p.run.name not in outcome.errors:
            outcome.summaries[p.run.name] = p.run_dir.read_summary()
    return any(run.train for job in jobs for run in stacked_runs(job))


def _trunk_run(spec: Grid, cell: str, seed: int, grid_dir: Path) -> tuple[RunDir, str] | None:
    """A ladder rung's trunk run (its folder, followed if shared, and its name) and the rung's branch point."""
    point = spec.branch_point(cell)
    if point is None:
        return None
    trunk = GridDir(grid_dir).run_dir(point.trunk, seed)
    return RunDir(trunk.path.resolve()), f"{spec.name}/{point.trunk}/seed{seed}"


def _branch_wait(spec: Grid, planned: PlannedRun, grid_dir: Path) -> str:
    """Why a ladder rung cannot start yet ("" when it can, or is no rung): its trunk has not kept the checkpoint at
    the rung's decay start."""
    trunk = _trunk_run(spec, planned.run.cell, planned.run.seed, grid_dir)
    if trunk is None or planned.run_dir.has_training_output():
        return ""
    step = spec.branch_point(planned.run.cell).step
    if trunk[0].has_kept(step):
        return ""
    return f"waits for its trunk {trunk[1]} to reach step {step}"


def _start_branch(spec: Grid, job: RunJob, grid_dir: Path) -> None:
    """A ladder rung about to train for the first time starts from its trunk's checkpoint (ladder.seed_branch)."""
    trunk = _trunk_run(spec, job.cell, job.seed, grid_dir)
    if trunk is not None and job.train and not RunDir(job.run_dir).has_training_output():
        RunDir(job.run_dir).start_branch(trunk[0], spec.branch_point(job.cell).step, trunk[1])


def _finish(outcome: GridOutcome, options: GridOptions, out: TextIO) -> GridOutcome:
    """The report (unless another process still works in a run), and what was left or failed."""
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
