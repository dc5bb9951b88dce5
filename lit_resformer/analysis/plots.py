"""PNG plots of analysis results (matplotlib, Agg backend). Several models are overlaid, as in Fig. 1 (right).

The by-layer plots take plain curves {label: [value per layer]}, so the grid report draws its per-cell means
with the same functions that draw one report's models, with their styles (`styles`, lit_resformer.writing.series_styles:
one per label, the grid's cells keep theirs) and their spread over seeds (`bands`: {label: (low, high) per layer}).
Legends sit beside the axes, off the data.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from lit_resformer.analysis import metrics as M
from lit_resformer.writing import outside_legend, pyplot, save_figure, series_styles

plt = pyplot()

# The paper's description of ResFormer's first token (Fig. 2, 19, 21), drawn as reference lines on the ratio plots.
PAPER_RESFORMER_BOUNDS = {"importance": (10.0, "ResFormer (paper): < 10x"),
                          "value_norm": (0.5, "ResFormer (paper): > 0.5x"),
                          "hidden_norm": (3.0, "ResFormer (paper): < 3x")}

Curves = dict[str, list[float]]
Bands = dict[str, tuple[list[float], list[float]]]  # label -> (lowest, highest) per layer
Styles = dict[str, dict[str, str]]  # label -> matplotlib keywords


def first_token_ratio(result: dict[str, Any], kind: str) -> list[float]:
    """kind in importance | value_norm | hidden_norm: first token / mean of the other tokens, per layer."""
    return [f / o if o else math.nan for f, o in zip(result[f"{kind}_first"], result[f"{kind}_others"], strict=True)]


def first_token_ratios(result: dict[str, Any]) -> Curves:
    """{kind: ratio per layer} for the kinds this result has (value norms need the q/k/v hook)."""
    return {kind: first_token_ratio(result, kind) for kind in PAPER_RESFORMER_BOUNDS if f"{kind}_first" in result}


def _log_y(ax) -> None:
    """A log y axis labelled with plain numbers (minor ticks too when it spans < 1.5 decades).
    Call after everything is drawn, so the y range is known."""
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    low, high = ax.get_ylim()
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain if math.log10(high / low) < 1.5 else NullFormatter())


def _layer_axis(ax, log_y: bool = False) -> None:
    """Integer layer ticks, optionally a log y axis."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if log_y:
        _log_y(ax)


def _finite(values: list[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


def _draw_by_layer(ax, curves: Curves, title: str, ylabel: str, linestyle: str | None = None,
                   styles: Styles | None = None, bands: Bands | None = None) -> None:
    """One line per label over layers 1..L in its style (`linestyle` overrides the style's: a second quantity of the
    same labels), and its band where `bands` has one."""
    styles = styles or series_styles(list(curves))
    for label, values in curves.items():
        style = {**styles.get(label, {}), **({"linestyle": linestyle} if linestyle else {})}
        layers = range(1, len(values) + 1)
        ax.plot(layers, _finite(values), label=label, markersize=5, **style)
        if bands and label in bands:
            low, high = bands[label]
            ax.fill_between(layers, _finite(low), _finite(high), color=style.get("color"), alpha=0.15, lw=0)
    ax.set(title=title, xlabel="layer", ylabel=ylabel)
    _layer_axis(ax)


def plot_by_layer(curves: Curves, path: Path, title: str, ylabel: str, reference: tuple[float, str] | None = None,
                  log_y: bool = False, styles: Styles | None = None, bands: Bands | None = None) -> Path:
    """One line per label over layers 1..L, its band where `bands` has one, with an optional horizontal reference
    line (value, label)."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    _draw_by_layer(ax, curves, title, ylabel, styles=styles, bands=bands)
    if reference is not None:
        ax.axhline(reference[0], color="grey", linestyle=":", label=reference[1])
    _layer_axis(ax, log_y)
    outside_legend(ax)
    return save_figure(fig, path)


def plot_first_token_ratios(ratios: dict[str, Curves], path: Path, seq_len: int, styles: Styles | None = None,
                            bands: dict[str, Bands] | None = None) -> Path:
    """ratios: {label: {kind: ratio per layer}}; one panel per kind, with the paper's ResFormer bound; bands:
    {label: {kind: (low, high) per layer}}. Causal masking alone favours early tokens, so the importance panel also
    shows uniform causal attention's ratio over `seq_len` tokens. One legend for the panels, beside the last."""
    kinds = [k for k in PAPER_RESFORMER_BOUNDS if any(k in r for r in ratios.values())]
    styles = styles or series_styles(list(ratios))
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.3 * len(kinds) + 2.2, 3.6), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        _draw_by_layer(ax, {label: r[kind] for label, r in ratios.items() if kind in r},
                       f"first token / others: {kind.replace('_', ' ')}", "ratio", styles=styles,
                       bands={label: b[kind] for label, b in (bands or {}).items() if kind in b})
        bound, _ = PAPER_RESFORMER_BOUNDS[kind]
        ax.axhline(bound, color="grey", linestyle=":", label="ResFormer's bound (paper)")
        if kind == "importance":
            uniform = M.first_to_others(M.uniform_causal_importance(seq_len)).item()
            ax.axhline(uniform, color="grey", linestyle="--", label="uniform causal attention")
        _layer_axis(ax, log_y=True)
    handles = {}
    for ax in axes[0]:
        handles.update(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    outside_legend(axes[0][-1], handles=list(handles.values()), labels=list(handles))
    return save_figure(fig, path)


def _depth_colours(count: int):
    return plt.cm.viridis([i / max(1, count - 1) for i in range(count)])


def plot_norms_by_position(models: dict[str, dict], path: Path) -> Path:
    """Value and hidden norms by token position, every layer one line (colour = depth), first token ringed."""
    kinds = [k for k in ("value", "hidden") if any(f"{k}_norm_by_position" in r for r in models.values())]
    fig, axes = plt.subplots(len(models), len(kinds), figsize=(5 * len(kinds) + 1.5, 3 * len(models)), squeeze=False)
    for row, (name, result) in zip(axes, models.items(), strict=True):
        for ax, kind in zip(row, kinds, strict=True):
            layers = result.get(f"{kind}_norm_by_position", [])
            for n, (norms, colour) in enumerate(zip(layers, _depth_colours(len(layers)), strict=True), start=1):
                ax.plot(range(len(norms)), norms, color=colour, linewidth=0.8, label=f"layer {n}")
                ax.scatter([0], [norms[0]], color=colour, edgecolor="red", s=30, zorder=3)
            ax.set(title=f"{name}: {kind} norm (first token ringed)", xlabel="position", ylabel="L2 norm")
            _log_y(ax)
        # a row's panels share their layers' colours: one legend, beside the row's last panel
        outside_legend(row[-1], ncol=2 if len(layers) > 12 else 1, fontsize=8)
    return save_figure(fig, path)


def _mixes_values(result: dict[str, Any]) -> bool:
    """Whether the values attended with differ from the layers' own V_n somewhere (a value residual)."""
    used, raw = result.get("top_eigenvalue"), result.get("raw_value_top_eigenvalue")
    return bool(used and raw) and any(r is not None and not math.isclose(u, r, rel_tol=1e-6)
                                      for u, r in zip(used, raw, strict=True))


def plot_value_spectrum(models: dict[str, dict], path: Path) -> Path:
    styles = series_styles(list(models))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.6))
    for name, result in models.items():
        if "value_spectrum" in result:
            spectrum = result["value_spectrum"]
            left.plot(range(1, len(spectrum) + 1), spectrum, color=styles[name]["color"],
                      linestyle=styles[name]["linestyle"], label=f"{name} (layer {result['value_spectrum_layer']})")
    left.set(title="Value spectrum (Eq. 12, uncentred)", xlabel="eigenvalue rank", ylabel="eigenvalue")
    _log_y(left)
    outside_legend(left)
    _draw_by_layer(right, {n: r["top_eigenvalue"] for n, r in models.items() if "top_eigenvalue" in r},
                   "Largest value eigenvalue (Fig. 12)", "eigenvalue", styles=styles)
    _draw_by_layer(right, {f"{n}: own V_n (before mixing)": r["raw_value_top_eigenvalue"]
                           for n, r in models.items() if _mixes_values(r)},
                   "Largest value eigenvalue (Fig. 12)", "eigenvalue", linestyle="--",
                   styles={f"{n}: own V_n (before mixing)": style for n, style in styles.items()})
    _layer_axis(right, log_y=True)
    outside_legend(right)
    return save_figure(fig, path)


