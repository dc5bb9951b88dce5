"""The HTML pages of the reports (a grid's index.html, the scoreboard page): one self-contained file each, laid out
to answer first. A page opens with its lead (what it compares, the verdicts), then a table of contents, then its
sections, each with an anchor; sections a reader rarely needs (cells, runs, provenance) and the prose on how a
number is computed are folded (`<details>`). It fits a phone: a viewport tag, tables that turn each row into a card
on a narrow screen (a wide one scrolls inside its own box), text that wraps, plots that scale to the width. Every
verdict is shown as a chip of its own colour and symbol, so it reads without colour too.

The markdown of each part is rendered by lit_resformer.writing.markdown_to_html, whose escaping and link filtering
apply unchanged; only HTML written here (chips, the layout) is added around it.
"""

from __future__ import annotations

import base64
import html
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from lit_resformer.verdicts.rendering import NUMBER_COLUMNS
from lit_resformer.writing import HTML_STYLE, markdown_to_html

# verdict -> (symbol, colour): the symbols differ in shape, so a chip, a plot marker or a terminal row reads the same
# in grey; the colours are dark enough for white text on them (contrast >= 4.5:1).
VERDICT_STYLE = {
    "reproduced": ("✓", "#1a7f37"),
    "contradicted": ("✗", "#c62828"),
    "mixed": ("±", "#8250df"),
    "inconclusive": ("~", "#8a5a00"),
    "not tested": ("–", "#57606a"),
}

# ---- Tables of verdicts (a grid report's Claims section, in a box of class "verdicts") ----------------------------------
# Their thirteen columns need about 1,200 px. In a window wider than CARDS_UP_TO_PX the table fits its box, which
# takes the window's width up to 1,500 px, centred on the page: prose wraps (a metric or a note anywhere, for the long
# identifiers in them), each number and interval (verdicts.rendering.NUMBER_COLUMNS) stays on one line, and the claim
# and the note keep a width that reads (a note of run differences is otherwise a column one word wide, rows a screen
# tall; with the metric kept as wide too, thirteen columns no longer fit 1,400 px). In a narrower one each row is a
# card: its cells flow into as many columns as fit (one on a phone), each under its column's name (the data-label
# every table cell carries), the claim and the note on a line of their own, the numbers after the verdict filling its
# line.
_CELL = ".verdicts td"
CARDS_UP_TO_PX = 1300


def _cells(*columns: str) -> str:
    """A selector of the cells of `columns` in a table of verdicts."""
    return ",".join(f'{_CELL}[data-label="{name}"]' for name in columns)


VERDICT_TABLE_STYLE = "".join([
    ".wide.verdicts{width:min(1500px,100vw - 2em);max-width:none;margin-left:calc(50% - min(750px,50vw - 1em))}",
    ".verdicts table{width:100%;font-size:.85em}.verdicts td,.verdicts th{padding:.25em .45em}",
    f"{_CELL}{{overflow-wrap:break-word}}{_cells('metric', 'note')}{{overflow-wrap:anywhere}}",
    f"{_cells(*NUMBER_COLUMNS)}{{white-space:nowrap}}",
    f"{_cells('claim')}{{min-width:min(13em,13vw)}}{_cells('note')}{{min-width:min(15em,15vw)}}",
    f"@media (max-width:{CARDS_UP_TO_PX}px){{",
    ".verdicts table,.verdicts tbody{display:block}.verdicts thead{display:none}",
    ".verdicts tr{display:grid;grid-template-columns:repeat(auto-fill,minmax(19em,1fr));grid-auto-flow:dense;"
    "border:1px solid #bbb;margin:.6em 0}",
    f"{_CELL}{{border:0;min-width:0;overflow-wrap:anywhere}}{_cells('claim', 'note')}{{grid-column:1/-1}}",
    f"{_CELL}:empty{{display:none}}",
    f"{_CELL}{{position:relative;padding-left:8.5em}}",
    f"{_CELL}::before{{content:attr(data-label);position:absolute;left:.45em;width:7.6em;font-weight:600;color:#555}}",
    "}",
])
# ---- end of the tables of verdicts -------------------------------------------------------------------------------------

# ---- Every other table of a report on a narrow screen ---------------------------------------------------------------------
# Up to NARROW_PX a table of a grid report (final losses, cost, runs, cells, ...) would scroll sideways in its box and
# hide its Δ columns; there each row is a card instead: its first cell (what the row is: a cell, a run) on a line of
# its own, then every other cell on a line under its column's name (the data-label markdown_to_html gives each cell),
# empty cells left out. The verdicts' own cards and the board's table (board.css) keep their layouts.
NARROW_PX = 700
_TABLE = ".wide:not(.verdicts)>table:not(.board)"
NARROW_TABLE_STYLE = "".join([
    f"@media (max-width:{NARROW_PX}px){{",
    f"{_TABLE},{_TABLE}>tbody,{_TABLE} tr,{_TABLE} td{{display:block}}{_TABLE}>thead{{display:none}}",
    f"{_TABLE} tr{{border:1px solid #bbb;margin:.5em 0;padding:.15em 0}}",
    f"{_TABLE} td{{border:0;text-align:left;padding:.1em .6em;overflow-wrap:anywhere}}",
    f"{_TABLE} td:first-child{{font-weight:600}}{_TABLE} td:empty{{display:none}}",
    f"{_TABLE} td:not(:first-child)::before{{content:attr(data-label) \": \";color:#555}}",
    "}",
])

