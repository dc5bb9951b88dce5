"""`lit-resformer plan GRID --effect X`: how many seeds each comparison of a finished (pilot) grid needs, read from
the grid's own verdicts (lit_resformer.verdicts.judgements.evaluate_grid) by lit_resformer.measures.power.

Per comparison: its design, n and spread (recovered from its 95% t interval), its minimum detectable effect now,
and the seeds at which that reaches X nats and the paper's effect where the claim gives one; all at the
comparison's adjusted level, ALPHA / m for its Holm family of m tests (lit_resformer.measures.power.family_level:
the grid's family, or for a comparison judged in the grid that trained its runs, that grid's). A comparison
outside its grid's family now (not tested, its runs not evidence) is planned as the family's (m + 1)-th test, the
one it joins once it is. A metric that is not a loss in nats (a data saving, a slope, an analysis measure) gets
its MDE in its own unit and no seeds for an effect in nats.

The command prints the short answer first (`plan_summary`: the seeds each comparison in nats has and needs, sized to
the terminal); every number on request (`plan_text`, a markdown table) or as data (the rows as JSON)."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from lit_resformer.measures.power import (
    MAX_SEEDS,
    POWER,
    effect_of_interest,
    family_level,
    paper_effect_nats,
    power_of,
    seeds_needed,
    spread_from_interval,
)
from lit_resformer.runs.claim_spec import NATS, metric_kind
from lit_resformer.runs.directory import grid_dirs, grid_index
from lit_resformer.runs.results import load_results
from lit_resformer.verdicts.judgements import Judgements, evaluate_grid
from lit_resformer.verdicts.tuning import pilot_as_confirmation
from lit_resformer.verdicts.verdict import Verdict
from lit_resformer.writing import markdown_table


def plan(grid: str | Path, effect: float, pilot: bool = False) -> list[dict]:
    """One plan row (`plan_row`) per comparison of the grid, for an effect of `effect` nats; the grid judged beside
    the grids of its folder, as its report is (a comparison another of them trained is planned in that family).
    `pilot`: a grid with a select block judged on its pilot seeds at the points they chose
    (lit_resformer.verdicts.tuning.pilot_as_confirmation), to size its confirmation seeds before they run; each row's
    verdict then reads PILOT_VERDICT."""
    judged = Judgements(grid_index(grid_dirs([Path(grid).parent])))
    results = load_results(grid)
    verdicts = evaluate_grid(pilot_as_confirmation(results) if pilot else results, judged=judged)
    if pilot:
        verdicts = [replace(v, verdict=PILOT_VERDICT) if v.n else v for v in verdicts]
    here = sum(v.adjustable for v in verdicts)

    def family_size(v: Verdict) -> int:
        if v.judged_in:
            return max(1, sum(w.adjustable for w in judged.family(v.judged_in)))
        return here if v.adjustable else here + 1

    return [plan_row(v, family_size(v), effect) for v in verdicts]


PILOT_VERDICT = "pilot: decides nothing"  # a comparison judged on the seeds that chose its points (plan --pilot)


def plan_row(v: Verdict, family_size: int, effect: float) -> dict:
    """What one verdict's design can detect and needs: the verdict's power (lit_resformer.measures.power.power_of at
    its family's level, against the claim's effect of interest), the seeds for `effect` nats and for the paper's
    effect, and a note where a number is not given."""
    level = family_level(family_size)
    unit = metric_kind(v.claim.metric).unit
    spread = spread_from_interval(v.design, v.n, v.df, v.low, v.high)
    paper = paper_effect_nats(v.claim.paper) if unit == NATS else None
    notes = []
    if spread is None:
        notes.append("no spread: " + ("fewer than 2 seeds" if v.n < 2 or v.low is None else
                                      "its interval is no t interval" if v.df is None else
                                      "the seeds agree exactly"))
    if unit != NATS:
        notes.append(f"in {unit}, not nats: no seeds for an effect in nats")
    if v.judged_in:
        notes.append(f"judged in {v.judged_in} (that grid's family)")
    return {"grid": v.grid, "claim": v.claim.claim, "a": v.claim.a, "b": v.claim.b, "metric": v.claim.metric,
            "unit": unit, "verdict": v.verdict, "design": v.design, "n": v.n, "df": v.df, "delta": v.delta,
            "ci_low": v.low, "ci_high": v.high, "family_size": family_size,
            **power_of(v.design, v.n, v.df, v.low, v.high, level, effect_of_interest(v.claim), v.verdict),
            "plan_effect": effect, "seeds_for_plan_effect": seeds_needed(spread, effect, level) if unit == NATS else None,
            "paper_effect": paper, "seeds_for_paper_effect": seeds_needed(spread, paper, level),
            "note": "; ".join(notes)}


def no_comparisons(grid: str) -> str:
    return f"{grid}: no comparisons to plan (its grid file declares no claims)\n"


def plan_summary(rows: list[dict], effect: float, grid: str, width: int) -> str:
    """The short answer, for a terminal `width` columns wide: per comparison in nats, the seeds it has and those it
    needs for `effect` nats and for the paper's effect; the comparisons in other units counted; every other number
    left to `plan_text`."""
    if not rows:
        return no_comparisons(grid)
    in_nats = [r for r in rows if r["unit"] == NATS]

    def needed(row: dict, seeds: int | None) -> str:
        return "–" if row["sd"] is None else f"> {MAX_SEEDS:,}" if seeds is None else str(seeds)

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("comparison", overflow="fold")
    table.add_column("verdict", no_wrap=True)
    for header in ("has", f"{effect:g} nats", "paper's"):
        table.add_column(header, justify="right", no_wrap=True)
    for r in in_nats:
        metric = "" if r["metric"] == "val_loss" else f" ({r['metric']})"
        paper = "–" if r["paper_effect"] is None else f"{needed(r, r['seeds_for_paper_effect'])} ({r['paper_effect']:g})"
        table.add_row(f"{r['a']} − {r['b']}{metric}", r["verdict"], str(r["n"]),
                      needed(r, r["seeds_for_plan_effect"]), paper)
    notes = []
    if any(r["sd"] is None for r in in_nats):
        notes.append("–: no spread to plan from (fewer than 2 seeds, or no t interval)")
    if len(in_nats) < len(rows):
        other = len(rows) - len(in_nats)
        notes.append(f"{other} more comparison{'s are' if other > 1 else ' is'} measured in another unit than nats: "
                     "no seeds for an effect in nats")
    notes.append("every number (spread, level, MDE, power, notes): --table; as data: --json")
    console = Console(width=width, color_system=None, file=io.StringIO())
    console.print(Group(
        Text(f"{grid}: the seeds each comparison has, and those it needs for {100 * POWER:.0f}% power to detect "
             f"{effect:g} nats and the paper's effect (in brackets), two-sided at its Holm level ALPHA / m; seeds "
             "count pairs (paired), estimates (per-seed) or each arm's seeds (unpaired)."),
        *([Text(), table] if in_nats else []), Text(), *map(Text, notes)))
    return console.file.getvalue()


def plan_text(rows: list[dict], effect: float, grid: str) -> str:
    """The plan as a markdown table, with a line that says what its numbers mean."""
    if not rows:
        return no_comparisons(grid)

    def number(value: float | None) -> str:
        return "–" if value is None else f"{value:.4g}"

    def seeds(count: int | None) -> str:
        return "–" if count is None else str(count)

    table = markdown_table(
        ["comparison", "metric", "verdict", "design", "n", "spread (sd)", "m: level", "MDE now",
         f"seeds for {effect:g} nats", "paper's effect: seeds", "inconclusive as", "note"],
        [[f"{r['a']} − {r['b']}", r["metric"], r["verdict"], r["design"] or "–", r["n"], number(r["sd"]),
          f"{r['family_size']}: {r['level']:.4g}", number(r["mde"]), seeds(r["seeds_for_plan_effect"]),
          "–" if r["paper_effect"] is None else f"{r['paper_effect']:g}: {seeds(r['seeds_for_paper_effect'])}",
          r["classification"] or "–", r["note"]] for r in rows])
    return (f"{grid}: seeds for {100 * POWER:.0f}% power, two-sided at each comparison's Holm level ALPHA / m (m: "
            "the tests of its family); spread and MDE in the metric's unit (nats unless the note says otherwise); "
            "seeds count pairs (paired), estimates (per-seed) or each arm's seeds (unpaired).\n\n"
            f"{table}\n")
