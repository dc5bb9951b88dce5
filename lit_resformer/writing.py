"""Writing results: atomic files, markdown tables, self-contained HTML, PNG plots and pictures of pages.

Everything that writes a report (the grid report, analysis, eval and benchmarks) goes through these, so a reader
never sees half a file and every table has the same form. Only the standard library is imported up front;
matplotlib and markdown are imported when a plot or a page is made.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import json
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

TEMPORARY_SUFFIX = ".tmp"  # of the temporary files of atomic writes: `.<name>.<random>.tmp` beside <name>


@contextlib.contextmanager
def atomic_open(path: str | Path, sync: bool = True) -> Iterator[BinaryIO]:
    """A binary file to write that appears at `path` (renamed over it) only when the block succeeds: readers never see
    half a file. The temporary file lies in the same directory, so the rename is atomic and a process killed while
    writing leaves a `.<name>.*.tmp` there (never in the system's temporary folder). `sync` flushes it to disk first.
    The file gets the permissions of any new file (0644 under the usual umask 022), not tempfile's private 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}{TEMPORARY_SUFFIX}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the kernel applies the umask
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | Path, content: str | bytes) -> Path:
    """Write `content` to `path` atomically (`atomic_open`)."""
    with atomic_open(path) as f:
        f.write(content.encode() if isinstance(content, str) else content)
    return Path(path)


def atomic_write_json(path: str | Path, data: Any, **dumps: Any) -> Path:
    """`data` as indented JSON (keyword arguments go to json.dumps), written atomically."""
    return atomic_write(path, json.dumps(data, **{"indent": 2, **dumps}) + "\n")


def markdown_table(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table; values are shown with str() and `|` inside them is escaped."""

    def line(values: Sequence[Any]) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    return "\n".join([line(header), "|" + "|".join("---" for _ in header) + "|", *(line(row) for row in rows)])


def aligned_lines(rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> list[str]:
    """Rows of cells as plain-text lines whose columns line up: each cell padded to its column's widest, two spaces
    apart, the columns numbered in `right` aligned right."""
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
    return ["  ".join(cell.rjust(width) if i in right else cell.ljust(width)
                      for i, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip() for row in rows]


HTML_STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
    "td,th{border:1px solid #bbb;padding:0.25em 0.6em;text-align:right}"
    "td:first-child,th:first-child{text-align:left}th{background:#eee}"
    "img{max-width:100%;border:1px solid #ddd}code{background:#f3f3f3}"
)


SAFE_LINK = re.compile(r"^(https?:|mailto:|#|data:image/png;base64,|(?![A-Za-z][A-Za-z0-9+.-]*:))", re.I)


def markdown_to_html(text: str, base: Path, title: str) -> str:
    """A self-contained page: the markdown rendered, local PNGs under `base` embedded as base64 data. Every table
    cell carries its column's name (`data-label`), so a narrow page can show each cell under its name.

    Reports quote configs, data and runs (a grid's description, domain names, error lines), so the markdown is
    rendered as text only: HTML in it is escaped, not passed through, and a link or image whose address has a
    scheme other than http(s)/mailto (e.g. `javascript:`) loses it.
    """
    import markdown
    from markdown.treeprocessors import Treeprocessor

    class DropUnsafeLinks(Treeprocessor):
        def run(self, root):
            for element in root.iter():
                for attribute in ("href", "src"):
                    if attribute in element.attrib and not SAFE_LINK.match(element.attrib[attribute].strip()):
                        del element.attrib[attribute]

    class LabelCells(Treeprocessor):
        def run(self, root):
            for table in root.iter("table"):
                names = ["".join(th.itertext()).strip() for th in table.iter("th")]
                for row in table.iter("tr"):
                    for name, cell in zip(names, row.findall("td"), strict=False):  # the header row has no td
                        cell.set("data-label", name)

    renderer = markdown.Markdown(extensions=["tables"])
    renderer.preprocessors.deregister("html_block")
    renderer.inlinePatterns.deregister("html")
    renderer.treeprocessors.register(DropUnsafeLinks(renderer), "drop_unsafe_links", 0)
    renderer.treeprocessors.register(LabelCells(renderer), "label_cells", 0)
    body = renderer.convert(text)
    root = base.resolve()

    def inline(match: re.Match) -> str:
        path = (base / html.unescape(match.group(1))).resolve()
        if not path.is_file() or root not in path.parents:
            return match.group(0)
        return f'src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}"'

    body = re.sub(r'src="(?!data:)([^"]+\.png)"', inline, body)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{HTML_STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# Every plot's series (a grid's cells, an analysis's models) drawn in one style each, the same on every plot: Okabe and
# Ito's eight colours, told apart by readers with any common colour-vision deficiency (Okabe & Ito 2008, "Color
# Universal Design"), each series also with a marker of its own, so that twelve series stay apart in print and when
# two colours look alike; past eight, the colours come again dashed.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
LINE_STYLES = ("-", "--", ":", "-.")


def series_styles(labels: Sequence[str]) -> dict[str, dict[str, str]]:
    """{label: matplotlib keywords (color, marker, linestyle)}, a different combination for each label in order."""
    return {label: {"color": OKABE_ITO[i % len(OKABE_ITO)], "marker": MARKERS[i % len(MARKERS)],
                    "linestyle": LINE_STYLES[i // len(OKABE_ITO) % len(LINE_STYLES)]}
            for i, label in enumerate(labels)}


def outside_legend(ax, **kwargs):
    """The legend to the right of the axes (or of a figure's last panel), off the data, in a size that reads at the
    page's width."""
    return ax.legend(**{"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 9, "frameon": False,
                        "borderaxespad": 0, **kwargs})


def integer_ticks(axis) -> None:
    """Ticks of a matplotlib axis (e.g. `ax.xaxis`) at whole numbers only: steps, not step 2.5."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def token_axis(ax) -> None:
    """The x axis of a curve drawn against training tokens: labelled so, ticks in engineering notation (20M)."""
    from matplotlib.ticker import EngFormatter

    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_xlabel("training tokens")


def save_figure(fig, path: str | Path) -> Path:
    """Lay out `fig`, write it as a PNG (110 dpi) atomically and close it."""
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    pyplot().close(fig)
    return atomic_write(path, buffer.getvalue())


# Headless Chromium, as every use of it here runs it (the browser tests, scripts/screenshots.py).
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files", "--hide-scrollbars")
BROWSER_MISSING = "needs Chromium (Debian: apt-get install chromium; CI installs it with scripts/install-chromium.sh)"


def find_browser() -> str | None:
    """The first of BROWSERS on the PATH; None when there is none."""
    return next((b for b in BROWSERS if shutil.which(b)), None)


def screenshot(browser: str, page: Path, out: Path, width: int, height: int, budget_ms: int = 5000) -> None:
    """A PNG at `out` of `page` as a window `width` x `height` CSS pixels shows it, once the page has had `budget_ms`
    of virtual time to load (its images included), however busy the machine is."""
    subprocess.run([browser, *BROWSER_FLAGS, f"--screenshot={out}", f"--window-size={width},{height}",
                    f"--virtual-time-budget={budget_ms}", page.as_uri()], capture_output=True, timeout=180, check=True)
