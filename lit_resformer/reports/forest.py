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
    """A claim's words without the closing parenthesis that cites the paper, shortened to `width` characters."""
    bare = re.sub(r"\s*\([^()]*\)$", "", text) or text
    return textwrap.shorten(bare, width, placeholder="…")


def row_label(v: Verdict) -> str:
    """A comparison's row in a grid's forest plot: its words (a per-domain sub-row marked ↳), in two lines at most."""
    return ("↳ " if is_sub_row(v) else "") + textwrap.fill(short_claim(v.claim.claim, 90), 46)


def forest_plot(verdicts: Sequence[Verdict], path: Path, title: str, label: Callable[[Verdict], str] = row_label,
                numbers: bool = False) -> Path | None:
    """The forest plot of these comparisons (per-domain sub-rows included), each row named by `label` (two lines at
    most) and, with `numbers`, its verdict's symbol, Δ and interval printed beside it; None when none has an effect."""
    shown = [v for v in verdicts if v.delta is not None]
    if not shown:
        return None
    panels: dict[str, list[Verdict]] = {}
    for v in shown:
        panels.setdefault(effect_unit(v.claim), []).append(v)
    plt = pyplot()
    heights = [len(rows) + 1.2 for rows in panels.values()]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 0.42 * sum(heights) + 0.9), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (unit, rows) in zip(axes[:, 0], panels.items(), strict=True):
        ys = list(range(len(rows)))[::-1]  # the first comparison on top
        for y, v in zip(ys, rows, strict=True):
            colour = VERDICT_STYLE[v.verdict][1]
            if v.low is not None:
                ax.plot([v.low, v.high], [y, y], color=colour, lw=2.2, solid_capstyle="butt")
            ax.plot([v.delta], [y], marker=MARKERS[v.verdict], color=colour, ms=7, ls="none")
            if (paper := paper_effect(v.claim)) is not None:
                ax.plot([paper], [y], marker="|", color="black", ms=14, mew=2, ls="none")
            if numbers:
                fmt = judging(v.claim).format_value
                interval = "" if v.low is None else f" [{fmt(v.low)}, {fmt(v.high)}]"
                ax.annotate(f"{VERDICT_STYLE[v.verdict][0]} {fmt(v.delta)}{interval}", (1.03, y),
                            xycoords=("axes fraction", "data"), va="center", fontsize=8.5, color=colour)
        ax.axvline(0.0, color="black", lw=0.8, ls="--")
        ax.set_yticks(ys, list(map(label, rows)), fontsize=8.5)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlabel(unit, fontsize=9)
        ax.grid(alpha=0.3, axis="x")
    handles = [plt.Line2D([], [], marker=MARKERS[name], color=colour, ls="none", ms=7, label=name)
               for name, (_, colour) in VERDICT_STYLE.items() if any(v.verdict == name for v in shown)]
    if any(paper_effect(v.claim) is not None for v in shown):  # the legend names only marks the plot draws
        handles.append(plt.Line2D([], [], marker="|", color="black", ms=12, mew=2, ls="none",
                                  label="the paper's effect"))
    handles.append(plt.Line2D([], [], color="grey", lw=2.2, label="95% interval"))
    axes[0, 0].legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.02), ncol=4, fontsize=8.5, frameon=False)
    fig.suptitle(title, fontsize=11, x=0.01, ha="left")
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
