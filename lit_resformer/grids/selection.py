"""A grid's `select:` block: each arm's best point of a swept matrix key, chosen from pilot runs by a rule declared in
the grid file before any run, and the runs that then train at the chosen points.

    seeds: [0, 1]                          # the pilot seeds: every cell of the grid trains them
    matrix:
      model.lr: [5.0e-4, 1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3]
    select:
      over: model.lr                       # the swept matrix key
      arms: [vanilla, resformer, svformer] # `cells` entries whose best point is chosen (and bracket-checked)
      seeds: [2, 3, 4, 5, 6]               # the confirmation seeds, none of them a pilot seed
      confirm:                             # arm -> the points of `over` that train the confirmation seeds:
        vanilla: [best, 2.0e-3]            #   best: the arm's own best; best:<arm>: that arm's; a value of the matrix
        resformer: [best, best:vanilla, 2.0e-3]
      per: trainer.max_steps               # optional, a ladder's grid: the point is chosen at each budget apart
      at_best:                             # optional: cells that exist only at a chosen point (e.g. a warm-up axis)
        of: vanilla                        #   whose best point of `over` they train at
        cells: [vanilla, svformer]         #   `cells` entries
        matrix: {model.warmup_steps: [40, 160, 640]}
        seeds: [0, 1, 2, 3, 4]

The rule (SELECTION_RULE): an arm's best point is the value of `over` with the lowest mean final validation loss over
the pilot seeds; a diverged run, or one that logged no final loss, counts as worse than any finished one. It is
chosen only once every pilot run of the arm is finished (done or diverged), so the choice never changes as runs
come in. Its best point must be interior: at either end of the swept range the optimum may lie outside it, and the
grid fails (BracketError names the arm, its best point and the range) until the range is widened (new cells; the
finished pilot runs keep their identities).

With `per` (a ladder's budgets, lit_resformer.grids.spec.Ladder: the grid's other matrix key), each arm's point is
chosen at each value of `per` on its own, by the same rule and bracket check: the best peak learning rate falls as
the token budget grows, so a rate chosen at one budget is not the best at another. The confirmation seeds then train,
at each budget, the rung at the arm's point chosen there (and its trunk).

The confirmation seeds are not the pilot seeds that chose the point, so a comparison of arms at their chosen points
on the confirmation seeds is not biased by the choice (the winner's curse of the pilot's noise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lit_resformer.runs.claim_spec import AT_B_BEST, EACH_AT_BEST_SLOPE, SELECTED_METRICS

SELECT_FIELDS = {"over", "arms", "seeds", "confirm", "at_best", "per"}
AT_BEST_FIELDS = {"of", "cells", "matrix", "seeds"}
BEST = "best"
SELECTION_RULE = ("the value with the lowest mean final validation loss over the pilot seeds (a diverged run counts "
                  "as worse than any finished one), chosen once all the arm's pilot runs are finished")


class SelectionError(ValueError):
    """A `select:` block that cannot be used; the message names the field."""


class BracketError(SelectionError):
    """An arm's best point sits at an end of the swept range: its optimum may lie outside it."""


@dataclass(frozen=True)
class AtBest:
    """Cells that train at an arm's chosen point: `families` x the points of `matrix`, at `seeds`."""

    of: str
    families: tuple[str, ...]
    matrix: dict  # a matrix as a grid's `matrix:` writes it (expanded by the grid spec)
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Choice:
    """What a `select:` block adds once its pilot runs are finished (Selection.choose)."""

    # arm -> its chosen value of `over`, for the arms chosen so far; with `per`: arm -> value of per -> chosen value
    best: dict[str, Any]
    confirm: list[str]  # the cells that train the confirmation seeds now
    at_best: Any = None  # the value the at_best cells train at (None: not chosen yet, or no at_best)
    waiting: list[str] = field(default_factory=list)  # a line for each addition still waiting, saying for what


