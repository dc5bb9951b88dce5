"""The grid report's analysis section and the learnable mixing-weight plot."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from lit_resformer.analysis import analyze_model
from lit_resformer.model import ModelConfig, Transformer
from lit_resformer.reports.attention import analysis_section, mixing_series, plot_mixing_weights

SMALL = dict(n_layer=3, n_head=2, d_model=16, ffn_dim=32, vocab_size=50, max_seq_len=32)


def write_analysis(run_dir: Path, seed: int, **overrides) -> dict:
    torch.manual_seed(seed)
    model = Transformer(ModelConfig.from_dict({**SMALL, **overrides}))
    x = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(seed))
    result = analyze_model(model, x, top_i=4)
    (run_dir / "analysis").mkdir(parents=True)
    (run_dir / "analysis" / "analysis.json").write_text(json.dumps({"models": {run_dir.name: result}}))
    return result


def write_metrics(run_dir: Path, rows: list[dict]) -> None:
    path = run_dir / "csv" / "version_0" / "metrics.csv"
    path.parent.mkdir(parents=True)
    columns = sorted({key for row in rows for key in row})
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def _mixing_rows(steps: int) -> list[dict]:
    rows = []
    for step in range(steps):
        rows.append({"step": step, "train/loss": 5.0 - step * 0.1})
        rows.append({"step": step, **{f"mix/layer{n}/{kind}": 0.5 + step * 0.01 * n * (1 if kind == "self" else -1)
                                      for n in (2, 3) for kind in ("self", "history")}})
    return rows


def test_section_overlays_cells_with_means_over_runs(tmp_path):
    grid = tmp_path / "grid"
    vanilla = [grid / "vanilla" / f"seed{s}" for s in (0, 1)]
    resformer = [grid / "resformer" / "seed0"]
    results = [write_analysis(run, seed) for seed, run in enumerate(vanilla)]
    write_analysis(resformer[0], 0, residual={"target": "v", "learnable": "scalar"})
    write_metrics(resformer[0], _mixing_rows(5))
    missing = [grid / "svformer" / "seed0"]
    missing[0].mkdir(parents=True)

    markdown, pngs = analysis_section({"vanilla": vanilla, "resformer": resformer, "svformer": missing},
                                      out_dir=grid / "report", link_base=grid)
    mean_entropy = sum((a + b) / 2 for a, b in zip(results[0]["entropy"], results[1]["entropy"], strict=True)) / 3
    assert f"| vanilla | 2 | {mean_entropy:.3g} |" in markdown
    assert "| resformer | 1 |" in markdown and "| svformer |" not in markdown
    assert "Not analysed (no run holds analysis results" in markdown and "): svformer." in markdown
    assert "![entropy by layer](report/analysis_entropy_by_layer.png)" in markdown
    assert "### Learnable mixing weights" in markdown and "](report/mixing_resformer.png)" in markdown
    assert {p.name for p in pngs} == {"analysis_entropy_by_layer.png", "analysis_first_token_ratios.png",
                                      "mixing_resformer.png"}
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs)


def test_per_layer_plots_draw_each_cell_in_its_style_with_its_seed_band(tmp_path, monkeypatch):
    """The entropy plot of two vanilla seeds: the mean line in the grid's style for the cell, and a band from the
    lower to the higher seed at every layer; the legend beside the axes, off the data."""
    import lit_resformer.analysis.plots as plots

    drawn = {}

    def keep(fig, path):
        fig.canvas.draw()
        drawn[path.name] = fig
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    runs = [tmp_path / "vanilla" / f"seed{s}" for s in (0, 1)]
    results = [write_analysis(run, seed) for seed, run in enumerate(runs)]
    styles = {"vanilla": {"color": "#0072B2", "marker": "s", "linestyle": "-"}}
    analysis_section({"vanilla": runs}, out_dir=tmp_path / "report", styles=styles)
    ax = drawn["analysis_entropy_by_layer.png"].axes[0]
    (line,) = ax.get_lines()
    assert (line.get_color(), line.get_marker(), line.get_label()) == ("#0072B2", "s", "vanilla")
    (band,) = ax.collections
    low, high = (list(map(min, zip(*[r["entropy"] for r in results], strict=True))),
                 list(map(max, zip(*[r["entropy"] for r in results], strict=True))))
    edge = band.get_paths()[0].vertices[:, 1]
    assert min(edge) == pytest.approx(min(low)) and max(edge) == pytest.approx(max(high))
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # beside the axes, not over the data


def test_section_is_empty_without_results(tmp_path):
    run = tmp_path / "cell" / "seed0"
    run.mkdir(parents=True)
    assert analysis_section({"cell": [run]}) == ("", [])
    assert analysis_section({}) == ("", [])


def test_mixing_weights_read_by_layer_and_kind(tmp_path):
    run = tmp_path / "run"
    write_metrics(run, _mixing_rows(4) + [{"step": 3, "dwa/block2/self": 0.9}])
    series = mixing_series(run)
    assert set(series) == {"self", "history", "dwa self"}
    assert sorted(series["self"]) == [2, 3]
    assert series["history"][3] == [(s, pytest.approx(0.5 - s * 0.03)) for s in range(4)]
    png = plot_mixing_weights(run, tmp_path / "mix.png", title="resformer")
    assert png.read_bytes()[:4] == b"\x89PNG"
    plain = tmp_path / "plain"
    write_metrics(plain, [{"step": 0, "train/loss": 4.0}])
    assert plot_mixing_weights(plain, tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()


def test_checkpoints_of_one_grid_get_distinct_names(tmp_path):
    from lit_resformer.analysis.analyze import _run_names

    paths = [tmp_path / "fig7" / cell / "seed0" / "checkpoints" / "last.ckpt" for cell in ("vanilla", "resformer")]
    assert _run_names(paths) == ["vanilla/seed0", "resformer/seed0"]
    assert _run_names([tmp_path / "a" / "checkpoints" / "last.ckpt"]) == ["a"]
