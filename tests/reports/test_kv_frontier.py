"""The KV-cache frontier section: each cell's loss against the cache it holds, the Pareto front, in the report of
every grid with KV variants (committed fig13-evidence: SVFormer, GQA and CLA at 1/2 and 1/8 of vanilla's cache)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lit_resformer.reports import write_report
from lit_resformer.reports.document import Document, Plotter
from lit_resformer.reports.kv_frontier import WITHIN_GAP, frontier_points, kv_frontier_section
from lit_resformer.runs.results import load_results

REPO = Path(__file__).resolve().parents[2]
FIG13 = REPO / "docs/results/fig13-evidence"


def test_frontier_points_of_a_committed_kv_grid_follow_the_pareto_rule():
    points = frontier_points(load_results(FIG13))
    assert len({p.kv_bytes_per_token for p in points}) >= 3 and all(p.seeds == 5 for p in points)
    for p in points:
        beaten = any(q.kv_bytes_per_token <= p.kv_bytes_per_token and q.loss < p.loss for q in points if q is not p)
        assert p.on_front == (not beaten), p
        assert p.half_width is not None and p.half_width > 0
    cheapest = min(points, key=lambda p: (p.kv_bytes_per_token, p.loss))
    assert cheapest.on_front  # nothing holds less


def test_a_grid_whose_cells_hold_one_cache_size_has_no_frontier():
    assert frontier_points(load_results(REPO / "docs/results/fig7-evidence")) == []


@pytest.mark.integration  # writes a whole report
def test_the_report_of_a_kv_grid_draws_the_frontier(tmp_path):
    grid = tmp_path / FIG13.name
    shutil.copytree(FIG13, grid)  # shared runs (links) copied as files
    write_report(grid)
    report = (grid / "report.md").read_text()
    assert "## KV-cache frontier" in report and "plots/kv_frontier.png" in report
    assert (grid / "plots/kv_frontier.png").stat().st_size > 10_000


def test_the_frontier_plot_ticks_every_cache_size_and_keeps_each_cell_by_its_own(tmp_path, monkeypatch):
    """Each cache size a tick labelled in bytes; the cells that share a size spread sideways around it, never as far as
    WITHIN_GAP of the way to the next size, each in its own style, with no label drawn over the others."""
    import math

    drawn = []
    monkeypatch.setattr(Plotter, "save", lambda self, fig, name: drawn.append(fig) or tmp_path / f"{name}.png")
    results = load_results(FIG13)
    plotter = Plotter(tmp_path, results.cells)
    kv_frontier_section(results, plotter, Document(tmp_path))
    (fig,) = drawn
    ax = fig.axes[0]
    points = {p.cell: p for p in frontier_points(results)}
    sizes = sorted({p.kv_bytes_per_token for p in points.values()})
    assert list(ax.get_xticks()) == sizes and [t.get_text() for t in ax.get_xticklabels()] == [f"{s:,}" for s in sizes]
    gap = min(math.log2(b / a) for a, b in zip(sizes, sizes[1:], strict=False))
    lines = {bars.get_label(): bars.lines[0] for bars in ax.containers}  # each cell's errorbar: its point
    assert set(lines) == set(points)
    for cell, line in lines.items():
        (x,) = line.get_xdata()
        assert abs(math.log2(x / points[cell].kv_bytes_per_token)) < WITHIN_GAP * gap
        assert (line.get_color(), line.get_marker()) == (plotter.styles[cell]["color"], plotter.styles[cell]["marker"])
    assert list(ax.texts) == []  # no point labels to overlap: the legend names the cells, best loss first
