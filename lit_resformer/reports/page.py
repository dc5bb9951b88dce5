"""The HTML pages of the reports (a grid's index.html, the scoreboard page): one self-contained file each, laid out
to answer first. A page opens with its lead (what it compares, the verdicts), then a table of contents, then its
sections, each with an anchor; sections a reader rarely needs (cells, runs, provenance) and the prose on how a
number is computed are folded (`<details>`). It fits a phone: a viewport tag, tables that scroll inside their own
box, text that wraps. Every verdict is shown as a chip of its own colour and symbol, so it reads without colour too.

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

PAGE_STYLE = HTML_STYLE + (
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


def markdown_body(text: str, base: Path) -> str:
    """`text` rendered as markdown_to_html renders it (escaped, unsafe links dropped, local PNGs under `base`
    inlined), without its page around it, and every table in a box that scrolls sideways."""
    page = markdown_to_html(text, base, "")
    body = page[page.index("<body>\n") + len("<body>\n"):page.rindex("\n</body>")]
    return body.replace("<table>", '<div class="wide"><table>').replace("</table>", "</table></div>")


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
