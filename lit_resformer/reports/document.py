"""The pieces a report is written with: a document (report.md, and index.html laid out by lit_resformer.reports.page:
its lead first, a table of contents, sections with anchors, method prose and reference sections folded) and the
plots of a grid's cells, one style per cell on every plot of the grid."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

import numpy as np
import pandas as pd

from lit_resformer.reports.page import Section, markdown_body, page
from lit_resformer.writing import (
    integer_ticks,
    markdown_table,
    outside_legend,
    pyplot,
    save_figure,
    series_styles,
    token_axis,
)

GIT_HASH = re.compile(r"\b([0-9a-f]{8})[0-9a-f]{32}\b")  # a full commit hash; its first 8 name it as well
HEADING = re.compile(r"^(#{1,6}) (.+)$", re.M)
FOOTNOTE_MARKS = "¹²³⁴⁵⁶⁷⁸⁹"


def short_hashes(text: str) -> str:
    return GIT_HASH.sub(r"\1", text)


def footnote_repeats(rows: list[list[str]], column: int) -> tuple[list[list[str]], list[str]]:
    """The rows with each `; `-separated phrase of `column` that recurs in several rows replaced by a footnote mark,
    and the footnotes: a note repeated on every row is read once, below the table."""
    phrases = [[p for p in row[column].split("; ") if p] for row in rows]
    counts = Counter(p for row in phrases for p in set(row))
    repeated = [p for p in dict.fromkeys(p for row in phrases for p in row) if counts[p] > 1][:len(FOOTNOTE_MARKS)]
    if not repeated:
        return rows, []
    marks = {p: FOOTNOTE_MARKS[i] for i, p in enumerate(repeated)}
    out = [[*row[:column], "; ".join(marks.get(p, p) for p in own), *row[column + 1:]] for row, own in zip(rows, phrases,
                                                                                                         strict=True)]
    return out, [f"{marks[p]} {p}" for p in repeated]


@dataclass
class Part:
    kind: str  # heading | text | method | lead
    markdown: str
    level: int = 0  # of a heading
    collapsed: bool = False  # of a level-2 heading: its section is folded in index.html
    html: str = ""  # of the lead or a table in a box of a class: the HTML that stands for its markdown in index.html


class Document:
    def __init__(self, base: Path) -> None:
        self.base = base  # image links are relative to the report's directory
        self.parts: list[Part] = []

    def heading(self, level: int, text: str, collapsed: bool = False) -> None:
        self.parts.append(Part("heading", f"{'#' * level} {text}\n", level, collapsed))

    def text(self, text: str) -> None:
        self.parts.append(Part("text", text + "\n"))

    def method(self, text: str) -> None:
        """Prose on how the numbers below are computed: in report.md as text, folded in index.html."""
        self.parts.append(Part("method", text + "\n"))

    def lead(self, markdown_text: str, html_text: str) -> None:
        """What the report answers first, in both forms (index.html shows verdict chips where report.md has text)."""
        self.parts.append(Part("lead", markdown_text.rstrip() + "\n", html=html_text))

    def table(self, header: list[str], rows: list[list[str]], footnote: str | None = None,
              box_class: str | None = None) -> None:
        """A table with full git hashes shortened; `footnote` names a column whose phrases recurring over rows are
        moved to footnotes below it; in index.html the table's box also has the class `box_class`, laid out by
        lit_resformer.reports.page."""
        rows = [[short_hashes(str(value)) for value in row] for row in rows]
        notes: list[str] = []
        if footnote is not None:
            rows, notes = footnote_repeats(rows, header.index(footnote))
        text = markdown_table(header, rows) + "\n"
        self.parts.append(Part("text", text, html=markdown_body(text, self.base, box_class) if box_class else ""))
        if notes:
            self.text("\n\n".join(notes))

    def image(self, path: Path, caption: str) -> None:
        self.text(f"![{caption}]({path.relative_to(self.base).as_posix()})")

    def raw(self, markdown_text: str) -> None:
        """Markdown written elsewhere; its headings start sections as heading() does."""
        text = markdown_text.rstrip()
        starts = [m.start() for m in HEADING.finditer(text)]
        if not starts or starts[0] > 0:
            self.text(text[:starts[0] if starts else len(text)].strip("\n"))
        for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
            match = HEADING.match(text, start)
            self.heading(len(match.group(1)), match.group(2))
            body = text[match.end():end].strip("\n")
            if body:
                self.text(body)

    def markdown(self) -> str:
        return "\n".join(part.markdown for part in self.parts)

    def html(self) -> str:
        """index.html: the level-1 heading as its title, the lead, then a section per level-2 heading."""
        title, lead, sections = "", [], []
        runs: list[tuple[str, list[Part]]] = []  # the current section's parts, in runs of method / other prose

        def body(parts: list[Part]) -> str:
            """Consecutive parts' markdown rendered together; a part with HTML of its own as that."""
            chunks: list[str] = []
            for rendered, group in groupby(parts, key=lambda part: bool(part.html)):
                texts = [part.html if rendered else part.markdown for part in group]
                chunks += texts if rendered else [markdown_body("\n".join(texts), self.base)]
            return "\n".join(chunks)

        def close() -> None:
            if sections:
                sections[-1].html = "\n".join(
                    f'<details class="method"><summary>How this is computed</summary>{body(parts)}</details>'
                    if kind == "method" else body(parts) for kind, parts in runs)
            runs.clear()

        for part in self.parts:
            if part.kind == "heading" and part.level == 1:
                title = part.markdown.lstrip("# ").strip()
            elif part.kind == "heading" and part.level == 2:
                close()
                sections.append(Section(part.markdown.lstrip("# ").strip(), "", part.collapsed))
            elif part.kind == "lead" or not sections:
                lead.append(part.html or markdown_body(part.markdown, self.base))
            else:
                kind = "method" if part.kind == "method" else "text"
                if runs and runs[-1][0] == kind:
                    runs[-1][1].append(part)
                else:
                    runs.append((kind, [part]))
        close()
        return page(title, "\n".join(lead), sections)


