"""A grid's run directory: the only code that knows its paths and its manifest's form.

    RUNS/<grid>/
      grid.yaml                 the manifest: the expanded grid (cells, baseline, seeds, claims) and where it ran
      <cell>/seed<k>/           one run (lit_resformer.runs.run_dir.RunDir owns what is inside), or a relative link to
                                the same run trained in another grid of the runs folder (GridDir.share)
      provenance.json           in a results folder: one entry per export merged into it (lit_resformer.runs.archive)
      report.md, index.html, plots/

The manifest carries a schema version (MANIFEST_VERSION). A manifest written before versions existed (version 1) is
read through `migrate_manifest`, the one place that knows older forms: its cells' `changes` (what each cell changes
relative to the base experiment, as [base value, cell value]) were not recorded, so the grid file's overrides stand
in for them with the base value unknown (`base_values_recorded: false`), and it recorded no provenance.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lit_resformer.config.diff import config_differences
from lit_resformer.runs.run_dir import FINISHED, RunConflict, RunDir, read_yaml
from lit_resformer.writing import atomic_write

MANIFEST = "grid.yaml"
MANIFEST_VERSION = 2
EXPORT_HISTORY = "provenance.json"  # one entry per export merged into a results folder: where its runs trained
SEED_PREFIX = "seed"


class ManifestError(ValueError):
    """A grid manifest this version cannot read; the message names the file and the version."""


class BrokenSharedRun(FileNotFoundError):
    """A grid folder whose shared runs are links to runs that are not there (a grid copied without the grids whose
    runs it shares): read as it is, it would show those runs as never trained."""


def migrate_manifest(manifest: dict, where: Path | str) -> dict:
    """Any manifest as the current version: version 1 (no `version` field) gains its cells' `changes` from the
    grid file's overrides (base values unknown) and an empty provenance."""
    version = manifest.get("version", 1)
    if version == MANIFEST_VERSION:
        return manifest
    if version != 1:
        raise ManifestError(f"{where}: manifest version {version!r} is not one this version reads "
                            f"(1 to {MANIFEST_VERSION}); update lit-resformer")
    migrated = {**manifest, "version": MANIFEST_VERSION, "provenance": {}}
    if not all("changes" in cell for cell in manifest["cells"]):
        common = manifest.get("overrides") or {}
        migrated["cells"] = [{**cell, "changes": {key: [None, value] for key, value in
                                                  {**common, **(cell.get("overrides") or {})}.items()}}
                             for cell in manifest["cells"]]
        migrated["base_values_recorded"] = False
    return migrated


SameRun = Callable[[dict, dict, bool], bool]  # whether two configs run the same (the run finished or not)


@dataclass(frozen=True)
class RunState:
    """A run folder <cell>/seed<k> as the runner finds it when it plans a round (GridDir.survey)."""

    run_dir: RunDir  # the grid's own entry: a folder, a link to the same run trained elsewhere, or nothing yet
    exists: bool = False  # False: not started, or a link whose run was deleted since (it trains here now)
    shared: RunDir | None = None  # the run the entry links to (None: the grid's own)
    summary: dict = field(default_factory=dict)  # its summary.json ({} when none)
    config: dict | None = None  # the experiment config it was made with (None: not written yet)
    lock_holder: str | None = None  # the process that works in it now
    started: bool = False  # a training process wrote here (RunDir.has_training_output)
    checkpointed: bool = False  # it has a checkpoint to resume from
    kept_steps: frozenset[int] = frozenset()  # the steps it kept a checkpoint at (a ladder trunk's rung starts)

    @property
    def status(self) -> str:
        return self.summary.get("status") or "pending"


@dataclass(frozen=True)
class FolderState:
    """What a grid's folder and its runs folder hold when the runner plans a round."""

    path: Path  # the grid's folder
    runs: dict[tuple[str, int], RunState]  # (cell, seed) -> its folder, for every run the grid may train
    finals: dict[str, dict[int, float | None]]  # cell -> seed -> final validation loss of each finished run (None: diverged)
    elsewhere: list[tuple[dict, RunDir]]  # the finished runs of the other grids of the runs folder, with their configs