@dataclass(frozen=True)
class Selection:
    over: str
    arms: tuple[str, ...]
    seeds: tuple[int, ...]  # confirmation seeds
    confirm: dict[str, tuple]  # arm -> its points: "best", "best:<arm>", or a value of `over`
    pilot_seeds: tuple[int, ...]
    at_best: AtBest | None = None
    values: tuple = field(default=())  # the swept values of `over`, ascending
    # arm -> swept value -> its pilot cell (set by load_grid; a manifest's selection has none); with `per`:
    # value of per -> arm -> swept value -> its pilot cell there (`cells` then empty)
    cells: Mapping[str, Mapping[Any, str]] = field(default_factory=dict, compare=False, repr=False)
    per: str | None = None  # the matrix key at each of whose values the point is chosen apart (a ladder's budgets)
    per_values: tuple = field(default=())  # its values, ascending
    cells_per: Mapping[Any, Mapping[str, Mapping[Any, str]]] = field(default_factory=dict, compare=False, repr=False)

    def at(self, per_value: Any) -> Selection:
        """The selection at one value of `per`: a selection without `per` over the cells there."""
        return replace(self, per=None, per_values=(), cells=self.cells_per[per_value], cells_per={})

    def candidate_cells(self, arm: str) -> list[str]:
        """Every cell of `arm` a choice may train the confirmation seeds in."""
        if self.per is None:
            return list(self.cells[arm].values())
        return [cell for by_arm in self.cells_per.values() for cell in by_arm[arm].values()]

    def to_dict(self) -> dict:
        """As a grid's manifest records it (from_dict reads it back)."""
        return {"over": self.over, "arms": list(self.arms), "seeds": list(self.seeds),
                "pilot_seeds": list(self.pilot_seeds), "values": list(self.values), "rule": SELECTION_RULE,
                "confirm": {arm: list(points) for arm, points in self.confirm.items()},
                **({"per": self.per, "per_values": list(self.per_values)} if self.per else {}),
                **({"at_best": {"of": self.at_best.of, "cells": list(self.at_best.families),
                                "matrix": self.at_best.matrix, "seeds": list(self.at_best.seeds)}}
                   if self.at_best else {})}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Selection:
        at_best = raw.get("at_best")
        return cls(raw["over"], tuple(raw["arms"]), tuple(raw["seeds"]),
                   {arm: tuple(points) for arm, points in raw["confirm"].items()}, tuple(raw["pilot_seeds"]),
                   AtBest(at_best["of"], tuple(at_best["cells"]), at_best["matrix"], tuple(at_best["seeds"]))
                   if at_best else None, tuple(raw["values"]), per=raw.get("per"),
                   per_values=tuple(raw.get("per_values") or ()))

    def choose(self, finals: Mapping[str, Mapping[int, float | None]]) -> Choice:
        """What the block adds given its pilot runs (`finals`: cell -> seed -> final validation loss of each finished
        run, None for a diverged one): each arm's best point once its pilot is finished (best_point; BracketError at
        an end of the range), the confirmation points that can train, the at_best point, and what still waits. With
        `per`, all of it at each value of `per` apart (BracketError names the value)."""
        if self.per is None:
            return self._choose(finals)
        best: dict[str, dict] = {arm: {} for arm in self.arms}
        confirm, waiting = [], []
        for per_value in self.per_values:
            try:
                choice = self.at(per_value)._choose(finals)
            except BracketError as err:
                raise BracketError(f"at {self.per}={per_value:g}: {err}") from None
            for arm, value in choice.best.items():
                best[arm][per_value] = value
            confirm += [cell for cell in choice.confirm if cell not in confirm]
            waiting += [f"at {self.per}={per_value:g}: {line}" for line in choice.waiting]
        return Choice({arm: chosen for arm, chosen in best.items() if chosen}, confirm, None, waiting)

    def _choose(self, finals: Mapping[str, Mapping[int, float | None]]) -> Choice:
        best, waiting = {}, []
        for arm in self.arms:
            by_value = {value: finals.get(cell, {}) for value, cell in self.cells[arm].items()}
            chosen = best_point(self, arm, by_value)
            if chosen is None:
                done = sum(seed in runs for runs in by_value.values() for seed in self.pilot_seeds)
                waiting.append(f"{arm}'s best {self.over}: waits for its pilot runs ({done} of "
                               f"{len(by_value) * len(self.pilot_seeds)} finished)")
            else:
                best[arm] = chosen
        confirm = []
        for arm, points in self.confirm.items():
            for point in points:
                needed = self.needs(point, arm)
                if needed is not None and needed not in best:
                    waiting.append(f"{arm} at {point}: confirmation seeds {list(self.seeds)} wait for {needed}'s best")
                    continue
                value = self.point(point, arm, best)
                confirm.append(next(cell for v, cell in self.cells[arm].items() if math.isclose(v, value)))
        at_best = None
        if self.at_best is not None and self.at_best.of in best:
            at_best = best[self.at_best.of]
        elif self.at_best is not None:
            waiting.append(f"{', '.join(self.at_best.families)} at {self.at_best.of}'s best {self.over} x "
                           f"{', '.join(self.at_best.matrix)}: wait for {self.at_best.of}'s best")
        return Choice(best, confirm, at_best, waiting)

    def needs(self, point: Any, arm: str) -> str | None:
        """The arm whose choice a point of `arm` waits for (None: a fixed value)."""
        if point == BEST:
            return arm
        if isinstance(point, str) and point.startswith(BEST + ":"):
            return point.split(":", 1)[1]
        return None

    def point(self, point: Any, arm: str, best: Mapping[str, float]) -> float:
        """The value of `over` a confirm point names, given the arms chosen so far (`best`: arm -> value)."""
        needed = self.needs(point, arm)
        return point if needed is None else best[needed]


