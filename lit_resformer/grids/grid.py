"""The expanded grid: its cells, the runs they make, and what a `select:` block adds once its pilot has chosen.
`load_grid` (lit_resformer.grids.spec) reads a grid file into a `Grid`; the runner works on that."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lit_resformer.config.diff import changed_fields
from lit_resformer.grids.selection import Selection, SelectionError, best_point
from lit_resformer.runs import identity

if TYPE_CHECKING:  # Lightning's parser, imported by load_grid only: reading a grid's claims needs none of it
    from lit_resformer.grids.spec import Ladder
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
    ladder: Ladder | None = None  # the `ladder:` block (lit_resformer.grids.spec.Ladder)
    branch_points: dict[str, BranchPoint] = field(default_factory=dict, repr=False)  # ladder rung -> where it branches
    # the cells a `select:` block's at_best adds at each value its arm may choose (each with `at` set); the grid
    # takes those of the chosen value (chosen_runs)
    at_best_cells: list[Cell] = field(default_factory=list, repr=False)
    # a config as written (JSON) -> its resolved form (None: it no longer validates); load_grid's cells and the runs
    # are entered as they are made, so that only a config from elsewhere (another grid's run) is ever resolved again
    _known: dict[str, dict | None] = field(default_factory=dict, init=False, repr=False)
    _base_identity: dict | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._known.update((_written(self.configs[cell]), resolved) for cell, resolved in self.resolved.items())

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

    def pilot_cells(self, arm: str) -> dict[Any, str]:
        """A `select:` arm's cells, by their value of the selected key (the grid's one matrix key)."""
        over = self.selection.over
        return {cell.coords[over]: cell.name for cell in self.cells if cell.family == arm and not cell.at}

    def chosen_runs(self, finals: Mapping[str, Mapping[int, float | None]]) -> tuple[list[Run], dict[str, Any], list[str]]:
        """What the `select:` block adds once its pilot runs are finished (`finals`: cell -> seed -> final validation
        loss of each finished run, None for a diverged one): (the runs at the chosen points, in a stable order; the
        arms chosen so far, arm -> value; a line for each addition still waiting, saying for what). Each at_best cell
        is added to the grid (its config resolved and checked as load_grid checks every cell) when its point is
        chosen. GridError (naming the arm and its best point) when an arm's best is at an end of the swept range."""
        selection = self.selection
        if selection is None:
            return [], {}, []
        best, waiting = {}, []
        for arm in selection.arms:
            cells = self.pilot_cells(arm)
            by_value = {value: finals.get(cell, {}) for value, cell in cells.items()}
            try:
                chosen = best_point(selection, arm, by_value)
            except SelectionError as e:
                raise GridError(f"{self.path}: select: {e}") from None
            if chosen is None:
                done = sum(seed in by_value[value] for value in cells for seed in selection.pilot_seeds)
                waiting.append(f"{arm}'s best {selection.over}: waits for its pilot runs ({done} of "
                               f"{len(cells) * len(selection.pilot_seeds)} finished)")
            else:
                best[arm] = chosen
        runs: dict[str, Run] = {}
        for arm, points in selection.confirm.items():
            for point in points:
                needed = selection.needs(point, arm)
                if needed is not None and needed not in best:
                    waiting.append(f"{arm} at {point}: confirmation seeds {list(selection.seeds)} wait for {needed}'s "
                                   "best")
                    continue
                cell = self.pilot_cells(arm)[next(v for v in self.pilot_cells(arm)
                                                  if math.isclose(v, selection.point(point, arm, best)))]
                runs.update((run.name, run) for run in self.runs(selection.seeds, [cell]))
        at_best = selection.at_best
        if at_best is not None and at_best.of in best:
            cells = self._add_at_best(best[at_best.of])
            runs.update((run.name, run) for run in self.runs(at_best.seeds, cells))
        elif at_best is not None:
            waiting.append(f"{', '.join(at_best.families)} at {at_best.of}'s best {selection.over} x "
                           f"{', '.join(at_best.matrix)}: wait for {at_best.of}'s best")
        return list(runs.values()), best, waiting

    def _add_at_best(self, value: Any) -> list[str]:
        """The at_best cells at the chosen `value` (added to the grid the first time), by name."""
        cells = [c for c in self.at_best_cells if c.at[self.selection.over] == value]
        new = [c for c in cells if c.name not in self.configs]
        overrides = {k: v for k, v in self.overrides.items() if k not in self.forced}
        from lit_resformer.training.config_checker import CellConfigError  # loaded with the grid's checker

        try:
            configs, resolved = self.checker.cell_configs(self.base, overrides, {c.name: c.overrides for c in new},
                                                          self.forced, f"{self.path}: select.at_best")
        except CellConfigError as e:
            raise GridError(str(e)) from None
        self.cells += new
        self.configs.update(configs)
        self.resolved.update(resolved)
        self._known.update((_written(configs[name]), resolved[name]) for name in configs)
        return [c.name for c in cells]

    def manifest(self) -> dict:
        """What the report needs to know about the grid, written next to its runs."""
        changes = self.changes()
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
            **({"ladder": self.ladder.to_dict()} if self.ladder else {}),
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
