"""The scoreboard's rows: every grid's verdicts, each distinct comparison once, across the grids given. Claims from
outside the paper (`beyond_paper: true`) stand in their own section of the board; the paper's claims, each with these
rows as its evidence, are derived in lit_resformer.verdicts.paper_claims, and the board is drawn by
lit_resformer.board.scoreboard."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from lit_resformer.runs.directory import grid_dirs, grid_index
from lit_resformer.verdicts.judgements import Judgements
from lit_resformer.verdicts.verdict import Verdict, is_sub_row
from lit_resformer.verdicts.verdict_cache import VerdictCache


def scoreboard(paths: Iterable[str | Path], judged: Judgements | None = None,
               progress: Callable[[int, int], None] = lambda done, total: None) -> list[Verdict]:
    """Every grid's verdicts, each distinct comparison once (one row naming every grid it was seen in), each with
    exactly its grid's verdict and Holm-adjusted p (the suite's one error-control rule: Holm within each grid's family
    of claims; no second adjustment across the board). A comparison an overlay shares shows the verdict of the grid
    that trained its runs (evaluate_grid). Runs of one config trained twice, each in its own grid, are judged in
    each; where those verdicts would differ the row takes the most conservative (largest Holm p) and says so in
    `disagree` (no committed comparison does: tests/verdicts/test_paper_claims.py). The grids it may defer to are
    exactly those under `paths` (grid_index); `judged` is filled with each grid's verdicts, each judged once.
    `progress(done, total)` is told when judging starts (0 done) and each grid judged (or read from the verdict
    cache), the slow part: all are judged first, then their verdicts gathered (a grid's verdicts do not depend on
    the order grids are judged in)."""
    rows: list[Verdict] = []
    seen: dict[tuple, int] = {}
    index = grid_index(grid_dirs(paths))
    judged = Judgements(index, VerdictCache()) if judged is None else judged
    progress(0, len(index))
    for done, name in enumerate(index, 1):
        judged.graded(name)
        progress(done, len(index))
    for name in index:
        verdicts = judged.shown(name)
        for v in verdicts:
            if v.runs is not None and v.runs in seen:
                first = rows[seen[v.runs]]
                # the row speaks in the words of a grid that states the paper's effect, wherever that grid sorts
                claim = v.claim if first.claim.paper is None and v.claim.paper is not None else first.claim
                merged = replace(first, claim=claim, grids=(*first.grids, v.grid), texts=(*first.texts, *v.texts))
                if v.verdict != first.verdict or first.disagree:
                    worst = max((first, v), key=lambda x: -1 if x.p_holm is None else x.p_holm)
                    said = first.disagree or f"{first.grid}: {first.verdict}"
                    merged = replace(merged, verdict=worst.verdict, p_holm=worst.p_holm,
                                     disagree=f"{said}; {v.grid}: {v.verdict}")
                elif v.p_holm is not None and (first.p_holm is None or v.p_holm > first.p_holm):
                    merged = replace(merged, p_holm=v.p_holm)
                rows[seen[v.runs]] = merged
                continue
            if v.runs is not None:
                seen[v.runs] = len(rows)
            rows.append(replace(v, grids=(v.grid,)))
    return _sub_rows_under_their_claims(rows)


def _sub_rows_under_their_claims(rows: list[Verdict]) -> list[Verdict]:
    """Each per-domain sub-row right under the claim it splits (the same sides and grid, on the whole validation
    loss), also when that claim's row was first seen in another grid; a sub-row without one stays where it is."""
    def parent_of(sub: Verdict) -> int | None:
        return next((i for i, v in enumerate(rows) if not is_sub_row(v) and v.claim.metric == "val_loss"
                     and (v.claim.a, v.claim.b) == (sub.claim.a, sub.claim.b) and sub.grid in (v.grids or (v.grid,))),
                    None)

    parents = {id(v): parent_of(v) for v in rows if is_sub_row(v)}
    ordered = []
    for i, v in enumerate(rows):
        if is_sub_row(v) and parents[id(v)] is not None:
            continue
        ordered.append(v)
        ordered += [sub for sub in rows if is_sub_row(sub) and parents[id(sub)] == i]
    return ordered