class GridDir:
    """One grid's run directory. Paths are attributes; the manifest, the runs and their states are methods."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.manifest_file = self.path / MANIFEST
        self.export_history_file = self.path / EXPORT_HISTORY
        self.report_file = self.path / "report.md"
        self.index_file = self.path / "index.html"
        self.plots_dir = self.path / "plots"

    @classmethod
    def of(cls, runs_dir: str | Path, grid: str) -> GridDir:
        """Where a grid named `grid` keeps its runs under RUNS_DIR."""
        return cls(Path(runs_dir) / grid)

    def __repr__(self) -> str:
        return f"GridDir({str(self.path)!r})"

    @property
    def name(self) -> str:
        return self.path.name

    def is_grid(self) -> bool:
        return self.manifest_file.is_file()

    # ------------------------------------------------------------------ manifest
    def read_manifest(self) -> dict:
        """The manifest in the current version (older ones migrated); FileNotFoundError naming the grids below a
        folder that is not itself a grid directory."""
        if not self.is_grid():
            grids = sorted(p.parent.name for p in self.path.glob(f"*/{MANIFEST}"))
            hint = f"; grids under it: {grids}" if grids else ""
            raise FileNotFoundError(f"{self.path} is not a grid run directory (no {MANIFEST}){hint}")
        return migrate_manifest(read_yaml(self.manifest_file), self.manifest_file)

    def write_manifest(self, manifest: dict, provenance: dict) -> None:
        """The grid's manifest in the current version, with the provenance of the process that runs it."""
        atomic_write(self.manifest_file, yaml.safe_dump(
            {"version": MANIFEST_VERSION, **manifest, "provenance": provenance}, sort_keys=False))

    def write_claims(self, claims: list[dict]) -> None:
        """Replace the claims the manifest stores, leaving the rest of it as written (any version)."""
        manifest = read_yaml(self.manifest_file)
        atomic_write(self.manifest_file, yaml.safe_dump({**manifest, "claims": claims}, sort_keys=False))

    # ------------------------------------------------------------------ runs
    def run_dir(self, cell: str, seed: int) -> RunDir:
        return RunDir(self.path / cell / f"{SEED_PREFIX}{seed}")

    def runs(self, cells: Iterable[str]) -> Iterator[tuple[str, int, RunDir]]:
        """(cell, seed, run) of every run directory of the given cells, cells in the order given, seeds ascending."""
        for cell in cells:
            seeds = sorted(int(d.name.removeprefix(SEED_PREFIX)) for d in (self.path / cell).glob(f"{SEED_PREFIX}*")
                           if d.is_dir() and d.name.removeprefix(SEED_PREFIX).isdigit())
            for seed in seeds:
                yield cell, seed, self.run_dir(cell, seed)

    def all_runs(self) -> list[tuple[str, int, RunDir]]:
        """Every run directory, whatever the manifest lists (a results folder being merged has no cells of its own)."""
        cells = sorted(d.name for d in self.path.iterdir() if d.is_dir()) if self.path.is_dir() else []
        return list(self.runs(cells))

    def finished_runs(self) -> list[tuple[str, int, RunDir]]:
        """(cell, seed, run) of the runs whose summary says done or diverged, in a stable order."""
        return [(cell, seed, run) for cell, seed, run in self.all_runs() if run_state(run) in FINISHED]

    def survey(self, runs: Iterable[tuple[str, int]]) -> FolderState:
        """The state of the `runs` (cell, seed) of the grid, read once for a round: each folder (followed through its
        link), the final loss of every finished one, and the finished runs of the other grids of the runs folder (a
        run not started yet is shared with one of the same identity)."""
        elsewhere = [(config, trained) for trained in finished_elsewhere(self.path.parent, self)
                     if (config := trained.read_experiment()) is not None]
        states: dict[tuple[str, int], RunState] = {}
        finals: dict[str, dict[int, float | None]] = {}
        for cell, seed in runs:
            run = self.run_dir(cell, seed)
            if not run.path.exists():  # not started, or a link whose run was deleted since
                states[cell, seed] = state = RunState(run)
            else:
                states[cell, seed] = state = RunState(
                    run, True, RunDir(run.path.resolve()) if run.path.is_symlink() else None, run.read_summary() or {},
                    run.read_experiment(), run.lock_holder(), run.has_training_output(), run.has_checkpoint(),
                    frozenset(run.kept_steps()))
            if state.status in FINISHED:
                finals.setdefault(cell, {})[seed] = state.summary.get("final_val_loss") if state.status == "done" else None
        return FolderState(self.path, states, finals, elsewhere)

    def prepare(self, manifest: dict, provenance: dict,
                runs: Iterable[tuple[RunDir, dict, RunDir | None, tuple[RunDir, int, str] | None]]) -> None:
        """Make the folder ready for a round's jobs: the manifest, with the provenance of the process that runs it,
        then each run's folder (run, its config, the run it shares or None, the trunk it branches from or None:
        RunDir.ready)."""
        self.write_manifest(manifest, provenance)
        for run, config, shared, branch in runs:
            run.ready(config, shared, branch)

    # ------------------------------------------------------------------ runs shared with other grids
    def share(self, cell: str, seed: int, trained: RunDir) -> RunDir:
        """Make <cell>/seed<k> a relative symbolic link to a run trained elsewhere with the same config
        (RunDir.link_to): it is read through the link as if it were this grid's own, and trained once."""
        run = self.run_dir(cell, seed)
        run.link_to(trained)
        return run

    def broken_links(self) -> list[tuple[Path, str]]:
        """(entry, target as written) of every <cell>/seed<k> that is a link to a run that is not there."""
        cells = sorted(d for d in self.path.iterdir() if d.is_dir()) if self.path.is_dir() else []
        return [(entry, os.readlink(entry)) for cell in cells for entry in sorted(cell.glob(f"{SEED_PREFIX}*"))
                if entry.is_symlink() and not entry.exists()]

    def check_links(self) -> None:
        """Refuse a grid folder whose shared runs do not resolve (BrokenSharedRun), naming the first and the remedy:
        every reader of results (report, claims, export) calls this before it reads a run."""
        broken = self.broken_links()
        if broken:
            entry, target = broken[0]
            more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
            raise BrokenSharedRun(
                f"{self.path}: {entry.relative_to(self.path).as_posix()} links to {target}, which is not there{more}: "
                "this grid shares runs stored once in another grid's folder; copy the results folder whole following "
                "links (cp -rL), or take the grid with `lit-resformer export-results`")

    def shared_from(self, cell: str, seed: int) -> RunDir | None:
        """The run <cell>/seed<k> is shared with (None: it is this grid's own); its summary names where it trained."""
        link = self.run_dir(cell, seed).path
        return RunDir(link.resolve()) if link.is_symlink() else None

    def relative(self, run: RunDir) -> str:
        """`<cell>/seed<k>`: how a run is named inside its grid (and in an export's list of runs)."""
        return run.path.relative_to(self.path).as_posix()

    def progress(self, cells: Iterable[str], seeds: Iterable[int]) -> dict[str, list[tuple[str, int]]]:
        """The plan as it stands, by state: every cell at the grid's `seeds`, and every other run folder of the cells
        (the runner makes a folder for each run it plans: a select block's confirmation seeds once their value is
        chosen; a cell at a seed that no plan asked for is not counted as pending)."""
        seeds = set(seeds)
        plan: dict[str, list[tuple[str, int]]] = {}
        for cell in cells:
            for seed in sorted(seeds | {seed for _, seed, _ in self.runs([cell])}):
                plan.setdefault(run_state(self.run_dir(cell, seed)), []).append((cell, seed))
        return plan

    # ------------------------------------------------------------------ where the runs trained
    def trained_on(self) -> str:
        """Where a results folder's runs trained: the distinct notes of the exports merged into it, in merge
        order; "" for a run directory trained in place."""
        if not self.export_history_file.is_file():
            return ""
        notes = [entry.get("note") or "not recorded" for entry in json.loads(self.export_history_file.read_text())]
        return "; ".join(dict.fromkeys(notes))


