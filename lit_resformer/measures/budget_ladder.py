"""A ladder grid's rungs read as budgets (lit_resformer.grids.spec.Ladder): per seed, each arm's final validation loss at
the end of each rung's decay, a's gap to b and a's data saving at each budget, and their trends against log2 of the
budget, each with its t interval over seeds.

The data saving at budget B is 1 - B / B', where B' is the budget at which b's end-of-decay loss equals a's at B:
b's losses at the rungs, linear in log2 budget between rungs and extended along the first or last segment beyond
them (`extrapolated` counts where), so that a saving of s at every budget means a constant multiplier 1 / (1 - s)
on the data (the paper's "20.3% less data" read as one). A seed whose b losses do not fall at every rung has no
saving (the inverse is not defined). A trend is one least-squares line per seed against log2 budget; its
interval at a budget is the t interval over seeds of the seeds' lines there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from lit_resformer.measures.stats import SeedTest, per_seed_t
from lit_resformer.runs.results import GridResults, RunResult


@dataclass
class Rungs:
    """The two arms' finished runs at each budget (value of `over`), and their final validation losses."""

    over: str
    cells: dict[float, tuple[str, str]]  # budget -> (a's cell, b's cell)
    runs: dict[float, tuple[dict[int, RunResult], dict[int, RunResult]]]  # budget -> (a, b): seed -> run
    seeds: list[int]  # seeds finished at every rung by both arms

    @property
    def budgets(self) -> list[float]:
        return sorted(self.cells)

    def losses(self, side: int) -> dict[int, dict[float, float | None]]:
        """seed -> budget -> the final validation loss of that side's run (0: a, 1: b)."""
        return {seed: {b: self.runs[b][side][seed].final("val_loss") for b in self.budgets} for seed in self.seeds}

    def all_runs(self) -> list[RunResult]:
        return [run for b in self.budgets for side in self.runs[b] for seed, run in side.items() if seed in self.seeds]


def rungs(results: GridResults, a: str, b: str, over: str) -> Rungs:
    """The rungs of families a and b along `over`: their cells at equal coordinates."""
    info = results.cell_info
    cells = {}
    for name, cell in info.items():
        coords = cell.get("coords") or {}
        if cell.get("family") != a or over not in coords:
            continue
        twin = next((other for other, c in info.items() if c.get("family") == b and (c.get("coords") or {}) == coords),
                    None)
        if twin is not None:
            cells[coords[over]] = (name, twin)
    runs = {budget: (results.done.get(ca, {}), results.done.get(cb, {})) for budget, (ca, cb) in cells.items()}
    finished = [set(side) for pair in runs.values() for side in pair]
    seeds = sorted(set.intersection(*finished)) if finished else []
    return Rungs(over, cells, runs, seeds)


def budget_for_loss(losses: Mapping[float, float], loss: float) -> tuple[float | None, bool]:
    """(the budget at which a curve of end-of-decay `losses` (budget -> loss) reaches `loss`, whether that needed
    extending the curve beyond its rungs); None when the losses do not fall at every rung."""
    budgets = sorted(losses)
    x = [math.log2(b) for b in budgets]
    y = [losses[b] for b in budgets]
    if len(x) < 2 or any(later >= earlier for earlier, later in zip(y, y[1:], strict=False)):
        return None, False
    if loss > y[0]:
        i, outside = 0, True
    elif loss < y[-1]:
        i, outside = len(x) - 2, True
    else:
        i, outside = next(k for k in range(len(x) - 1) if y[k] >= loss >= y[k + 1]), False
    at = x[i] + (loss - y[i]) * (x[i + 1] - x[i]) / (y[i + 1] - y[i])
    return 2.0 ** at, outside


@dataclass
class Savings:
    per_seed: dict[int, dict[float, float]]  # seed -> budget -> saving 1 - B / B'
    extrapolated: int  # savings whose B' lies beyond b's rungs
    left_out: list[int] = field(default_factory=list)  # seeds whose b losses do not fall at every rung


def data_savings(rung: Rungs) -> Savings:
    """a's data saving against b at every rung, per seed."""
    a, b = rung.losses(0), rung.losses(1)
    per_seed, extrapolated, left_out = {}, 0, []
    for seed in rung.seeds:
        if any(v is None for v in (*a[seed].values(), *b[seed].values())):
            left_out.append(seed)
            continue
        savings = {}
        for budget in rung.budgets:
            matched, outside = budget_for_loss(b[seed], a[seed][budget])
            if matched is None:
                break
            savings[budget] = 1.0 - budget / matched
            extrapolated += outside
        if len(savings) == len(rung.budgets):
            per_seed[seed] = savings
        else:
            left_out.append(seed)
    return Savings(per_seed, extrapolated, left_out)


def gaps(rung: Rungs) -> dict[int, dict[float, float]]:
    """seed -> budget -> a's final validation loss minus b's."""
    a, b = rung.losses(0), rung.losses(1)
    return {seed: {budget: a[seed][budget] - b[seed][budget] for budget in rung.budgets}
            for seed in rung.seeds if all(v is not None for v in (*a[seed].values(), *b[seed].values()))}


def slopes(per_seed: Mapping[int, Mapping[float, float]]) -> dict[int, float]:
    """seed -> the least-squares slope of its values against log2 budget."""
    return {seed: float(np.polyfit([math.log2(b) for b in values], list(values.values()), 1)[0])
            for seed, values in per_seed.items() if len(values) >= 2}


def at_each_budget(per_seed: Mapping[int, Mapping[float, float]]) -> dict[float, SeedTest]:
    """budget -> the t interval over seeds of the values there (each seed's own a - b difference or saving: the
    seed's two runs share its data order, so this is the paired design)."""
    budgets = sorted({b for values in per_seed.values() for b in values})
    return {b: per_seed_t([values[b] for values in per_seed.values() if b in values]) for b in budgets}


def trend(per_seed: Mapping[int, Mapping[float, float]], budgets: Sequence[float]) -> dict[float, SeedTest]:
    """budget -> the t interval over seeds of each seed's fitted line (against log2 budget) at that budget."""
    fits = {seed: np.polyfit([math.log2(b) for b in values], list(values.values()), 1)
            for seed, values in per_seed.items() if len(values) >= 2}
    return {b: per_seed_t([float(np.polyval(fit, math.log2(b))) for fit in fits.values()]) for b in budgets}
