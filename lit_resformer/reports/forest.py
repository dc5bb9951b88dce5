"""Forest plots of a grid's comparisons: each comparison's effect (a − b) with its 95% interval on a horizontal axis,
a line at zero, the paper's own effect where it gives a number, colour and marker by verdict.

Comparisons measured in different units (a loss difference in nats, a data saving, an attention ratio) get a panel
each, so that no one scale squeezes the others; within a panel the rows share their axis.
"""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from lit_resformer.reports.page import VERDICT_STYLE
from lit_resformer.runs.claim_spec import (
    ANALYSIS_PREFIX,
    CRITICAL_POINT_GROWTH,
    EQUIVALENCE_SAVING,
    GAP_SLOPE,
    TIME_TO_TARGET,
    Claim,
)
from lit_resformer.verdicts.judges import judging
from lit_resformer.verdicts.verdict import Verdict, is_sub_row
from lit_resformer.verdicts.verdict_cache import VerdictCache, code_fingerprint
from lit_resformer.writing import atomic_write, pyplot, save_figure

MARKERS = {"reproduced": "o", "contradicted": "X", "mixed": "P", "inconclusive": "D", "not tested": "s"}
SIGNED = re.compile(r"^\s*([+\-−]\d+(?:\.\d+)?)(%?)")  # "-0.0272 at 82M ..." -> -0.0272
LESS_DATA = re.compile(r"^\s*(\d+(?:\.\d+)?)% less data")  # a data saving, as time_to_target measures it


def _is_time_to_target(metric: str) -> bool:
    return metric == TIME_TO_TARGET or metric.startswith(TIME_TO_TARGET + "/")


def paper_effect(claim: Claim) -> float | None:
    """The paper's effect on the scale of our Δ, where `paper:` opens with it: a signed number ("-0.0272 at 82M";
    the first where it gives several, the smallest model's, nearest ours) or, for a data saving, "20.3% less data".
    None where it states the effect in words only."""
    text = claim.paper or ""
    if match := SIGNED.match(text):
        value = float(match.group(1).replace("−", "-"))
        return value / 100 if match.group(2) else value
    if _is_time_to_target(claim.metric) and (match := LESS_DATA.match(text)):
        return float(match.group(1)) / 100
    return None


def effect_unit(claim: Claim) -> str:
    """What a comparison's Δ measures, as an axis label: comparisons with the same label share an axis."""
    metric = claim.metric
    if metric in ("val_loss", "train_loss") or metric.startswith("val_loss/"):
        return "Δ loss, a − b (nats; < 0: a is lower)"
    if _is_time_to_target(metric):
        return "data saving to reach the target, 1 − tokens(a) / tokens(b)"
    if metric == EQUIVALENCE_SAVING:
        return "fitted equivalence saving (fraction)"
    if metric == CRITICAL_POINT_GROWTH:
        return f"slope of log2 critical step against log2 {claim.over}"
    if metric == GAP_SLOPE:
        return f"slope of the val-loss gap (nats) against log2 {claim.over}"
    return f"Δ {metric.removeprefix(ANALYSIS_PREFIX).replace('_', ' ')}, a − b (middle layers)"


def short_claim(text: str, width: int) -> str:
    """A claim's words without the closing parenthesis that cites the paper (a "(sic)" after a quote stays: it is
    part of the words), shortened to `width` characters."""
    bare = re.sub(r"\s*\((?!sic\))[^()]*\)$", "", text) or text
    return textwrap.shorten(bare, width, placeholder="…")


# A forest plot is drawn to be read on a phone as on a desktop: 5.5 inches wide (605 px), it is shown at two thirds
# of its size on a 420-px screen, where its 10-point words are still 10 px tall. So each row's words stand on lines of
# their own above its interval, which takes the whole width, instead of a column beside it that would squeeze the axis.
FIGURE_WIDTH = 5.5  # inches
TEXT_PT = 10  # the rows' words and numbers
LABEL_CHARS = 64  # a line of a row's words at TEXT_PT across the figure
LINE_IN = 0.2  # inches a line of words takes
INTERVAL_IN = 0.24  # inches below a row's words for its interval
AXIS_IN = 0.62  # a panel's tick labels and axis label
PAD_IN = 0.05  # above a panel's first row and below its last
LEGEND_IN = 0.75  # the title and the legend above the first panel
WORDS_BOX = {"boxstyle": "square,pad=0.1", "facecolor": "white", "alpha": 0.85, "edgecolor": "none"}  # words over a
# line at zero or the paper's effect stay legible


def row_label(v: Verdict) -> str:
    """A comparison's row in a grid's forest plot: its words (a per-domain sub-row marked ↳), in two lines at most."""
    return ("↳ " if is_sub_row(v) else "") + textwrap.fill(short_claim(v.claim.claim, 2 * LABEL_CHARS - 4), LABEL_CHARS)


def drawn(value: float) -> float:
    """A value as the plot draws it: to 6 significant digits, far below a pixel, so that the last bits of a statistic,
    which the linear algebra's thread count may move, leave the PNG's bytes as they were (a committed report is written
    again byte for byte)."""
    return float(f"{value:.6g}")


