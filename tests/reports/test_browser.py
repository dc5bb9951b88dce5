"""The grid report and the scoreboard page in a real browser (headless Chromium), at a desktop's width and at a
phone's: nothing scrolls sideways, the tally and the first claim are on the first screen, every image loads (a lazy
one once asked to). Skipped where Chromium is not installed (CI installs it: scripts/install-chromium.sh)."""

from pathlib import Path

import pytest
from helpers import chromium

from lit_resformer.cli import main
from lit_resformer.reports.grid_report import write_report
from tests.helpers.claims_grids import judged_grid

SIZES = [(1400, 900), (420, 800)]  # CSS pixels: a desktop window, a phone
FIRST_CLAIM = {"report": "ol.claims li", "scoreboard": "table.board tbody tr"}  # the first claim of each page


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    chromium.browser()
    tmp = tmp_path_factory.mktemp("browser")
    grid_dir = judged_grid(tmp)
    report = write_report(grid_dir)
    board = tmp / "scoreboard.html"
    main(["claims", str(grid_dir.parent), "--html", str(board)])
    return {"report": report, "scoreboard": board}


@pytest.mark.integration
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}px")
@pytest.mark.parametrize("name", ["report", "scoreboard"])
def test_page_fits_and_answers_on_the_first_screen(pages, name, size, tmp_path):
    width, height = size
    seen = chromium.layout(pages[name], tmp_path, width, height, [".tally", FIRST_CLAIM[name]])
    assert seen["width"] == width
    assert seen["bodyScrollWidth"] <= width and seen["pageScrollWidth"] <= width, seen  # no sideways scrolling
    assert seen["firstScreen"] == {".tally": True, FIRST_CLAIM[name]: True}, seen
    assert seen["images"] > 0 and seen["imagesLoaded"] == seen["images"], seen
