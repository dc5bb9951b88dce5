"""The pieces a report is written with: a markdown document (index.html is that markdown rendered, with every image
inlined) and the plots of a grid's cells, one colour per cell."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from lit_resformer.writing import integer_ticks, markdown_table, pyplot, save_figure


class Document:
    def __init__(self, base: Path) -> None:
        self.base = base  # image links are relative to the report's directory
        self.parts: list[str] = []

    def heading(self, level: int, text: str) -> None:
        self.parts.append(f"{'#' * level} {text}\n")

    def text(self, text: str) -> None:
        self.parts.append(text + "\n")

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        self.parts.append(markdown_table(header, rows) + "\n")

    def image(self, path: Path, caption: str) -> None:
        self.parts.append(f"![{caption}]({path.relative_to(self.base).as_posix()})\n")

    def raw(self, markdown_text: str) -> None:
        self.parts.append(markdown_text.rstrip() + "\n")

    def markdown(self) -> str:
        return "\n".join(self.parts)


class Plotter:
    def __init__(self, directory: Path, cells: Sequence[str]):
        self.plt = pyplot()
        self.directory = directory
        palette = self.plt.get_cmap("tab10" if len(cells) <= 10 else "tab20")
        self.colors = {cell: palette(i % palette.N) for i, cell in enumerate(cells)}

    def save(self, fig, name: str) -> Path:
        return save_figure(fig, self.directory / f"{name}.png")

    def curves(self, name: str, curves: dict[str, pd.Series], title: str, ylabel: str, zero_line: str | None = None,
               reference: tuple[str, float] | None = None) -> Path:
        """One line per cell; `zero_line` labels a dashed line at 0, `reference` = (label, y) a dotted one."""
        fig, ax = self.plt.subplots(figsize=(8, 4.5))
        if zero_line:
            ax.axhline(0.0, color="black", lw=1, ls="--", label=zero_line)
        if reference:
            ax.axhline(reference[1], color="grey", lw=1.2, ls=":", label=reference[0])
        for cell, curve in curves.items():
            ax.plot(curve.index, curve.values, label=cell, color=self.colors.get(cell), lw=1.4)
        ax.set_xlabel("step")
        integer_ticks(ax.xaxis)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return self.save(fig, name)

    def grouped_bars(self, name: str, table: pd.DataFrame, title: str, ylabel: str) -> Path:
        """table: rows = cells, columns = groups (domains)."""
        fig, ax = self.plt.subplots(figsize=(max(6, 1.2 * len(table.columns) + 2), 4.5))
        width = 0.8 / max(1, len(table.index))
        x = np.arange(len(table.columns))
        for i, cell in enumerate(table.index):
            ax.bar(x + i * width - 0.4 + width / 2, table.loc[cell].values, width, label=cell, color=self.colors.get(cell))
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_xticks(x, list(table.columns), rotation=20)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
        return self.save(fig, name)

    def lines_by_x(self, name: str, lines: dict[str, dict[float, float]], title: str, xlabel: str, ylabel: str, logy: bool) -> Path:
        fig, ax = self.plt.subplots(figsize=(7, 4.5))
        for label, points in lines.items():
            xs = sorted(points)
            ax.plot(xs, [points[x] for x in xs], marker="o", label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if logy:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return self.save(fig, name)