def _row_heights(labels: Sequence[str]) -> list[float]:
    """Inches each row takes: its words' lines, then its interval."""
    return [LINE_IN * (label.count("\n") + 1) + INTERVAL_IN for label in labels]


def forest_plot(verdicts: Sequence[Verdict], path: Path, title: str, label: Callable[[Verdict], str] = row_label,
                numbers: bool = False) -> Path | None:
    """The forest plot of these comparisons (per-domain sub-rows included), each row named by `label` above its
    interval and, with `numbers`, its verdict's symbol, Δ and interval printed at the right end of that line; None when
    none has an effect. The vertical axis of each panel is in inches from its top."""
    shown = [v for v in verdicts if v.delta is not None]
    if not shown:
        return None
    panels: dict[str, list[Verdict]] = {}
    for v in shown:
        panels.setdefault(effect_unit(v.claim), []).append(v)
    labels = {id(v): label(v) for v in shown}
    heights = [sum(_row_heights([labels[id(v)] for v in rows])) + 2 * PAD_IN for rows in panels.values()]
    plt = pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(FIGURE_WIDTH, sum(heights) + AXIS_IN * len(panels) + LEGEND_IN),
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    for ax, (unit, rows), height in zip(axes[:, 0], panels.items(), heights, strict=True):
        top = -PAD_IN
        for v, row_height in zip(rows, _row_heights([labels[id(v)] for v in rows]), strict=True):
            y = top - row_height + INTERVAL_IN / 2  # the interval's line; the words above it
            top -= row_height
            colour = VERDICT_STYLE[v.verdict][1]
            if v.low is not None:
                ax.plot([drawn(v.low), drawn(v.high)], [y, y], color=colour, lw=2.2, solid_capstyle="butt")
            ax.plot([drawn(v.delta)], [y], marker=MARKERS[v.verdict], color=colour, ms=7, ls="none")
            if (paper := paper_effect(v.claim)) is not None:
                ax.plot([paper], [y], marker="|", color="black", ms=12, mew=2, ls="none")
            words = y + INTERVAL_IN / 2
            ax.annotate(labels[id(v)], (0.005, words), xycoords=("axes fraction", "data"), va="bottom",
                        fontsize=TEXT_PT, linespacing=1.1, bbox=WORDS_BOX)
            if numbers:
                fmt = judging(v.claim).format_value
                interval = "" if v.low is None else f" [{fmt(v.low)}, {fmt(v.high)}]"
                ax.annotate(f"{VERDICT_STYLE[v.verdict][0]} {fmt(v.delta)}{interval}", (0.995, words),
                            xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=TEXT_PT,
                            color=colour, bbox=WORDS_BOX)
        ax.axvline(0.0, color="black", lw=0.8, ls="--")
        ax.set_yticks([])
        ax.set_ylim(-height, 0)
        ax.set_xlabel(unit, fontsize=TEXT_PT)
        ax.tick_params(axis="x", labelsize=TEXT_PT - 1)
        ax.grid(alpha=0.3, axis="x")
    handles = [plt.Line2D([], [], marker=MARKERS[name], color=colour, ls="none", ms=7, label=name)
               for name, (_, colour) in VERDICT_STYLE.items() if any(v.verdict == name for v in shown)]
    if any(paper_effect(v.claim) is not None for v in shown):  # the legend names only marks the plot draws
        handles.append(plt.Line2D([], [], marker="|", color="black", ms=12, mew=2, ls="none",
                                  label="the paper's effect"))
    handles.append(plt.Line2D([], [], color="grey", lw=2.2, label="95% interval"))
    axes[0, 0].legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.02), ncol=3, fontsize=TEXT_PT - 1,
                      frameon=False, borderaxespad=0, handletextpad=0.3, columnspacing=1.0)
    fig.suptitle(title, fontsize=TEXT_PT + 1, x=0.01, ha="left")
    return save_figure(fig, path)


def cached_forest_plot(verdicts: Sequence[Verdict], path: Path, title: str, label: Callable[[Verdict], str] = row_label,
                       numbers: bool = False) -> Path | None:
    """`forest_plot`, read back from the verdict cache's forest/ when the same code drew the same rows before: the board
    page draws one per grid and one per claim judged in several regimes, and drawing them was most of its time. The key
    is everything the plot shows."""
    shown = [v for v in verdicts if v.delta is not None]
    if not shown:
        return None
    drawn = [[label(v), v.verdict, v.delta, v.low, v.high, paper_effect(v.claim), effect_unit(v.claim)] for v in shown]
    key = hashlib.sha256(json.dumps([code_fingerprint(), title, numbers, drawn]).encode()).hexdigest()
    kept = VerdictCache().folder / "forest" / f"{key}.png"
    if kept.is_file():
        path.write_bytes(kept.read_bytes())
        return path
    plot = forest_plot(shown, path, title, label, numbers)
    atomic_write(kept, plot.read_bytes())
    return plot