def plot_fig4(models: dict[str, dict], path: Path) -> Path:
    """Each model in its colour and marker, each of the four cosines in a line style of its own."""
    styles = series_styles(list(models))
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for key, linestyle, label in (("fig4_cos_eq4", "-", "Eq. 4, m = n-1"), ("fig4_cos_eq6", "--", "Eq. 6, m = n-1"),
                                  ("fig4_first_cos_eq4", ":", "Eq. 4, m = 1"),
                                  ("fig4_first_cos_eq6", "-.", "Eq. 6, m = 1")):
        _draw_by_layer(ax, {f"{n}: {label}": r[key] for n, r in models.items() if key in r},
                       "cos to cross-layer attention (Eq. 2), Fig. 4", "cosine similarity", linestyle,
                       styles={f"{n}: {label}": style for n, style in styles.items()})
    outside_legend(ax)
    return save_figure(fig, path)


def plot_top_i(models: dict[str, dict], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models) + 1.5, 3.6), squeeze=False)
    for ax, (name, result) in zip(axes[0], models.items(), strict=True):
        layers = result["top_i_importance"]
        for n, (shares, colour) in enumerate(zip(layers, _depth_colours(len(layers)), strict=True), start=1):
            ax.plot(range(1, len(shares) + 1), shares, marker=".", color=colour, label=f"layer {n}")
        ax.set(title=f"{name}: top-i importance (Fig. 21)", xlabel="i (most important tokens)",
               ylabel="share of importance", ylim=(0, 1.02))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    outside_legend(axes[0][-1], ncol=2 if len(layers) > 12 else 1, fontsize=8)
    return save_figure(fig, path)


def write_plots(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """Every plot of one `analysis.json` report into out_dir; returns the PNG paths."""
    models = report["models"]
    first = next(iter(models.values()))
    paths = [
        plot_by_layer({n: r["entropy"] for n, r in models.items()}, out_dir / "entropy_by_layer.png",
                      "Entropy of token importance (Eq. 11)", "entropy (nats)",
                      reference=(first["entropy_uniform_causal"], "uniform causal attention")),
        plot_by_layer({n: r["similarity"] for n, r in models.items()}, out_dir / "similarity_by_layer.png",
                      "Hidden-state similarity (Eq. 13)", "mean pairwise cosine"),
        plot_first_token_ratios({n: first_token_ratios(r) for n, r in models.items()},
                                out_dir / "first_token_ratios.png", report["seq_len"]),
        plot_norms_by_position(models, out_dir / "norms_by_position.png"),
        plot_top_i(models, out_dir / "top_i_importance.png"),
    ]
    if any("value_spectrum" in r for r in models.values()):
        paths.append(plot_value_spectrum(models, out_dir / "value_spectrum.png"))
    if any("fig4_cos_eq4" in r for r in models.values()):
        paths.append(plot_fig4(models, out_dir / "fig4_cosine.png"))
    return paths
