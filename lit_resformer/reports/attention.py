"""The grid report's attention-concentration section and the learnable mixing-weight plots.

A run holds analysis results once `--analyze` (lit_resformer.analysis.analyze_run_dir) has run; the section
overlays the cells' entropy by layer and first-token ratios (mean over each cell's runs, with the band from the lowest
to the highest run), drawn with the same plot functions as one analysis report. Learnable mixing weights come from the run's logged metrics, columns
`mix/layer<n>/<kind>` (kind: self, history, gate_weight_norm, lambda) and `dwa/block<n>/self`.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from lit_resformer.analysis.analyze import run_analysis
from lit_resformer.analysis.plots import (
    PAPER_RESFORMER_BOUNDS,
    first_token_ratios,
    plot_by_layer,
    plot_first_token_ratios,
)
from lit_resformer.runs.run_dir import RunDir, tokens_seen_by
from lit_resformer.writing import (
    integer_ticks,
    markdown_table,
    outside_legend,
    pyplot,
    save_figure,
    token_axis,
)

MIXING_COLUMN = re.compile(r"^(mix/layer|dwa/block)(\d+)/(\w+)$")


def _mean_by_layer(curves: list[list[float]]) -> list[float]:
    """Mean over runs, layer by layer (runs of one cell share their depth; a shorter run only adds where it has layers)."""
    depth = max(len(c) for c in curves)
    means = []
    for layer in range(depth):
        present = [c[layer] for c in curves if layer < len(c) and c[layer] is not None and math.isfinite(c[layer])]
        means.append(sum(present) / len(present) if present else math.nan)
    return means


def _band_by_layer(curves: list[list[float]]) -> tuple[list[float], list[float]]:
    """(lowest, highest) over runs, layer by layer, as _mean_by_layer reads them."""
    depth = max(len(c) for c in curves)
    present = [[c[layer] for c in curves if layer < len(c) and c[layer] is not None and math.isfinite(c[layer])]
               for layer in range(depth)]
    return [min(p) if p else math.nan for p in present], [max(p) if p else math.nan for p in present]


def _cell_curves(results: dict[str, list[dict]]) -> tuple[dict[str, dict[str, list[float]]],
                                                           dict[str, dict[str, tuple[list[float], list[float]]]]]:
    """Per cell: entropy and first-token ratios by layer, each the mean over the cell's runs; and each one's band,
    from the lowest to the highest run."""
    curves: dict[str, dict[str, list[float]]] = {}
    bands: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for cell, runs in results.items():
        per_run = {"entropy": [r["entropy"] for r in runs]}
        ratios = [first_token_ratios(r) for r in runs]
        per_run |= {kind: with_kind for kind in PAPER_RESFORMER_BOUNDS
                    if (with_kind := [r[kind] for r in ratios if kind in r])}
        curves[cell] = {kind: _mean_by_layer(values) for kind, values in per_run.items()}
        bands[cell] = {kind: _band_by_layer(values) for kind, values in per_run.items()}
    return curves, bands


def mixing_series(run_dir: Path) -> dict[str, dict[int, list[tuple[int, float]]]]:
    """{kind: {layer: [(step, value), ...]}} for every logged learnable mixing weight of a run."""
    found: dict[str, dict[int, list[tuple[int, float]]]] = {}
    for column, points in RunDir(run_dir).read_metrics().items():
        match = MIXING_COLUMN.match(column)
        if match:
            prefix, layer, kind = match.groups()
            name = f"{'dwa ' if prefix.startswith('dwa') else ''}{kind}"
            found.setdefault(name, {})[int(layer)] = points
    return found


def plot_mixing_weights(run_dir: str | Path, out_png: str | Path, title: str | None = None) -> Path | None:
    """Learnable mixing weights by layer over training tokens (steps for a run that logged no token count), one panel
    per kind; None when the run logged none."""
    series = mixing_series(Path(run_dir))
    if not series:
        return None
    tokens = tokens_seen_by(RunDir(run_dir).read_metrics())
    plt = pyplot()
    fig, axes = plt.subplots(1, len(series), figsize=(4.5 * len(series), 3.5), squeeze=False)
    order = {"self": 0, "history": 1}  # the two ResFormer weights first, side by side
    for ax, (kind, layers) in zip(axes[0], sorted(series.items(), key=lambda item: (order.get(item[0], 2), item[0])), strict=True):
        colours = plt.cm.viridis([i / max(1, len(layers) - 1) for i in range(len(layers))])
        for (layer, points), colour in zip(sorted(layers.items()), colours, strict=True):
            steps, values = zip(*points, strict=True)
            ax.plot([tokens(s) for s in steps] if tokens else steps, values, color=colour, label=f"layer {layer}")
        ax.set(title=kind, ylabel="weight")
        if tokens:
            token_axis(ax)
        else:
            ax.set_xlabel("step")
            integer_ticks(ax.xaxis)
    # the panels share their layers' colours: one legend, beside the last panel, off the curves
    outside_legend(axes[0][-1])
    if title:  # over the whole figure, so a long cell name is not cut at a panel's edge
        fig.suptitle(title, fontsize=11)
    return save_figure(fig, out_png)


def _fmt(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def _extreme(values: list[float] | None, pick) -> tuple[float, int] | None:
    finite = [(v, n) for n, v in enumerate(values or [], start=1) if math.isfinite(v)]
    return pick(finite) if finite else None


def _fmt_extreme(found: tuple[float, int] | None) -> str:
    return "n/a" if found is None else f"{_fmt(found[0])} (L{found[1]})"


def analysis_section(run_dirs_by_cell: dict[str, list[Path]], out_dir: str | Path | None = None,
                     link_base: str | Path | None = None, styles: dict | None = None) -> tuple[str, list[Path]]:
    """Markdown for the grid report plus the PNGs it links: entropy by layer and first-token ratios per cell
    (runs with analysis/analysis.json), and one mixing-weight plot per cell whose runs learn mixing weights.

    out_dir: where the PNGs go (default: the runs' common parent / "analysis"); link_base: the directory the
    markdown will live in, image links are relative to it (default out_dir); styles: {cell: matplotlib keywords} (the
    grid's, so a cell has one style on every plot), else lit_resformer.writing.series_styles of the cells here. The section names the cells none of whose
    runs were analysed. Returns ("", []) when no run has analysis results or mixing weights.
    """
    dirs = {cell: [Path(d) for d in runs] for cell, runs in run_dirs_by_cell.items()}
    all_dirs = [d for runs in dirs.values() for d in runs]
    if not all_dirs:
        return "", []
    out_dir = Path(out_dir) if out_dir is not None else Path(os.path.commonpath(all_dirs)) / "analysis"
    link_base = Path(link_base) if link_base is not None else out_dir
    results = {cell: [r for r in map(run_analysis, runs) if r is not None] for cell, runs in dirs.items()}
    results = {cell: runs for cell, runs in results.items() if runs}
    mixing_runs = {cell: next((d for d in runs if mixing_series(d)), None) for cell, runs in dirs.items()}
    mixing_runs = {cell: d for cell, d in mixing_runs.items() if d is not None}
    if not results and not mixing_runs:
        return "", []
    out_dir.mkdir(parents=True, exist_ok=True)

    def link(path: Path, caption: str) -> str:
        return f"![{caption}]({os.path.relpath(path, link_base)})"

    lines, pngs = ["## Attention concentration", ""], []
    if results:
        curves, bands = _cell_curves(results)
        first = next(iter(results.values()))[0]
        lines += [
            "Per layer over sampled validation sequences, mean over each cell's analysed runs (layers 1-based; the "
            "band spans the lowest to the highest run). "
            "Entropy of token importance (Eq. 11; lower = more concentrated); first-token ratios = first token / "
            "mean of the other tokens. The paper describes ResFormer's first token as < 10x the others' importance, "
            "> 0.5x their value norm and < 3x their hidden norm. For scale: uniform causal attention over "
            f"{len(first['importance_by_position'][0])} tokens has entropy {_fmt(first['entropy_uniform_causal'])}.",
            "",
        ]
        if missing := [cell for cell in dirs if cell not in results]:
            lines += [f"Not analysed (no run holds analysis results; `lit-resformer grid --analyze` adds them): "
                      f"{', '.join(missing)}.", ""]
        rows = []
        for cell, c in curves.items():
            entropy = [e for e in c["entropy"] if math.isfinite(e)]
            rows.append([
                cell, len(results[cell]), _fmt(sum(entropy) / len(entropy) if entropy else math.nan),
                _fmt_extreme(_extreme(c["entropy"], min)), _fmt_extreme(_extreme(c.get("importance"), max)),
                _fmt_extreme(_extreme(c.get("value_norm"), min)), _fmt_extreme(_extreme(c.get("hidden_norm"), max)),
            ])
        lines.append(markdown_table(["cell", "runs", "mean entropy", "min entropy", "max importance ratio",
                                     "min value-norm ratio", "max hidden-norm ratio"], rows))
        entropy_png = plot_by_layer({cell: c["entropy"] for cell, c in curves.items()},
                                    out_dir / "analysis_entropy_by_layer.png",
                                    "Entropy of token importance by layer (Eq. 11)", "entropy (nats)", styles=styles,
                                    bands={cell: b["entropy"] for cell, b in bands.items()})
        ratios_png = plot_first_token_ratios(
            {cell: {k: v for k, v in c.items() if k != "entropy"} for cell, c in curves.items()},
            out_dir / "analysis_first_token_ratios.png", first["seq_len"], styles=styles,
            bands={cell: {k: v for k, v in b.items() if k != "entropy"} for cell, b in bands.items()})
        lines += ["", link(entropy_png, "entropy by layer"), "", link(ratios_png, "first-token ratios"), ""]
        pngs += [entropy_png, ratios_png]
    if mixing_runs:
        lines += ["### Learnable mixing weights", "", "By layer over training (one run per cell).", ""]
        for cell, run_dir in mixing_runs.items():
            png = plot_mixing_weights(run_dir, out_dir / f"mixing_{re.sub(r'[^A-Za-z0-9_.-]+', '_', cell)}.png",
                                      title=cell)
            lines += [f"{cell} ({run_dir.name}):", "", link(png, f"mixing weights {cell}"), ""]
            pngs.append(png)
    return "\n".join(lines), pngs
