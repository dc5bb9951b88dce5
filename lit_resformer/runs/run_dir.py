"""The run directory: every path and file of one training run, and the rules for reading them back.

    <run>/
      config.yaml                   the resolved config, written by `lit-resformer fit` before training
      checkpoints/                  a step checkpoint every N steps, and last.ckpt (Lightning's ModelCheckpoint);
                                    on_exception.ckpt where training stopped on Ctrl-C or an error (InterruptCheckpoint)
      csv/version_<k>/metrics.csv   the logged metrics, one CSVLogger version per (re)start of the run
                                    (metrics.csv.gz in exported results: `compressed_metrics`)
      tb/                           TensorBoard events
      divergence.json               written by training when the loss turns non-finite: {"step": N, "loss": "nan"}
      corpus.json                   what the run trained on: {"source": ..., "content_sha256": ...}, written when
                                    training starts (runs of different corpora are never paired by the claims)
      eval/results.json             zero-shot scores (lit_resformer.eval.run), next to their tables
      analysis/analysis.json        attention analysis (lit_resformer.analysis), next to its plots
    and, for a run of an ablation grid:
      experiment.yaml               the config the grid asked for, written before the run starts
      summary.json                  status and results of the run
      logs/stdout.log, logs/stderr.log   the training process's output, one banner per attempt
      .lock                         held by the process working in the run

No other module builds these paths: code that needs one asks a `RunDir`. Where a grid keeps its runs is the grid's
business (lit_resformer.runs.directory); a run knows its grid only from what its summary records.

Where it stands: in the runs/ room, which owns what a run is, but on the floor below training/ (tests/test_imports.py
LAYERS), with lit_resformer.runs.checkpoint_reading, the one module it reads with (which checkpoint can resume).
Training writes these files (the resolved config, checkpoints, logs, the corpus and divergence records) and everything
above it reads them, so their one owner must sit where both can import it; the rest of runs/ (a grid's folder,
summaries, results) reads finished runs and stays above training. Neither module imports anything of training/.
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import fcntl
import gzip
import json
import math
import os
import shutil
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lit_resformer.runs.checkpoint_reading import checkpoint_problem
from lit_resformer.writing import atomic_write, atomic_write_json

# libyaml's parser where PyYAML was built with it (the same safe schema, about ten times faster): the board reads
# every run's config files, and parsing them in Python was half of a cold `lit-resformer claims`
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: Path) -> Any:
    """A run's or a grid's YAML file, safely loaded."""
    return yaml.load(path.read_text(), Loader=_YAML_LOADER)

CHECKPOINTS = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"  # the checkpoint `--ckpt_path last` resumes from (Lightning's save_last)
# saved when training stops on an exception (Ctrl-C, SIGTERM, an error): Lightning's OnExceptionCheckpoint's name
INTERRUPT_CHECKPOINT = "on_exception.ckpt"
SUMMARY = "summary.json"
CSV_LOGS = "csv"  # CSVLogger name: csv/version_<k>/metrics.csv
METRICS, COMPRESSED_METRICS = "metrics.csv", "metrics.csv.gz"
TB_LOGS = "tb"
EVAL_RESULTS = "results.json"  # inside the eval folder
ANALYSIS_RESULTS = "analysis.json"  # inside the analysis folder
TRAIN_LOSS = "train/loss"
TOKENS_SEEN = "train/tokens_seen"  # the training tokens by a step, every device and accumulated batch counted
# the statuses of a summary that a rerun of its grid skips; failed and interrupted runs are retried
FINISHED = ("done", "diverged")
KEPT_PREFIX = "kept-step"  # a checkpoint kept at a named step (RunCheckpoint's keep_steps): never pruned
BRANCH_FILE = "branch.json"  # in a ladder rung's folder: the trunk and step it started from (RunDir.start_branch)



def tokens_seen_by(series: dict[str, list[tuple[int, float]]]) -> Callable[[int], int] | None:
    """From a run's metrics (`RunDir.read_metrics`), the training tokens it had seen by a step: the count logged at
    that step or the last one before it, 0 before the first training step (the references and the first validation
    are logged at step 0); None for a run that logged no count, whose curves can only be read against steps."""
    points = series.get(TOKENS_SEEN) or []
    if not points:
        return None
    steps = [step for step, _ in points]

    def tokens(step: int) -> int:
        index = bisect.bisect_right(steps, step) - 1
        return int(points[index][1]) if index >= 0 else 0

    return tokens


def kept_checkpoint(folder: str | Path, step: int) -> Path:
    """Where a run's checkpoint kept at `step` (RunCheckpoint's keep_steps) lies in its checkpoints folder."""
    return Path(folder) / f"{KEPT_PREFIX}{step:06d}.ckpt"


def step_checkpoints_in(folder: str | Path) -> list[Path]:
    """Every checkpoint file in `folder` but last.ckpt and the interrupt's, newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [p for p in folder.glob("*.ckpt") if p.name not in (LAST_CHECKPOINT, INTERRUPT_CHECKPOINT) and p.is_file()]
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)


