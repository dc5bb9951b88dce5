"""Headless Chromium for the report tests: load a page in a frame, let a script record what it saw."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import pytest

from lit_resformer.writing import BROWSER_FLAGS, BROWSER_MISSING, find_browser


def browser() -> str:
    """The Chromium binary, or skip the test."""
    found = find_browser()
    if found is None:
        pytest.skip(BROWSER_MISSING)
    return found


def framed_dom(page: Path, onload: str, work_dir: Path, budget_ms: int = 5000,
               size: tuple[int, int] | None = None) -> str:
    """The DOM of a probe page that loads `page` in a frame and, once it has loaded, runs `onload` (JavaScript
    with `frame` bound to the frame's document) to record what it found as attributes of the probe's body.
    `size` = (width, height) in CSS pixels lays the page out in a frame of that size, as a window of that size
    would (a phone's width, a desktop's)."""
    probe = work_dir / "probe.html"
    style = f' style="width:{size[0]}px;height:{size[1]}px;border:0"' if size else ""
    probe.write_text(
        f'<html><body style="margin:0"><iframe id="report"{style} src="{page.as_uri()}"></iframe><script>'
        'document.getElementById("report").onload = function () {'
        f"  const frame = this.contentDocument; {onload}"
        "};</script></body></html>"
    )
    window = f"--window-size={size[0] + 40},{size[1] + 40}" if size else "--window-size=1200,900"
    return subprocess.run([browser(), *BROWSER_FLAGS, window, f"--virtual-time-budget={budget_ms}", "--dump-dom",
                           probe.as_uri()], capture_output=True, text=True, timeout=180).stdout


# What a reader sees of a page at one size: whether it scrolls sideways, which of `selectors` are within the first
# screen (their first match's bottom edge above the frame's height), and how many images decoded.
LAYOUT_PROBE = """
const firstScreen = {};
for (const selector of SELECTORS) {
  const element = frame.querySelector(selector);
  firstScreen[selector] = element !== null && element.getBoundingClientRect().bottom <= view.innerHeight;
}
const images = Array.from(frame.images);
const seen = {width: view.innerWidth, bodyScrollWidth: frame.body.scrollWidth,
              pageScrollWidth: frame.documentElement.scrollWidth, firstScreen: firstScreen, images: images.length};
// a lazy image loads as it nears the screen: each is asked to load now, and counts once loaded with its pixels (a
// load is what the browser's virtual time waits for; a decode is not)
Promise.all(images.map(i => { i.loading = "eager";
                              return i.complete ? null : new Promise(done => { i.onload = i.onerror = done; }); }))
  .then(() => document.body.setAttribute("data-found", JSON.stringify(
    {...seen, imagesLoaded: images.filter(i => i.complete && i.naturalWidth > 0).length})));
"""


def run_probe(page: Path, work_dir: Path, width: int, height: int, script: str) -> dict:
    """What `script` (JavaScript with `frame` and `view` bound to the page's document and window) found in `page` laid
    out at width x height: the JSON it stores as the probe body's data-found attribute."""
    dom = framed_dom(page, f"const view = frame.defaultView; {script}", work_dir, budget_ms=10000,
                     size=(width, height))
    found = re.search(r'data-found="([^"]*)"', dom)
    assert found, dom[-500:]
    return json.loads(html.unescape(found.group(1)))


def layout(page: Path, work_dir: Path, width: int, height: int, selectors: list[str]) -> dict:
    """LAYOUT_PROBE's findings for `page` laid out at width x height."""
    return run_probe(page, work_dir, width, height, f"const SELECTORS = {json.dumps(selectors)};" + LAYOUT_PROBE)


# How a table of the page lays out: its width against the box it scrolls in (its nearest ancestor that scrolls
# sideways), whether its rows are laid out as table rows, and for each of COLUMNS (by the data-label of its cells) the
# first row's cell as it is placed (edges, size, shown at all) and the most lines any row's cell of it takes.
TABLE_PROBE = """
const table = frame.querySelector(TABLE);
let box = table.parentElement;
while (box !== frame.body && !/auto|scroll/.test(view.getComputedStyle(box).overflowX)) box = box.parentElement;
const rows = Array.from(table.tBodies[0].rows);
function lines(cell) {  // the lines its text takes: the distinct tops of its text's boxes
  const range = frame.createRange();
  range.selectNodeContents(cell);
  return new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top))).size;
}
const columns = {};
for (const name of COLUMNS) {
  const cells = rows.map(row => Array.from(row.cells).find(cell => cell.dataset.label === name));
  const first = cells[0], edges = first.getBoundingClientRect(), style = view.getComputedStyle(first);
  columns[name] = {index: first.cellIndex, left: edges.left, right: edges.right, width: edges.width,
                   height: edges.height, shown: style.display !== "none" && style.visibility !== "hidden",
                   maxLines: Math.max(...cells.map(lines))};
}
document.body.setAttribute("data-found", JSON.stringify({
  width: view.innerWidth, pageScrollWidth: frame.documentElement.scrollWidth, tableScrollWidth: table.scrollWidth,
  boxClientWidth: box.clientWidth, rowDisplay: view.getComputedStyle(rows[0]).display, columns: columns}));
"""


def table_layout(page: Path, work_dir: Path, width: int, height: int, table: str, columns: list[str]) -> dict:
    """TABLE_PROBE's findings for the first table matching the selector `table` in `page` laid out at width x height."""
    script = f"const TABLE = {json.dumps(table)}; const COLUMNS = {json.dumps(columns)};" + TABLE_PROBE
    return run_probe(page, work_dir, width, height, script)


def probed(page: Path, work_dir: Path, script: str, size: tuple[int, int] = (1400, 900)) -> dict:
    """What `script` found in `page` laid out at `size`: the body of an async JavaScript function, with `frame`
    (the page's document) and `view` (its window) bound, that returns an object (JSON)."""
    return run_probe(page, work_dir, *size, "(async () => {" + script + "})().then("
                     "found => document.body.setAttribute('data-found', JSON.stringify(found)));")
