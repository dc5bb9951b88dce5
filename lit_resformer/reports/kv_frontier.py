"""The KV-cache frontier of a grid: each cell's final validation loss against the KV-cache bytes it holds per token,
with the Pareto front drawn, so that a KV-saving variant (SVFormer, its anchors, CLA, GQA/MQA, SkipV1Former, a
shared first key, their combinations) is read at equal cache as well as at equal steps.

A grid gets the section when its cells hold at least two different cache sizes. Each point is a cell's mean final
validation loss over its finished seeds with a 95% t interval (n - 1 degrees of freedom) as its error bar; the
bytes come from the cell's config (lit_resformer.reports.budget). A cell is on the front when no other cell holds
at most its bytes with a lower mean loss: the front says which variants are worth their cache, not whether a
difference between two of them is decided (their claims do that, paired by seed where the design allows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from lit_resformer.reports.budget import budget_rows
from lit_resformer.reports.document import Document, Plotter
from lit_resformer.runs.results import GridResults
from lit_resformer.writing import outside_legend

LEVEL = 0.95
# Cells of one cache size are spread sideways around it, in steps of at most MAX_SPREAD powers of two, all of them
# within WITHIN_GAP of the way to the next size, so that each group stays by its tick.
MAX_SPREAD, WITHIN_GAP = 0.06, 0.35


@dataclass(frozen=True)
class FrontierPoint:
    cell: str
    kv_bytes_per_token: int
    loss: float  # mean final validation loss over the cell's finished seeds
    half_width: float | None  # of the 95% t interval; None with a single seed
    seeds: int
    on_front: bool


def frontier_points(results: GridResults) -> list[FrontierPoint]:
    """One point per cell that has a KV size and at least one finished run with a final validation loss, sorted by
    bytes (then loss); empty when the cells hold fewer than two different cache sizes."""
    finals = results.finals("val_loss")
    measured = []
    for row in budget_rows(results):
        losses = np.array(list(finals.get(row.cell, {}).values()), dtype=float)
        if row.kv_cache_bytes_per_token is None or not len(losses):
            continue
        half = None
        if len(losses) > 1:
            half = float(stats.t.ppf(0.5 + LEVEL / 2, len(losses) - 1) * losses.std(ddof=1) / math.sqrt(len(losses)))
        measured.append((row.cell, int(row.kv_cache_bytes_per_token), float(losses.mean()), half, len(losses)))
    if len({m[1] for m in measured}) < 2:
        return []
    measured.sort(key=lambda m: (m[1], m[2]))
    points = []
    for cell, kv, loss, half, seeds in measured:
        dominated = any(other_kv <= kv and other_loss < loss for c, other_kv, other_loss, *_ in measured if c != cell)
        points.append(FrontierPoint(cell, kv, loss, half, seeds, not dominated))
    return points


def kv_frontier_section(results: GridResults, plotter: Plotter, doc: Document) -> None:
    """The report's "KV-cache frontier" section (plot and table), or nothing for a grid whose cells all hold the same
    cache."""
    points = frontier_points(results)
    if not points:
        return
    baseline = results.manifest["baseline"]
    base_kv = next((p.kv_bytes_per_token for p in points if p.cell == baseline), None)
    doc.heading(2, "KV-cache frontier")
    doc.text(
        "Final validation loss (nats per token, mean over seeds with a 95% t interval) against the KV-cache bytes each "
        "cell holds per token in its training dtype. The line joins the Pareto front: the cells that no other cell "
        "beats with at most their cache. Read a difference between two cells from their claim or the Final losses "
        "table, which pair seeds where the design allows."
    )
    from matplotlib.ticker import NullLocator

    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    # cells that hold one cache size are spread sideways around it, best loss leftmost, so that their markers and
    # intervals do not cover each other; the ticks mark the sizes themselves
    columns: dict[int, list[FrontierPoint]] = {}
    for p in sorted(points, key=lambda p: p.loss):
        columns.setdefault(p.kv_bytes_per_token, []).append(p)
    sizes = sorted(columns)
    gap = min(math.log2(b / a) for a, b in zip(sizes, sizes[1:], strict=False))
    step = min(MAX_SPREAD, 2 * WITHIN_GAP * gap / max(len(column) for column in columns.values()))
    x = {p.cell: kv * 2 ** (step * (i - (len(column) - 1) / 2))
         for kv, column in columns.items() for i, p in enumerate(column)}
    for p in sorted(points, key=lambda p: p.loss):
        style = plotter.styles.get(p.cell, {"marker": "o"})
        ax.errorbar([x[p.cell]], [p.loss], yerr=None if p.half_width is None else [[p.half_width], [p.half_width]],
                    fmt=style["marker"], color=style.get("color"), capsize=3, markersize=7,
                    markerfacecolor=None if p.on_front else "white", label=p.cell)
    front = sorted((p for p in points if p.on_front), key=lambda p: p.kv_bytes_per_token)
    ax.plot([x[p.cell] for p in front], [p.loss for p in front], color="black", lw=1, ls="--", label="Pareto front",
            zorder=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [f"{kv:,}" for kv in sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    margin = step * max(len(column) for column in columns.values()) / 2 + 0.1
    ax.set_xlim(sizes[0] * 2 ** -margin, sizes[-1] * 2 ** margin)
    ax.set_xlabel("KV-cache bytes per token (log scale; cells of one size spread sideways)")
    ax.set_ylabel("final validation loss (nats / token)")
    ax.set_title(f"{results.manifest['name']}: loss against KV cache")
    ax.grid(alpha=0.3)
    outside_legend(ax, fontsize=8, title="best loss first; hollow:\noff the front", title_fontsize=8)
    doc.image(plotter.save(fig, "kv_frontier"), "Final validation loss against KV-cache bytes per token.")
    rows = []
    for p in points:
        share = "–" if not base_kv else f"{p.kv_bytes_per_token / base_kv:.3f}"
        interval = "" if p.half_width is None else f" [{p.loss - p.half_width:.4f}, {p.loss + p.half_width:.4f}]"
        rows.append([p.cell + (" (baseline)" if p.cell == baseline else ""), f"{p.kv_bytes_per_token:,}", share,
                     f"{p.loss:.4f}{interval}", str(p.seeds), "yes" if p.on_front else ""])
    doc.table(["cell", "KV bytes / token", f"of {baseline}'s", "final val loss [95% CI]", "seeds", "on the front"],
              rows)