def parse_selection(raw: Any, families: Sequence[str], coordinates: Sequence[Mapping[str, Any]],
                    pilot_seeds: Sequence[int], claims: Sequence[Mapping[str, Any]], where: str) -> Selection | None:
    """Check a grid's `select:` block against its `cells` entries (`families`), its matrix (`coordinates`: each
    cell's), its seeds (the pilot's) and its checked `claims:` (a claim at chosen points compares arms at points
    the block trains the confirmation seeds at); SelectionError names the problem."""
    if raw is None:
        for index, claim in enumerate(claims):
            if claim["metric"] in SELECTED_METRICS:
                raise SelectionError(f"{where}: claims[{index}]: {claim['metric']} compares the points a `select:` "
                                     "block chooses; this grid has none")
        return None
    grid_where, where = where, f"{where}: select"
    if not isinstance(raw, dict) or set(raw) - SELECT_FIELDS or not {"over", "arms", "seeds"} <= set(raw):
        raise SelectionError(f"{where} must be a mapping with fields over, arms, seeds and optionally confirm, "
                             f"at_best; got {raw!r}")
    swept: dict[str, set] = {}
    for coords in coordinates:
        for key, value in coords.items():
            swept.setdefault(key, set()).add(value)
    per = raw.get("per")
    if per is not None and per not in swept:
        raise SelectionError(f"{where}.per must name a matrix key of this grid ({sorted(swept) or 'it has none'}), "
                             f"got {per!r}")
    per_values = tuple(sorted(swept.pop(per))) if per is not None else ()
    if len(swept) > 1:
        raise SelectionError(f"{where}: a grid with a select block sweeps one matrix key"
                             + (f" besides per ({per})" if per else "") + f", got {sorted(swept)}")
    over = raw["over"]
    values = sorted(swept[over]) if over in swept else None
    if values is None:
        raise SelectionError(f"{where}.over must name a matrix key of this grid ({sorted(swept) or 'it has none'}), "
                             f"got {over!r}")
    if len(values) < 3 or not all(_is_number(v) for v in values):
        raise SelectionError(f"{where}.over: {over} needs at least three numeric values for a best point to be "
                             f"interior, got {values}")
    arms = _names(raw["arms"], families, f"{where}.arms")
    seeds = _seeds(raw["seeds"], f"{where}.seeds")
    overlap = sorted(set(seeds) & set(pilot_seeds))
    if overlap:
        raise SelectionError(f"{where}.seeds: {overlap} are pilot seeds (the grid's seeds {list(pilot_seeds)}); the "
                             "confirmation seeds must be new, so that the runs that chose a point do not judge it")
    confirm_raw = raw.get("confirm") or {}
    if not isinstance(confirm_raw, dict):
        raise SelectionError(f"{where}.confirm must map arms to lists of points, got {confirm_raw!r}")
    confirm = {}
    for arm, points in confirm_raw.items():
        _names([arm], arms, f"{where}.confirm")
        if not isinstance(points, list) or not points:
            raise SelectionError(f"{where}.confirm.{arm} must be a non-empty list of points, got {points!r}")
        for point in points:
            _check_point(point, arms, values, f"{where}.confirm.{arm}")
        confirm[arm] = tuple(points)
    at_best = None
    if raw.get("at_best") is not None:
        if per is not None:
            raise SelectionError(f"{where}: at_best and per do not combine (at_best trains at one chosen point)")
        at_best = _parse_at_best(raw["at_best"], families, arms, over, f"{where}.at_best")
    selection = Selection(over, tuple(arms), tuple(seeds), confirm, tuple(pilot_seeds), at_best, tuple(values),
                          per=per, per_values=per_values)
    for index, claim in enumerate(claims):
        if claim["metric"] == EACH_AT_BEST_SLOPE and claim.get("over") != per:
            raise SelectionError(f"{grid_where}: claims[{index}]: {EACH_AT_BEST_SLOPE} is taken along the key at each "
                                 f"of whose values the points are chosen, select.per ({per}); got over "
                                 f"{claim.get('over')!r}")
        if claim["metric"] in SELECTED_METRICS:
            a_point = f"{BEST}:{claim['b']}" if claim["metric"] == AT_B_BEST else BEST
            for side, point in ((claim["a"], a_point), (claim["b"], BEST)):
                if point not in confirm.get(side, ()):
                    raise SelectionError(f"{grid_where}: claims[{index}]: {claim['metric']} needs {side} "
                                         f"at {point!r} on the confirmation seeds; add it to select.confirm.{side}")
    return selection