PAGE_STYLE = HTML_STYLE + VERDICT_TABLE_STYLE + NARROW_TABLE_STYLE + (
    "body{line-height:1.45}p,li,summary{overflow-wrap:anywhere}"
    ".wide{overflow-x:auto;max-width:100%}"
    "td,th,td:first-child,th:first-child{text-align:left;vertical-align:top}td{font-variant-numeric:tabular-nums}"
    "img{height:auto}"
    ".chip{display:inline-block;padding:0 .5em;border-radius:.8em;color:#fff;font-weight:600;white-space:nowrap;"
    "font-size:.85em;line-height:1.6}"
    ".lead{border:1px solid #ccc;border-radius:6px;padding:.2em 1em;background:#fafafa}"
    ".tally .chip{margin-right:.3em}.regime{color:#444;font-size:.9em}"
    "ol.claims{padding-left:1.2em}ol.claims li{margin:.45em 0}.effect{color:#444;font-size:.9em}"
    "nav.toc ul{columns:2;padding-left:1.2em;margin:.3em 0}"
    "details>summary{cursor:pointer}details>summary>h2{display:inline}"
    "details.method{margin:.5em 0;color:#333}details.method>summary{color:#555}"
    "@media (max-width:700px){body{margin:.5em auto;padding:0 .6em}nav.toc ul{columns:1}}"
)


def chip_text(verdict: str, fragile: bool = False, count: int | None = None) -> str:
    """A verdict as plain text with its symbol, e.g. "✓ reproduced (fragile)", or with a count, "✓ 3 reproduced"."""
    return (f"{VERDICT_STYLE[verdict][0]} {'' if count is None else f'{count} '}{verdict}"
            + (" (fragile)" if fragile else ""))


def chip(verdict: str, fragile: bool = False, count: int | None = None) -> str:
    text = html.escape(chip_text(verdict, fragile, count))
    return f'<span class="chip" style="background:{VERDICT_STYLE[verdict][1]}">{text}</span>'


def tally_html(counts: dict[str, int], total_words: str) -> str:
    """`12 claims: ✓ 3 reproduced ✗ 2 contradicted …`, a chip for each verdict that occurs."""
    chips = " ".join(chip(v, count=n) for v, n in counts.items() if n)
    return f'<p class="tally"><b>{html.escape(total_words)}:</b> {chips}</p>'


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def markdown_body(text: str, base: Path, box_class: str | None = None) -> str:
    """`text` rendered as markdown_to_html renders it (escaped, unsafe links dropped, local PNGs under `base`
    inlined), without its page around it, and every table in a box that scrolls sideways (also of class
    `box_class` where given)."""
    page = markdown_to_html(text, base, "")
    body = page[page.index("<body>\n") + len("<body>\n"):page.rindex("\n</body>")]
    box = f'<div class="wide {box_class}">' if box_class else '<div class="wide">'
    return body.replace("<table>", f"{box}<table>").replace("</table>", "</table></div>")


@dataclass
class Section:
    title: str
    html: str
    collapsed: bool = False  # folded under its heading: a section a reader opens when needed

    def render(self) -> str:
        heading = f"<h2>{html.escape(self.title)}</h2>"
        if self.collapsed:
            return f'<details id="{slug(self.title)}"><summary>{heading}</summary>\n{self.html}\n</details>'
        return f'<section id="{slug(self.title)}">{heading}\n{self.html}\n</section>'


def page(title: str, lead: str, sections: list[Section], style: str = "", script: str = "") -> str:
    """The whole page: title, lead (HTML), table of contents, sections; a page's own CSS and JavaScript inline."""
    toc = "".join(f'<li><a href="#{slug(s.title)}">{html.escape(s.title)}</a></li>' for s in sections)
    nav = f'<nav class="toc"><b>Contents</b><ul>{toc}</ul></nav>' if len(sections) > 1 else ""
    body = "\n".join(s.render() for s in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{PAGE_STYLE}{style}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n{lead}\n{nav}\n{body}\n"
        + (f"<script>{script}</script>\n" if script else "") + "</body></html>\n"
    )


def image_html(png: Path, alt: str) -> str:
    """`png` inlined as base64 data, marked to load lazily, its size in pixels (its header's) keeping its place."""
    data = png.read_bytes()
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk, first in every PNG
    return (f'<img loading="lazy" alt="{html.escape(alt)}" width="{width}" height="{height}" '
            f'src="data:image/png;base64,{base64.b64encode(data).decode()}">')