def run_state(run: RunDir) -> str:
    """A run's status as its summary says it (running | done | failed | diverged | interrupted), else pending."""
    return (run.read_summary() or {}).get("status") or "pending"


def finished_elsewhere(runs_dir: str | Path, grid: GridDir) -> Iterator[RunDir]:
    """Every finished run trained in another grid under RUNS_DIR (not through a link: each run once), the
    candidates a new run may be shared with."""
    for other in sorted(Path(runs_dir).glob(f"*/{MANIFEST}")):
        if other.parent.resolve() == grid.path.resolve():
            continue
        for _, _, run in GridDir(other.parent).all_runs():
            if not run.path.is_symlink() and run_state(run) in FINISHED:
                yield run


def grid_dirs(paths: Iterable[str | Path], kind: str = "grid run directory",
              marked: Callable[[dict], bool] | None = None) -> list[GridDir]:
    """Grid run directories: each path is one (it holds a manifest) or a folder of them; within a folder only those
    whose manifest `marked` accepts, when given (`kind` says which, in the error of a folder without any)."""
    found = []
    for path in map(Path, paths):
        if GridDir(path).is_grid():
            found.append(GridDir(path))
            continue
        inside = [GridDir(p.parent) for p in sorted(path.glob(f"*/{MANIFEST}"))]
        inside = [g for g in inside if marked is None or marked(g.read_manifest())]
        if not inside:
            raise FileNotFoundError(f"{path} holds no {kind} (no such {MANIFEST} in it or in its folders)")
        found += inside
    return found


def grid_index(grids: Iterable[GridDir]) -> dict[str, GridDir]:
    """Grid name (its manifest's) -> folder, for the grids given: what a comparison of shared runs may be judged in
    (lit_resformer.verdicts.judgements.Judgements). Two folders of one name are refused: which would judge is unclear."""
    index: dict[str, GridDir] = {}
    for grid in grids:
        name = grid.read_manifest()["name"]
        if name in index and index[name].path.resolve() != grid.path.resolve():
            raise ValueError(f"two grid folders named {name!r}: {index[name].path} and {grid.path}; give one of them")
        index[name] = grid
    return index


def check_run_config(found: RunState, config: dict, run_name: str, same_run: SameRun) -> None:
    """Refuse to reuse a run directory (as GridDir.survey found it) whose run was made with another config."""
    if found.config is None:
        return
    if not same_run(found.config, config, found.status in FINISHED):
        diff = config_differences(found.config, config)
        shown = "; ".join(diff[:5]) + (f"; ... ({len(diff)} differences)" if len(diff) > 5 else "")
        raise RunConflict(
            f"run {run_name} in {found.run_dir.path} was made with a different config ({shown}); "
            f"delete that directory or use another --runs-dir"
        )