def _parse_at_best(raw: Any, families: Sequence[str], arms: Sequence[str], over: str, where: str) -> AtBest:
    if not isinstance(raw, dict) or set(raw) != AT_BEST_FIELDS:
        raise SelectionError(f"{where} must be a mapping with fields {sorted(AT_BEST_FIELDS)}, got {raw!r}")
    if raw["of"] not in arms:
        raise SelectionError(f"{where}.of must be one of the arms {list(arms)}, got {raw['of']!r}")
    matrix = raw["matrix"]
    if not isinstance(matrix, dict) or not matrix or over in matrix:
        raise SelectionError(f"{where}.matrix must be a non-empty matrix of keys other than {over} (the point is the "
                             f"chosen one), got {matrix!r}")
    return AtBest(raw["of"], tuple(_names(raw["cells"], families, f"{where}.cells")), matrix,
                  tuple(_seeds(raw["seeds"], f"{where}.seeds")))


def _check_point(point: Any, arms: Sequence[str], values: Sequence, where: str) -> None:
    if point == BEST:
        return
    if isinstance(point, str) and point.startswith(BEST + ":"):
        if point.split(":", 1)[1] not in arms:
            raise SelectionError(f"{where}: {point!r} names no arm; arms: {list(arms)}")
        return
    if not any(_is_number(point) and math.isclose(point, v) for v in values):
        raise SelectionError(f"{where}: {point!r} is not 'best', 'best:<arm>' or a swept value {list(values)}")


def _names(raw: Any, allowed: Sequence[str], where: str) -> list[str]:
    if not isinstance(raw, list) or not raw or any(name not in allowed for name in raw) or len(set(raw)) < len(raw):
        raise SelectionError(f"{where} must be a list of distinct `cells` entries of this grid ({list(allowed)}), "
                             f"got {raw!r}")
    return list(raw)


def _seeds(raw: Any, where: str) -> list[int]:
    if (not isinstance(raw, list) or not raw or len(set(raw)) < len(raw)
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in raw)):
        raise SelectionError(f"{where} must be a non-empty list of distinct integers, got {raw!r}")
    return list(raw)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def best_point(selection: Selection, arm: str, finals: Mapping[Any, Mapping[int, float | None]]) -> float | None:
    """The arm's best value of `over` by SELECTION_RULE, from its pilot runs' final validation losses (`finals`: value
    -> seed -> loss, None for a diverged run or one without a final loss; only finished runs listed). None while a
    pilot run of the arm is unfinished. BracketError when the best is at an end of the swept range."""
    if any(seed not in finals.get(value, {}) for value in selection.values for seed in selection.pilot_seeds):
        return None
    means = {value: _mean([finals[value][seed] for seed in selection.pilot_seeds]) for value in selection.values}
    best = min(selection.values, key=lambda value: (means[value], value))
    if best in (selection.values[0], selection.values[-1]):
        shown = ", ".join(f"{value:g}: {means[value]:.4f}" for value in selection.values)
        raise BracketError(f"{arm}'s best {selection.over} is {best:g}, at an end of the swept range "
                           f"[{selection.values[0]:g}, {selection.values[-1]:g}] (mean final validation loss over "
                           f"pilot seeds {list(selection.pilot_seeds)}: {shown}); its optimum may lie outside the "
                           f"range: add a value beyond {best:g} to the matrix's {selection.over}")
    return best


def _mean(losses: Sequence[float | None]) -> float:
    """Their mean; infinite when a run diverged or logged no final loss (worse than any finished run)."""
    if any(loss is None or not math.isfinite(loss) for loss in losses):
        return math.inf
    return sum(losses) / len(losses)
