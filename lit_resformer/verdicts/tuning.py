"""Claims about tuned arms and about what a gap depends on, judged on a grid's runs by the one judge of per-seed
values (lit_resformer.verdicts.verdict.judge); lit_resformer.verdicts.judges registers them in its JUDGING table.

- `val_loss_each_at_best` / `val_loss_at_b_best`: the final validation loss of a at its best point against b at its
  best (or both at b's best), as the grid's `select:` block chose those points from its pilot seeds
  (lit_resformer.grids.selection: the same rule and bracket check the runner applied), compared on the
  confirmation seeds only, paired by seed where the data orders allow: the pilot seeds chose the points, and judging
  on them would favour the arm whose pilot noise happened to be lowest. Not tested while a point is not chosen (a
  pilot run unfinished) or when the choice fails its bracket check.
- `val_loss_gap_dependence`: per seed, the least-squares slope of the final validation-loss gap a - b against
  log2 of `over`, across the cells that have `over` as a matrix key (a's and b's at equal coordinates); the t
  interval over seeds. The claim is two-sided ("depends on"): reproduced when the interval excludes zero on either
  side, else inconclusive; a test against zero cannot show that a gap does not depend on `over`, so it is never
  contradicted.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from lit_resformer.grids.selection import Selection, SelectionError, best_point
from lit_resformer.measures.stats import run_data_seed, seed_design
from lit_resformer.runs.claim_spec import EACH_AT_BEST, Claim
from lit_resformer.runs.results import GridResults, RunResult
from lit_resformer.verdicts.verdict import Verdict, compared, flat_verdict, judge


def chosen_points(results: GridResults, per_value: Any = None) -> tuple[Selection | None, dict[str, float],
                                                                         dict[str, str]]:
    """(the grid's select block, arm -> its chosen value, arm -> why it has none) from the finished pilot runs, by the
    rule the runner chose them with (at `per_value` of the block's `per`, for a block that chooses at each);
    (None, {}, {}) for a grid without a select block."""
    raw = results.manifest.get("select")
    if not raw:
        return None, {}, {}
    selection = Selection.from_dict(raw)
    best, missing = {}, {}
    for arm in selection.arms:
        cells = pilot_cells(results, selection, arm, per_value)
        finals = {value: {run.seed: run.final("val_loss") if run.status == "done" else None
                          for run in results.runs.get(cell, []) if run.status in ("done", "diverged")}
                  for value, cell in cells.items()}
        try:
            chosen = best_point(selection, arm, finals)
        except SelectionError as err:
            missing[arm] = str(err)
            continue
        if chosen is None:
            missing[arm] = f"{arm}'s pilot runs are not all finished, so its best {selection.over} is not chosen yet"
        else:
            best[arm] = chosen
    return selection, best, missing


def pilot_as_confirmation(results: GridResults) -> GridResults:
    """The grid judged as if its pilot seeds were its confirmation seeds: at the points they chose, on the runs that
    chose them. What `lit-resformer plan --pilot` reads, to size the confirmation before it runs from the spread of
    the pilot's paired differences there. Its verdicts decide nothing: each point won on these very runs, so their
    estimates carry the winner's curse (their spread, which a plan reads, far less)."""
    raw = results.manifest.get("select")
    if not raw:
        raise ValueError(f"{results.name}: no select block, so no pilot seeds apart from the seeds its verdicts read")
    return GridResults(results.grid_dir, {**results.manifest, "select": {**raw, "seeds": raw["pilot_seeds"]}},
                       results.runs)


def pilot_cells(results: GridResults, selection: Selection, arm: str, per_value: Any = None) -> dict[float, str]:
    """An arm's pilot cells by their value of the selected key (at `per_value` of the block's `per`, if it has one)."""
    return {info["coords"][selection.over]: name for name, info in results.cell_info.items()
            if info.get("family") == arm and not info.get("at") and selection.over in (info.get("coords") or {})
            and (selection.per is None or info["coords"].get(selection.per) == per_value)}


def judge_at_chosen(claim: Claim, results: GridResults) -> Verdict:
    """a at its best (EACH_AT_BEST) or at b's best against b at its best, on the confirmation seeds (at the claim's
    point of the block's `per`, where it chooses at each)."""
    per_value = next(iter(claim.per.values())) if claim.per else None
    selection, best, missing = chosen_points(results, per_value)
    where = {claim.a: claim.a if claim.metric == EACH_AT_BEST else claim.b, claim.b: claim.b}
    unchosen = [missing.get(arm, f"{arm} is no arm of the select block") for arm in dict.fromkeys(where.values())
                if arm not in best]
    if selection is None or unchosen:
        reason = "; ".join(unchosen) if selection is not None else "the grid has no select block"
        return judge(claim, {}, {}, [], results.name, not_tested=reason)
    cells = {side: _cell_at(results, selection, side, best[arm], per_value) for side, arm in where.items()}
    sides = _confirmed(results, selection, cells[claim.a], cells[claim.b])
    values = [{s: v for s, run in side.items() if (v := run.final("val_loss")) is not None} for side in sides]
    design = seed_design(*({s: run_data_seed(run.config or {}) for s, run in side.items()} for side in sides))
    note = (f"{cells[claim.a]} vs {cells[claim.b]}: {selection.over} chosen on pilot seeds "
            f"{list(selection.pilot_seeds)} (lowest mean final validation loss"
            + (f" at {selection.per}={per_value:g}" if claim.per else "") + f"), compared on confirmation seeds "
            f"{sorted(sides[0])} of {list(selection.seeds)}")
    judged = judge(claim, *values, [*sides[0].values(), *sides[1].values()], results.name, note, design)
    return replace(judged, **compared(claim, sides))


def _confirmed(results: GridResults, selection: Selection, a: str, b: str) -> tuple[dict, dict]:
    """Cells a's and b's finished runs on the confirmation seeds both finished: (seed -> run, seed -> run)."""
    runs_a, runs_b = results.done.get(a, {}), results.done.get(b, {})
    seeds = sorted(set(runs_a) & set(runs_b) & set(selection.seeds))
    return {s: runs_a[s] for s in seeds}, {s: runs_b[s] for s in seeds}


def _cell_at(results: GridResults, selection: Selection, arm: str, value: float, per_value: Any = None) -> str:
    return next(cell for point, cell in pilot_cells(results, selection, arm, per_value).items()
                if math.isclose(point, value))


def judge_each_at_best_slope(claim: Claim, results: GridResults) -> Verdict:
    """Per confirmation seed, the slope of the gap a - b, each at its best point at each value of the block's `per`
    (chosen there on the pilot seeds), against log2 of that value; two-sided, like val_loss_gap_dependence. The
    points where an arm's choice is not made yet are left out (not tested with fewer than two)."""
    raw = results.manifest.get("select") or {}
    per_values = raw.get("per_values") or []
    cells, waiting = {}, []
    for value in per_values:
        selection, best, missing = chosen_points(results, value)
        if all(arm in best for arm in (claim.a, claim.b)):
            cells[value] = tuple(_cell_at(results, selection, arm, best[arm], value) for arm in (claim.a, claim.b))
        else:
            waiting.append(f"{claim.over}={value:g}")
    notes = [f"per confirmation seed, the slope of the final validation-loss gap {claim.a} - {claim.b}, each at its "
             f"own best {raw.get('over')} chosen at each {claim.over} on the pilot seeds, against log2 {claim.over} "
             f"over {[_shown(v) for v in cells]}; two-sided: the tuned gap changes with {claim.over} when the "
             "interval excludes zero on either side"]
    if waiting:
        notes.append(f"left out {', '.join(waiting)}: a point not chosen yet")
    selection = Selection.from_dict(raw) if raw else None
    confirmed = {value: _confirmed(results, selection, *pair) for value, pair in cells.items()} if selection else {}
    seeds = sorted(set.intersection(*(set(a) for a, _ in confirmed.values()))) if confirmed else []
    slopes: dict[int, float] = {}
    for seed in seeds:
        gaps = [(math.log2(value), a[seed].final("val_loss"), b[seed].final("val_loss"))
                for value, (a, b) in confirmed.items()]
        if all(x is not None and y is not None for _, x, y in gaps):
            slopes[seed] = float(np.polyfit([v for v, _, _ in gaps], [x - y for _, x, y in gaps], 1)[0])
    in_comparison = [side[s] for a, b in confirmed.values() for side in (a, b) for s in slopes]
    not_tested = ("the grid has no select block that chooses at each " + claim.over if selection is None
                  else "" if len(cells) >= 2 else f"fewer than two values of {claim.over} with both arms' points chosen")
    return _two_sided(claim, slopes, in_comparison, results, "; ".join(notes), not_tested,
                      [side for pair in confirmed.values() for side in pair])


def _two_sided(claim: Claim, per_seed: dict[int, float], runs: list[RunResult], results: GridResults, note: str,
               not_tested: str, sides: list[dict]) -> Verdict:
    """A per-seed estimate's claim that it is not zero, either way: tested against zero in the "lower" direction,
    then read two-sided (an interval off zero on either side reproduces it; its p-values are the two-sided test's)."""
    judged = judge(replace(claim, direction="lower"), per_seed, None, runs, results.name, note, not_tested=not_tested)
    decided = "reproduced" if judged.unadjusted in ("reproduced", "contradicted") else judged.unadjusted
    return replace(judged, claim=claim, verdict=decided, unadjusted=decided, p_raw=judged.p_two_sided,
                   **compared(claim, sides))


def judge_gap_dependence(claim: Claim, results: GridResults) -> Verdict:
    """The per-seed slope of the final gap a - b against log2(`over`), two-sided (see the module docstring)."""
    pairs = _pairs(results, claim)
    runs = {cell: results.runs.get(cell, []) for pair in pairs.values() for cell in pair}
    # the seeds every cell finished training (done or diverged); a point where one of them diverged is left out,
    # so that every seed's slope is fitted on the same points
    finished = [{r.seed for r in rs if r.status in ("done", "diverged")} for rs in runs.values()]
    seeds = sorted(set.intersection(*finished)) if finished else []
    diverged = {value for value, pair in pairs.items() for cell in pair
                if any(r.status == "diverged" and r.seed in seeds for r in runs[cell])}
    points = sorted(set(pairs) - diverged)
    notes = [f"slope of the final validation-loss gap {claim.a} - {claim.b} against log2 {claim.over} per seed, "
             f"{claim.over} in {[_shown(v) for v in points]}; two-sided: the gap depends on {claim.over} when the "
             "interval excludes zero on either side"]
    if diverged:
        notes.append(f"left out {claim.over} {[_shown(v) for v in sorted(diverged)]}: a run diverged there")
    slopes: dict[int, float] = {}
    in_comparison: list[RunResult] = []
    if len(points) >= 2:
        for seed in seeds:
            at = [(math.log2(v), results.done[pairs[v][0]][seed], results.done[pairs[v][1]][seed]) for v in points]
            gaps = [(x, ra.final("val_loss"), rb.final("val_loss")) for x, ra, rb in at]
            if all(a is not None and b is not None for _, a, b in gaps):
                slopes[seed] = float(np.polyfit([x for x, _, _ in gaps], [a - b for _, a, b in gaps], 1)[0])
                in_comparison += [r for _, ra, rb in at for r in (ra, rb)]
    sides = [{s: results.done[cell][s] for s in slopes} for pair in pairs.values() for cell in pair
             if all(s in results.done.get(cell, {}) for s in slopes)]
    return _two_sided(claim, slopes, in_comparison, results, "; ".join(notes),
                      "" if len(points) >= 2 else f"fewer than two points of {claim.over} finished", sides)


def judge_gap_difference(claim: Claim, results: GridResults) -> Verdict:
    """Per seed, the gap a - b at the second value of `over` minus the gap at its first (matrix order), judged as a
    claim that it is flat within the claim's margin (verdict.flat_verdict)."""
    pairs = _pairs(results, claim)  # in the grid's matrix order
    points = list(pairs)
    notes = [f"per seed, the final validation-loss gap {claim.a} - {claim.b} at {claim.over}={points[-1]} minus the "
             f"gap at {claim.over}={points[0]}" if len(points) == 2 else ""]
    sides = [results.done.get(cell, {}) for value in points for cell in pairs[value]]
    seeds = sorted(set.intersection(*(set(side) for side in sides))) if len(points) == 2 else []
    differences: dict[int, float] = {}
    for seed in seeds:
        first_a, first_b, second_a, second_b = (side[seed].final("val_loss") for side in sides)
        if None not in (first_a, first_b, second_a, second_b):
            differences[seed] = (second_a - second_b) - (first_a - first_b)
    sides = [{s: side[s] for s in differences} for side in sides]
    not_tested = "" if len(points) == 2 else f"{claim.over} has not both its points finished"
    return flat_verdict(claim, differences, [run for side in sides for run in side.values()], results.name,
                        "; ".join(notes), not_tested, sides)


def _pairs(results: GridResults, claim: Claim) -> dict[float, tuple[str, str]]:
    """value of `over` -> (a's cell, b's cell) at equal coordinates (and the same chosen point, for at_best cells)."""
    info = results.cell_info
    pairs = {}
    for name, cell in info.items():
        coords = cell.get("coords") or {}
        if cell.get("family") != claim.a or claim.over not in coords:
            continue
        twin = next((other for other, c in info.items() if c.get("family") == claim.b
                     and (c.get("coords") or {}) == coords and c.get("at") == cell.get("at")), None)
        if twin is not None:
            pairs[coords[claim.over]] = (name, twin)
    return pairs


def _shown(value: float) -> str:
    return f"{value:g}"


def each_at_best_slope_label(claim: Claim) -> str:
    return f"slope of the final val_loss gap (a − b), each at its best per {claim.over}, vs log2 {claim.over} (≠ 0)"


def gap_difference_label(claim: Claim) -> str:
    return f"final val_loss gap (a − b) at the second {claim.over} minus at the first (flat within ±{claim.margin:g})"


def gap_dependence_label(claim: Claim) -> str:
    return f"slope of final val_loss gap (a − b) vs log2 {claim.over}, two-sided (≠ 0)"


def at_chosen_label(claim: Claim) -> str:
    where = "each at its own best" if claim.metric == EACH_AT_BEST else f"both at {claim.b}'s best"
    return f"val_loss, {where} (select block), confirmation seeds ({claim.direction})"
