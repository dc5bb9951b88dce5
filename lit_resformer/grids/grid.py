"""The expanded grid: its cells, the runs they make, what a `select:` block adds once its pilot has chosen, and what
happens to each run in a round given the state of its folder (Grid.plan). `load_grid` (lit_resformer.grids.spec)
reads a grid file into a `Grid`; the runner works on that."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lit_resformer.config.diff import changed_fields
from lit_resformer.grids.selection import Choice, Selection
from lit_resformer.runs import identity
from lit_resformer.runs.directory import FolderState, check_run_config, run_state
from lit_resformer.runs.identity import Twins
from lit_resformer.runs.run_dir import FINISHED, RunConflict, RunDir

if TYPE_CHECKING:  # Lightning's parser, imported by load_grid only: reading a grid's claims needs none of it
    from lit_resformer.training.config_checker import ConfigChecker


class GridError(ValueError):
    """A grid file that cannot be run; the message names the problem."""


@dataclass(frozen=True)
class Cell:
    name: str
    overrides: dict[str, Any]  # dotted key -> value: the cell's own overrides plus its matrix values
    baseline: str  # the cell this one is compared with in the report
    family: str | None = None  # the `cells` entry it came from (None for matrix-only grids)
    coords: dict[str, Any] = field(default_factory=dict)  # matrix key -> value
    at: dict[str, Any] = field(default_factory=dict)  # a `select:` block's chosen point it trains at (key -> value)
    trunk: str | None = None  # a `ladder:` rung: the trunk cell it branches from (at its model.decay_start)


@dataclass(frozen=True)
class BranchPoint:
    """Where a ladder rung leaves its trunk."""

    trunk: str  # the trunk cell
    step: int  # the rung's decay start


@dataclass(frozen=True)
class Run:
    grid: str
    cell: str
    seed: int
    config: dict  # the experiment config with the grid's overrides applied, ready to be written as YAML
    resolved: dict | None = field(default=None, compare=False, repr=False)  # every field's value (load_grid's check)

    @property
    def name(self) -> str:
        return f"{self.grid}/{self.cell}/seed{self.seed}"


@dataclass
class PlannedRun:
    """What happens to a run in a round (Grid.plan)."""

    run: Run
    run_dir: RunDir  # the grid's own entry <cell>/seed<k>
    action: str  # what will happen, for --dry-run and the log
    train: bool  # False: training is finished (done or diverged)
    post_training: list[str]  # eval/analysis steps still to run on it
    busy: bool = False  # another process holds the run's lock
    shared: RunDir | None = None  # the same run trained elsewhere: the run directory becomes a link to it
    selected: bool = False  # added by the grid's `select:` block
    waits: str = ""  # why a ladder rung cannot start yet ("" when it can, or is no rung)
    branch: tuple[RunDir, int, str] | None = None  # a rung that starts now: (its trunk's run, the step, the trunk's name)


@dataclass
class RoundPlan:
    """A round of the grid (Grid.plan): what happens to each run, and the grid as its manifest records it then."""

    runs: list[PlannedRun]
    manifest: dict  # Grid.manifest, with the cells a `select:` block added so far
    changes: dict[str, dict[str, tuple[Any, Any]]]  # Grid.changes: what each cell changes relative to the base
    precision: str  # the cells' trainer precision(s), and the first cell's accelerator: where the runner runs them
    accelerator: str


@dataclass
class Grid:
    name: str
    path: Path
    base_paths: list[Path]
    baseline: str
    seeds: list[int]
    cells: list[Cell]
    overrides: dict[str, Any]
    description: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    configs: dict[str, dict] = field(default_factory=dict)  # cell name -> its config as written (no seed)
    resolved: dict[str, dict] = field(default_factory=dict, repr=False)  # cell name -> every field's value (no seed)
    claims: list[dict] = field(default_factory=list)  # checked `claims:` entries (lit_resformer.runs.claim_spec.Claim)
    checker: ConfigChecker | None = field(default=None, repr=False)  # the parser and checks of `fit`
    base: dict = field(default_factory=dict, repr=False)  # the base experiment, its configs merged
    selection: Selection | None = None  # the `select:` block (lit_resformer.grids.selection)
    families: dict[str, dict] = field(default_factory=dict, repr=False)  # `cells` entry -> its own overrides
    forced: dict[str, Any] = field(default_factory=dict, repr=False)  # --set: wins over every cell's overrides
    ladder: dict | None = None  # the `ladder:` block as the manifest records it (lit_resformer.grids.spec.Ladder)
    run_keys: list[tuple[str, int]] = field(default_factory=list, repr=False)  # (cell, seed) of every run it may train
    branch_points: dict[str, BranchPoint] = field(default_factory=dict, repr=False)  # ladder rung -> where it branches
    # the cells a `select:` block's at_best adds at each value its arm may choose (each with `at` set); the grid
    # takes those of the chosen value (chosen_runs)
    at_best_cells: list[Cell] = field(default_factory=list, repr=False)
    # at_best cell -> (its config as written, resolved): checked by load_grid, entered in `configs` once chosen
    at_best_configs: dict[str, tuple[dict, dict]] = field(default_factory=dict, repr=False)
    # a config as written (JSON) -> its resolved form (None: it no longer validates); load_grid's cells and the runs
    # are entered as they are made, so that only a config from elsewhere (another grid's run) is ever resolved again
    _known: dict[str, dict | None] = field(default_factory=dict, init=False, repr=False)
    _base_identity: dict | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._known.update((_written(self.configs[cell]), resolved) for cell, resolved in self.resolved.items())
        self._known.update((_written(config), resolved) for config, resolved in self.at_best_configs.values())

    def resolve(self, config: dict) -> dict | None:
        """Every field of `config` with its value, defaults included; None for a config that no longer validates."""
        key = _written(config)
        if key not in self._known:
            try:
                self._known[key] = self.checker.resolved(config)
            except (argparse.ArgumentError, ValueError):
                self._known[key] = None
        return self._known[key]

    def same_run(self, old: dict, new: dict, finished: bool = False) -> bool:
        """Whether two configs run the same: equal run identities (run_identity), and for a run not `finished`
        equal placement too (it resumes where it started). A finished run's results stand wherever they came from (a
        slice on a lent GPU, merged into a folder that a CPU run of the same grid then completes). A config that no
        longer validates runs differently."""
        if old == new:
            return True
        old, new = self.resolve(old), self.resolve(new)
        if old is None or new is None:
            return False
        return identity.run_identity(old) == identity.run_identity(new) and (
            finished or identity.placement(old) == identity.placement(new))

    def identity(self, config: dict) -> str | None:
        """run_identity of `config` as one string (seed included); None for a config that no longer validates (it is
        only itself). Two runs with the same identity train the same model on the same data order."""
        resolved = self.resolve(config)
        return None if resolved is None else json.dumps(identity.run_identity(resolved), sort_keys=True, default=str)

    def changes(self) -> dict[str, dict[str, tuple[Any, Any]]]:
        """cell name -> {dotted key: (base value, cell value)} for every field of the run identity (run_identity: where
        a run trains and writes left out, as no part of what it computes; the report's Provenance says where each run
        ran) that the cell sets to another value than the base experiment, defaults filled in on both sides: what the
        cell effectively changes, the grid's own overrides and values derived from others (e.g.
        trainer.accumulate_grad_batches) included. The cells' configs are those load_grid resolved; the base is
        resolved once."""
        if self._base_identity is None:
            try:
                base = self.checker.resolved(self.base)
            except ValueError:  # a base that does not run by itself: its cells fit the corpus's sequence length to the model
                base = self.checker.resolved(self.base, checked=False)
            self._base_identity = identity.run_identity(base)
        return {cell.name: changed_fields(self._base_identity, identity.run_identity(self.resolved[cell.name]))
                for cell in self.cells}

    def runs(self, seeds: Sequence[int] | None = None, cells: Sequence[str] | None = None) -> list[Run]:
        """One run per (cell, seed), cells in grid order (or `cells`' order), seeds inner. Without `cells`: the cells
        load_grid made, not those a `select:` block adds (`chosen_runs`)."""
        chosen = list(self.seeds if seeds is None else seeds)
        names = [cell.name for cell in self.cells if not cell.at] if cells is None else cells
        runs = [
            Run(self.name, cell, seed, {**self.configs[cell], "seed_everything": seed},
                {**self.resolved[cell], "seed_everything": seed})  # the seed enters no check
            for cell in names
            for seed in chosen
        ]
        self._known.update((_written(run.config), run.resolved) for run in runs)
        return runs

    def branch_point(self, cell: str) -> BranchPoint | None:
        """Where a ladder rung leaves its trunk (None: the cell is no rung)."""
        return self.branch_points.get(cell)

    def pilot_cells(self, arm: str, per_value: Any = None) -> dict[Any, str]:
        """A `select:` arm's cells, by their value of the selected key (the grid's one matrix key; with the block's
        `per`, at `per_value` of it)."""
        selection = self.selection if self.selection.per is None else self.selection.at(per_value)
        return dict(selection.cells[arm])

    def chosen_runs(self, choice: Choice) -> list[Run]:
        """The runs a `select:` block's choice adds (Selection.choose), in a stable order: the confirmation seeds at
        each point that can train (a ladder rung's after its trunk's), then the at_best cells at the chosen value (each
        added to the grid the first time, its config resolved and checked as load_grid checks every cell)."""
        runs: dict[str, Run] = {}
        for cell in choice.confirm:
            trunk = [self.branch_points[cell].trunk] if cell in self.branch_points else []
            runs.update((run.name, run) for run in self.runs(self.selection.seeds, [*trunk, cell]))
        if choice.at_best is not None:
            cells = self._add_at_best(choice.at_best)
            runs.update((run.name, run) for run in self.runs(self.selection.at_best.seeds, cells))
        return list(runs.values())

    def plan(self, choice: Choice | None, state: FolderState, post_training: Sequence[str]) -> RoundPlan:
        """What happens to every run of the round: the grid's own and those its `select:` block's `choice` adds, given
        the folder's `state` (GridDir.survey). A run not started whose config another grid of the runs folder (or an
        earlier cell of this one) already trains is shared with that run, not trained again (runs.identity.Twins); a
        ladder rung starts from its trunk once the trunk has kept the checkpoint at the rung's decay start. Refuses
        (RunConflict) if any existing run directory holds a different config, checked for all runs before anything
        starts. In phases: the runs and the manifest, what happens to each run trained here, which are shared, the
        configs already in their folders."""
        # planning reads runs (pandas), which loading or refusing a grid never needs
        from lit_resformer.execution.jobs import post_training_result

        own = self.runs()
        added = {run.name: run for run in (self.chosen_runs(choice) if choice else []) if run not in own}
        runs = [*own, *added.values()]
        changes = self.changes()
        manifest = self.manifest(changes)
        here = {run.name: self._trained_here(run, state, post_training) for run in runs}
        twins = Twins(state.elsewhere, self.identity)
        shared: dict[str, RunDir | None] = {}
        for run in runs:
            found = state.runs[run.cell, run.seed]
            if not found.exists:  # not started, or a link whose run was deleted since
                shared[run.name] = twins.find(run.config, found.run_dir)
            else:  # trained here, or shared by an earlier call
                twins.register(run.config, found.shared or found.run_dir)
                shared[run.name] = found.shared
        conflicts = []
        for run in runs:
            found = state.runs[run.cell, run.seed]
            try:
                check_run_config(found, run.config, run.name, self.same_run)
            except RunConflict as e:
                conflicts.append(str(e))
        if conflicts:
            raise RunConflict("\n".join(conflicts))
        planned = []
        for run in runs:
            found, link = state.runs[run.cell, run.seed], shared[run.name]
            if link is None:
                planned.append(dataclasses.replace(here[run.name], selected=run.name in added))
                continue
            # a run of this grid does its own post-training steps; one finished elsewhere gets those it lacks here
            in_grid = state.path.resolve() in link.path.resolve().parents
            pending = [] if in_grid else [k for k in post_training if run_state(link) == "done"
                                          and not post_training_result(k, link).is_file()]
            trained_as = os.path.relpath(link.path, state.path.parent)  # <grid>/<cell>/seed<k> in the runs folder
            planned.append(PlannedRun(run, found.run_dir, f"shared: trained as {trained_as}", False, pending,
                                      shared=link, selected=run.name in added))
        trainers = [self.configs[cell.name].get("trainer") or {} for cell in self.cells]
        return RoundPlan(planned, manifest, changes,
                         ", ".join(dict.fromkeys(str(t.get("precision", "32-true")) for t in trainers)),
                         str(trainers[0].get("accelerator", "auto")))

    def _trained_here(self, run: Run, state: FolderState, post_training: Sequence[str]) -> PlannedRun:
        """What happens to a run trained in its own folder (see plan)."""
        from lit_resformer.execution.jobs import post_training_result  # as in plan
        from lit_resformer.runs.summary import last_step

        found = state.runs[run.cell, run.seed]
        status = found.summary.get("status")
        if found.lock_holder is not None:  # another runner trains it (or evaluates it): leave it to that runner
            return PlannedRun(run, found.run_dir, f"skip: busy (locked by {found.lock_holder})", False, [], busy=True)
        if status == "done":
            action = "skip: done"
        elif status == "diverged":
            action = f"skip: diverged at step {found.summary.get('diverged_step')}"
        elif found.checkpointed:
            action = f"resume from checkpoint (logged up to step {last_step(found.run_dir)})"
        elif status in ("failed", "interrupted", "running"):
            action = f"retry ({status}{': ' + found.summary['error'] if found.summary.get('error') else ''})"
        else:
            action = "run"
        train = status not in FINISHED
        pending = [k for k in post_training
                   if (train or status == "done") and not post_training_result(k, found.run_dir).is_file()]
        point = self.branch_points.get(run.cell)
        waits, branch = "", None
        if train and point is not None and not found.started:
            trunk = state.runs[point.trunk, run.seed]
            trunk_name = f"{self.name}/{point.trunk}/seed{run.seed}"
            if point.step in trunk.kept_steps:
                branch = (trunk.shared or trunk.run_dir, point.step, trunk_name)
            else:
                waits = f"waits for its trunk {trunk_name} to reach step {point.step}"
        return PlannedRun(run, found.run_dir, action, train, pending, waits=waits, branch=branch)

    def _add_at_best(self, value: Any) -> list[str]:
        """The at_best cells at the chosen `value` (added to the grid the first time, with the configs load_grid
        checked), by name."""
        cells = [c for c in self.at_best_cells if c.at[self.selection.over] == value]
        for cell in cells:
            if cell.name not in self.configs:
                self.cells.append(cell)
                self.configs[cell.name], self.resolved[cell.name] = self.at_best_configs[cell.name]
        return [c.name for c in cells]

    def manifest(self, changes: dict[str, dict[str, tuple[Any, Any]]] | None = None) -> dict:
        """What the report needs to know about the grid, written next to its runs (`changes`: Grid.changes, if the
        caller has it)."""
        changes = self.changes() if changes is None else changes
        return {
            "name": self.name,
            "description": self.description,
            "grid_file": _as_typed(self.path.resolve()),
            "base": " + ".join(_as_typed(p) for p in self.base_paths),
            "baseline": self.baseline,
            "seeds": self.seeds,
            "overrides": self.overrides,
            "matrix_keys": sorted({k for c in self.cells for k in c.coords}),
            "report": self.report,
            "cells": [{**{k: v for k, v in dataclasses.asdict(c).items() if k not in ("at", "trunk") or v},
                       "changes": {k: list(v) for k, v in changes[c.name].items()}} for c in self.cells],
            "claims": self.claims,
            **({"select": self.selection.to_dict()} if self.selection else {}),
            **({"ladder": self.ladder} if self.ladder else {}),
        }


def _written(config: dict) -> str:
    """A config as written, as a key."""
    return json.dumps(config, sort_keys=True, default=str)


def _as_typed(path: Path) -> str:
    """A resolved path as the user would type it from where the grid ran: relative when under the working
    directory, so a report read on another machine names the repository's file, not this machine's folder."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