Band = tuple[pd.Series, pd.Series]  # (low, high) over the same steps as a curve: its spread across seeds
BAR_HATCHES = ("", "//", "..", "xx", "\\\\", "oo")  # bars of neighbouring cells told apart without their colour
MARKS_PER_CURVE = 8  # markers drawn along a curve of many points: enough to tell the series apart, few enough to read
BRANCH_LEGEND = "decay to a budget (marker: its end)"


@dataclass(frozen=True)
class LadderLayout:
    """How a ladder grid's curves are drawn (lit_resformer.grids.spec.Ladder). A rung is its trunk up to the step it
    branches at, so it is drawn from there only: its own decay, in its trunk's style, its trunk's marker at its end, one
    legend entry for them all. A ladder crossed with a matrix (the learning-rate surface: a trunk per arm and rate)
    draws one panel per family, each trunk in the style of its point, the same in every panel, labelled by the point."""

    branches: dict[str, tuple[str, int]]  # rung -> (its trunk, the step it branches at)
    trunks: dict[str, tuple[str, str]]  # trunk -> (its panel: its family if crossed with a matrix, else ""; its label)

    @classmethod
    def of(cls, cells_info: dict[str, dict]) -> LadderLayout | None:
        """From a grid's manifest entries (cell -> entry); None without a ladder. A trunk's point is its name less its
        family and ",trunk" (lit_resformer.grids.spec.trunk_cell)."""
        branches = {cell: (info["trunk"], info["overrides"]["model.decay_start"]) for cell, info in cells_info.items()
                    if info.get("trunk")}
        families = {trunk: cells_info[trunk]["family"] for trunk, _ in branches.values()}
        points = {t: t.removesuffix(",trunk").removeprefix(family).removeprefix(",") for t, family in families.items()}
        crossed = any(points.values())
        trunks = {t: (family, points[t]) if crossed else ("", family) for t, family in families.items()}
        return cls(branches, trunks) if branches else None

    def trunk(self, cell: str) -> str | None:
        """The trunk a cell is drawn as part of (itself for a trunk), None for a cell outside the ladder."""
        return self.branches[cell][0] if cell in self.branches else cell if cell in self.trunks else None