class RunConflict(RuntimeError):
    """A run directory holds a run made with a different config."""


class RunBusy(RuntimeError):
    """Another process is working in this run directory."""


def open_metrics(path: Path):
    """A metrics file of `RunDir.metric_files` opened as text for `csv`, compressed or not."""
    return gzip.open(path, "rt", newline="") if path.name == COMPRESSED_METRICS else open(path, newline="")


def compressed_metrics(path: Path) -> tuple[str, bytes]:
    """(name, bytes) of a metrics file as exported results keep it: gzip-compressed (a CSV of every logged step is
    about 200 kB per 1,000 steps, a tenth of that compressed), with no timestamp inside, so that exporting the same
    metrics twice gives the same bytes (merging compares files byte for byte)."""
    if path.name == COMPRESSED_METRICS:
        return path.name, path.read_bytes()
    return COMPRESSED_METRICS, gzip.compress(path.read_bytes(), compresslevel=9, mtime=0)


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a run resumes from, and why last.ckpt was passed over (None when it is last.ckpt)."""

    path: Path
    fallback_reason: str | None = None


class RunDir:
    """One run's directory. Paths are attributes; reading and writing the run's files are methods."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config_file = self.path / "config.yaml"
        self.experiment_file = self.path / "experiment.yaml"
        self.summary_file = self.path / SUMMARY
        self.divergence_file = self.path / "divergence.json"
        self.corpus_file = self.path / "corpus.json"
        # the uncommitted changes of the checkout it trained from, when there were any (provenance git_diff_sha256)
        self.diff_file = self.path / "git.diff"
        self.checkpoints_dir = self.path / CHECKPOINTS
        self.last_checkpoint = self.checkpoints_dir / LAST_CHECKPOINT
        self.interrupt_checkpoint = self.checkpoints_dir / INTERRUPT_CHECKPOINT
        self.csv_dir = self.path / CSV_LOGS
        self.tb_dir = self.path / TB_LOGS
        self.eval_dir = self.path / "eval"
        self.eval_results = self.eval_dir / EVAL_RESULTS
        self.analysis_dir = self.path / "analysis"
        self.analysis_results = self.analysis_dir / ANALYSIS_RESULTS
        self.logs_dir = self.path / "logs"
        self.stdout_log = self.logs_dir / "stdout.log"
        self.stderr_log = self.logs_dir / "stderr.log"
        self.lock_file = self.path / ".lock"

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and self.path == other.path

    def __hash__(self) -> int:
        return hash(self.path)

    @property
    def name(self) -> str:
        """What tables call the run: `<grid>/<cell>/seed<k>` for a run of an ablation grid (as its summary records
        them), else the folder's name."""
        summary = self.read_summary() or {}
        if all(summary.get(key) is not None for key in ("grid", "cell", "seed")):
            return f"{summary['grid']}/{summary['cell']}/seed{summary['seed']}"
        return self.path.name

    @classmethod
    def from_checkpoint(cls, checkpoint: str | Path) -> RunDir | None:
        """The run whose checkpoints folder holds `checkpoint`; None for a file kept anywhere else."""
        checkpoint = Path(checkpoint)
        return cls(checkpoint.parent.parent) if checkpoint.parent.name == CHECKPOINTS else None

    def result_files(self) -> list[Path]:
        """The small files that hold a run's results, without checkpoints or TensorBoard events: what a finished
        run leaves when its results are exported (report, claims and scaling read nothing else)."""
        files = [self.config_file, self.experiment_file, self.summary_file, self.divergence_file, self.corpus_file,
                 self.diff_file, self.eval_results, self.analysis_results, *self.metric_files()]
        return [f for f in files if f.is_file()]

    def has_training_output(self) -> bool:
        """Whether a training process already wrote here: starting it again then needs `--ckpt_path last`
        (which starts from scratch, in a new csv version, when no checkpoint was saved yet)."""
        return any(p.exists() for p in (self.config_file, self.checkpoints_dir, self.csv_dir, self.tb_dir))

    # ------------------------------------------------------------------ checkpoints
    def step_checkpoints(self) -> list[Path]:
        """Every checkpoint but last.ckpt, newest first."""
        return step_checkpoints_in(self.checkpoints_dir)

    def has_checkpoint(self) -> bool:
        """Whether any checkpoint file exists (cheap: nothing is read)."""
        return self.last_checkpoint.is_file() or self.interrupt_checkpoint.is_file() or bool(self.step_checkpoints())

    def resume_point(self) -> ResumePoint | None:
        """What `--ckpt_path last` resumes from: the newer of last.ckpt and the interrupt's checkpoint when it reads as
        a training checkpoint, else the other, else the newest intact step checkpoint (a run killed while writing
        last.ckpt keeps the previous one), with the reason for the caller to log. None when the run has no
        checkpoint; ValueError when none of them is intact."""
        problems = []
        latest = [p for p in (self.last_checkpoint, self.interrupt_checkpoint) if p.is_file()]
        candidates = sorted(latest, key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for path in candidates + self.step_checkpoints():
            problem = checkpoint_problem(path)
            if problem is None:
                return ResumePoint(path, "; ".join(problems) or None)
            problems.append(f"{path.name}: {problem}")
        if problems:
            raise ValueError(f"{self.checkpoints_dir} holds no intact checkpoint to resume from ({'; '.join(problems)})")
        return None

    def kept_steps(self) -> list[int]:
        """The steps the run kept a checkpoint at (kept_checkpoint: a ladder trunk keeps one at each rung's decay
        start), ascending."""
        return sorted(int(p.name.removeprefix(KEPT_PREFIX).removesuffix(".ckpt"))
                      for p in self.checkpoints_dir.glob(f"{KEPT_PREFIX}*.ckpt"))

    def ready(self, config: dict, shared: RunDir | None, branch: tuple[RunDir, int, str] | None) -> None:
        """Make the folder ready for a grid's job: a link to the run it `shared` with (the same run trained
        elsewhere), or, a link whose run was deleted since dropped, the folder of a run trained here; the `config` the
        grid asks of it written if none is there yet (the runner checked one already there, Grid.plan); a ladder rung
        that starts now seeded from its trunk (`branch`: trunk, step, the trunk's name; start_branch)."""
        if shared is not None:
            self.link_to(shared)
            return
        if self.path.is_symlink() and not self.path.exists():
            self.path.unlink()
        if branch is not None:
            self.start_branch(*branch)
        if not self.experiment_file.is_file():
            self.write_experiment(config)

    def link_to(self, trained: RunDir) -> None:
        """Make the folder a relative symbolic link to the same run trained elsewhere (in another grid of the same
        runs folder, or another cell of this grid): it is read through the link as its own, and trained once. A link
        whose run was deleted since is replaced."""
        if self.path.is_symlink():
            self.path.unlink()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.symlink_to(os.path.relpath(trained.path, self.path.parent), target_is_directory=True)

    def start_branch(self, trunk: RunDir, step: int, trunk_name: str) -> bool:
        """Start this run as a decay branch of `trunk` (a ladder rung, lit_resformer.grids.spec): the trunk's
        checkpoint kept at `step` becomes this run's last.ckpt and the trunk's logged metrics before `step` its first
        csv versions (those after it are the branch's own: a resumed run's later version wins from its first training
        step), so that the folder reads as a run resumed at `step`; BRANCH_FILE names the trunk and step. False
        (nothing written) when the trunk has not kept that checkpoint yet."""
        kept = kept_checkpoint(trunk.checkpoints_dir, step)
        if not kept.is_file():
            return False
        for index, source in enumerate(trunk.metric_files()):
            _copy_rows_before(source, self.csv_dir / f"version_{index}" / METRICS, step)
        self.checkpoints_dir.mkdir(parents=True, exist_ok=True)
        staged = self.checkpoints_dir / f".{kept.name}.partial"
        shutil.copyfile(kept, staged)
        staged.replace(self.last_checkpoint)
        atomic_write_json(self.path / BRANCH_FILE, {"trunk": trunk_name, "step": step, "checkpoint": str(kept)})
        return True

    # ------------------------------------------------------------------ metrics
    def metric_files(self) -> list[Path]:
        """csv/version_<k>/metrics.csv (or, in exported results, metrics.csv.gz) of every (re)start, in start order."""
        files = [*self.csv_dir.glob(f"version_*/{METRICS}"), *self.csv_dir.glob(f"version_*/{COMPRESSED_METRICS}")]
        return sorted(files, key=lambda p: int(p.parent.name.split("_")[-1]))

    def read_metrics(self) -> dict[str, list[tuple[int, float]]]:
        """{metric: [(step, value), ...]} sorted by step, merged over all restarts as the uninterrupted run would
        have logged it: a resumed run repeats the steps after its checkpoint, so from the first training step a
        later version logged on, the later version wins."""
        series: dict[str, dict[int, float]] = {}
        for path in self.metric_files():
            with open_metrics(path) as f:
                rows = [r for r in csv.DictReader(f) if r.get("step") not in (None, "")]
            trained = [int(float(r["step"])) for r in rows if r.get(TRAIN_LOSS)]
            if trained:
                first_step = min(trained)
                for steps in series.values():
                    for step in [s for s in steps if s >= first_step]:
                        del steps[step]
            for row in rows:
                step = int(float(row["step"]))
                for key, value in row.items():
                    if key not in ("step", "epoch") and value not in (None, ""):
                        series.setdefault(key, {})[step] = float(value)
        return {k: sorted(v.items()) for k, v in series.items() if v}

    def steps_logged(self) -> int:
        """How many optimizer steps the run has logged so far (the last whole row at step k: k + 1), 0 before any:
        from its newest metrics file, or the one before while a resumed run's new file holds no row yet. Read from a
        file's tail, so that a grid's progress bar can poll its runs while they train."""
        for path in reversed(self.metric_files()):
            step = _last_logged_step(path)
            if step is not None:
                return step + 1
        return 0

    # ------------------------------------------------------------------ divergence
    def record_divergence(self, step: int, loss: float) -> None:
        """Called by training when the loss turns non-finite, before it stops the run."""
        atomic_write_json(self.divergence_file, {"step": int(step), "loss": str(float(loss))})

    def diverged_step(self) -> int | None:
        """The step at which training diverged: the recorded one, else the first non-finite logged training loss
        (a trainer that logs the loss before it stops), else None."""
        if self.divergence_file.is_file():
            return int(json.loads(self.divergence_file.read_text())["step"])
        loss = self.read_metrics().get(TRAIN_LOSS, [])
        return next((step for step, value in loss if not math.isfinite(value)), None)

    # ------------------------------------------------------------------ corpus
    def record_corpus(self, source: str, content_sha256: str) -> None:
        """Called by training when it starts: the corpus's content hash (lit_resformer.data, `corpus_hash`)."""
        atomic_write_json(self.corpus_file, {"source": source, "content_sha256": content_sha256})

    def corpus_hash(self) -> str | None:
        """The content hash of the corpus the run trained on; None for a run that did not record it (one trained
        before runs recorded their corpus)."""
        return json.loads(self.corpus_file.read_text())["content_sha256"] if self.corpus_file.is_file() else None

    # ------------------------------------------------------------------ grid files
    def read_experiment(self) -> dict | None:
        return read_yaml(self.experiment_file) if self.experiment_file.is_file() else None

    def read_config(self) -> dict | None:
        """The config as Lightning resolved it (config.yaml); None before the run started."""
        return read_yaml(self.config_file) if self.config_file.is_file() else None

    def write_experiment(self, config: dict) -> None:
        atomic_write(self.experiment_file, yaml.safe_dump(config, sort_keys=False))

    def read_summary(self) -> dict | None:
        return json.loads(self.summary_file.read_text()) if self.summary_file.is_file() else None

    def write_summary(self, summary: dict) -> None:
        """NaN and infinities are not JSON: a diverged run's losses are written as null."""
        atomic_write_json(self.summary_file, _finite_or_none(summary), allow_nan=False)

    def lock_holder(self) -> str | None:
        """Who holds the run's lock ("<host> <pid>" as the holder wrote it), or None when no process does. Nothing
        is created: a run never started has no holder."""
        if not self.lock_file.is_file():
            return None
        fd = os.open(self.lock_file, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return self.lock_file.read_text().strip() or "another process"
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def lock(self):
        """Hold an exclusive flock on the run for as long as this block (and any process that inherits the yielded
        file descriptor) runs. Raises RunBusy if someone else holds it."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise RunBusy(f"{self.path} is in use by another process (lock {self.lock_file})") from e
            os.ftruncate(fd, 0)
            os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
            yield fd
        finally:
            os.close(fd)


def runs_under(path: str | Path) -> list[RunDir]:
    """The run at `path` when it is one (it holds a summary), else every run with a summary below it (a cell's or a
    grid's folder), in path order."""
    path = Path(path)
    if RunDir(path).summary_file.is_file():
        return [RunDir(path)]
    return [RunDir(summary.parent) for summary in sorted(path.rglob(SUMMARY))]


def _last_logged_step(path: Path) -> int | None:
    """The step of a metrics file's last whole row (a row still being written is cut short), None without one."""
    if path.name == COMPRESSED_METRICS:
        with open_metrics(path) as f:
            lines = f.read().splitlines()
    else:
        with open(path, "rb") as f:
            header = f.readline()
            rows_start = f.tell()
            f.seek(0, os.SEEK_END)
            start = max(rows_start, f.tell() - 8192)  # a row is far shorter: the tail holds the last whole one
            f.seek(start)
            rows = f.read().decode("utf-8", "replace").splitlines()
        lines = [header.decode("utf-8", "replace").rstrip("\r\n"), *(rows[1:] if start > rows_start else rows)]
    columns = next(csv.reader(lines[:1]), [])
    if "step" not in columns:
        return None
    at = columns.index("step")
    for row in csv.reader(reversed(lines[1:])):
        if len(row) == len(columns) and row[at]:
            with contextlib.suppress(ValueError):
                return int(float(row[at]))
    return None


def _copy_rows_before(source: Path, target: Path, step: int) -> None:
    """The rows of a metrics file logged before `step` (a step's row is logged at its index: the first `step`
    optimizer steps are rows 0 .. step - 1)."""
    with open_metrics(source) as f:
        reader = csv.DictReader(f)
        rows = [row for row in reader if row.get("step") not in (None, "") and int(float(row["step"])) < step]
        fields: Sequence[str] = reader.fieldnames or ["step"]
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value