class Plotter:
    """The plots of a grid's cells, each cell in its own style (lit_resformer.writing.series_styles) on every plot.
    `tokens_per_step` ({cell: training tokens a step}) puts curves against training tokens, where every cell drawn
    has a rate; else they are drawn against the step. A ladder grid's curves follow its `ladder` layout."""

    def __init__(self, directory: Path, cells: Sequence[str], tokens_per_step: dict[str, float | None] | None = None,
                 ladder: LadderLayout | None = None):
        self.plt = pyplot()
        self.directory = directory
        self.styles = series_styles(cells)
        self.tokens_per_step = tokens_per_step or {}
        self.ladder = ladder
        # a ladder crossed with a matrix draws each point in one style in every family's panel
        self.point_styles = series_styles(list(dict.fromkeys(label for _, label in ladder.trunks.values()))) if ladder else {}

    def save(self, fig, name: str) -> Path:
        return save_figure(fig, self.directory / f"{name}.png")

    def _curve_style(self, cell: str) -> tuple[str, str | None, dict]:
        """A curve's panel, legend label (None: the branches' one entry stands for it) and style."""
        trunk = self.ladder and self.ladder.trunk(cell)
        if not trunk:
            return "", cell, self.styles.get(cell, {})
        panel, label = self.ladder.trunks[trunk]
        style = self.point_styles[label] if panel else self.styles.get(trunk, {})
        return panel, (label if cell == trunk else None), style

    def curves(self, name: str, curves: dict[str, pd.Series], title: str, ylabel: str, zero_line: str | None = None,
               reference: tuple[str, float] | None = None, bands: dict[str, Band] | None = None) -> Path:
        """One line per cell against training tokens (else steps), with its band (min to max over seeds) where
        `bands` has one; `zero_line` labels a dashed line at 0, `reference` = (label, y) a dotted one."""
        drawn = {cell: self._curve_style(cell) for cell in curves}
        panels = list(dict.fromkeys(panel for panel, _, _ in drawn.values()))
        fig, axes = self.plt.subplots(1, len(panels), figsize=(9 if len(panels) == 1 else 5.5 * len(panels), 4.5),
                                      sharey=True, squeeze=False)
        by_tokens = all(self.tokens_per_step.get(cell) for cell in curves)
        branched = False
        for ax, panel in zip(axes[0], panels, strict=True):
            if zero_line:
                ax.axhline(0.0, color="black", lw=1, ls="--", label=zero_line)
            if reference:
                ax.axhline(reference[1], color="grey", lw=1.2, ls=":", label=reference[0])
            for cell in (cell for cell in curves if drawn[cell][0] == panel):
                _, label, style = drawn[cell]
                curve, band = curves[cell], (bands or {}).get(cell)
                scale = self.tokens_per_step[cell] if by_tokens else 1
                if branch := self.ladder and self.ladder.branches.get(cell):
                    # before its branch the rung is its trunk, drawn already: from the last point logged there on
                    before = curve.index[curve.index <= branch[1]]
                    start = before.max() if len(before) else branch[1]
                    curve = curve[curve.index >= start]
                    band = band and tuple(side[side.index >= start] for side in band)
                    if curve.empty:
                        continue
                    branched = True
                ax.plot(curve.index * scale, curve.values, label=label or "_branch", lw=1.4 if label else 1.0,
                        markersize=5, markevery=(max(1, len(curve) // MARKS_PER_CURVE) if label else [len(curve) - 1]),
                        **style)
                if band is not None:
                    low, high = band
                    ax.fill_between(low.index * scale, low.values, high.values, color=style.get("color"), alpha=0.15,
                                    lw=0)
            if by_tokens:
                token_axis(ax)
            else:
                ax.set_xlabel("step")
                integer_ticks(ax.xaxis)
            ax.set_title(panel if len(panels) > 1 else f"{title}: {panel}" if panel else title)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(ylabel)
        if len(panels) > 1:
            fig.suptitle(title)
        last = axes[0][-1]
        if branched:
            last.plot([], [], color="grey", lw=1.0, marker="o", label=BRANCH_LEGEND)
        outside_legend(last)  # the panels share their styles: one point, one style
        return self.save(fig, name)

    def grouped_bars(self, name: str, table: pd.DataFrame, title: str, ylabel: str,
                     errors: pd.DataFrame | None = None) -> Path:
        """table: rows = cells, columns = groups (domains); errors: the same shape, each bar's ± error bar."""
        fig, ax = self.plt.subplots(figsize=(max(7, 1.2 * len(table.columns) + 3.5), 4.5))
        width = 0.8 / max(1, len(table.index))
        x = np.arange(len(table.columns))
        for i, cell in enumerate(table.index):
            yerr = None if errors is None else errors.loc[cell].reindex(table.columns).values
            ax.bar(x + i * width - 0.4 + width / 2, table.loc[cell].values, width, label=cell,
                   color=self.styles.get(cell, {}).get("color"), hatch=BAR_HATCHES[i % len(BAR_HATCHES)], edgecolor="white", lw=0,
                   yerr=yerr, capsize=2, error_kw={"lw": 0.8})
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_xticks(x, list(table.columns), rotation=20)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3, axis="y")
        outside_legend(ax)
        return self.save(fig, name)

    def lines_by_x(self, name: str, lines: dict[str, dict[float, float]], title: str, xlabel: str, ylabel: str, logy: bool) -> Path:
        fig, ax = self.plt.subplots(figsize=(8, 4.5))
        for label, points in lines.items():
            xs = sorted(points)
            ax.plot(xs, [points[x] for x in xs], label=label, **self.styles.get(label, {"marker": "o"}))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if logy:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        outside_legend(ax)
        return self.save(fig, name)
