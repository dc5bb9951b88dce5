"""The README's screenshots, rendered from the committed results by one command (`make screenshots`):

- fig7-evidence's report page, as `lit-resformer report` writes it, and the board page, as `lit-resformer claims
  docs/results --html` writes it, each at 1,400 x 900 and 420 x 900 CSS pixels in headless Chromium:
  docs/figures/{report,scoreboard}-first-screen-{1400,420}px.png, and the report scrolled to its claims table:
  docs/figures/report-claims-{1400,420}px.png;
- docs/figures/screenshots.json: the commit they were rendered at and its date, whether the results, configs or code
  differed from it, and the tally the pictures show (how many claims of the paper, and beyond it, have each verdict),
  read from `claims --json`. tests/test_screenshots.py compares that tally with the board's, so that the pictures
  cannot go stale unnoticed.

The report is written into a copy of docs/results in a temporary folder, beside this checkout's configs (where it
finds the grid files, as the report in the checkout does): the checkout is left as it was. Nothing in the files depends
on the time they were made (the date is the commit's), so that a second run over the same results and code writes the
same files. Without Chromium it refuses in one line (exit status 2) before computing anything.

    python scripts/screenshots.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results"
FIGURES = REPO / "docs" / "figures"
RECORD = FIGURES / "screenshots.json"
REPORT_GRID = "fig7-evidence"
CLAIMS_TABLE = ".verdicts"  # the box of the report's claims table
WIDTHS = (1400, 420)  # CSS pixels: a desktop window, a phone
HEIGHT = 900  # the first screen
INPUTS = ("docs/results", "configs", "lit_resformer")  # what the pictures are drawn from
sys.path.insert(0, str(REPO))  # this checkout's package, wherever another one is installed

from lit_resformer.cli import main as lit_resformer  # noqa: E402  (light: each command imports what it needs)
from lit_resformer.writing import BROWSER_MISSING, atomic_write_json, find_browser, screenshot  # noqa: E402


def picture_name(page: str, width: int) -> str:
    return f"{page}-first-screen-{width}px.png"


def tally_of(counts: dict) -> dict:
    """{"paper": {verdict: claims}, "beyond": {...}} from the board's counts (`claims --json`'s "counts",
    lit_resformer.verdicts.paper_claims.claim_counts): the numbers the pages' tallies show."""
    # imported here, once the browser is found: the verdicts take seconds to import
    from lit_resformer.verdicts.paper_claims import CLAIM_VERDICTS

    return {which: {verdict: counts[which][verdict] for verdict in CLAIM_VERDICTS} for which in ("paper", "beyond")}


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def render(browser: str, work: Path) -> dict:
    """Write the pages under `work`, their pictures into `work`/figures, and return the record."""
    board = work / "scoreboard.html"
    lit_resformer(["claims", str(RESULTS), "--html", str(board)])
    lit_resformer(["claims", str(RESULTS), "--json", "--out", str(work / "board.json")])
    copy = work / "checkout"
    shutil.copytree(RESULTS, copy / "docs" / "results", symlinks=True)
    (copy / "configs").symlink_to(REPO / "configs", target_is_directory=True)
    lit_resformer(["report", str(copy / "docs" / "results" / REPORT_GRID)])
    pages = {"report": copy / "docs" / "results" / REPORT_GRID / "index.html", "scoreboard": board}
    (work / "figures").mkdir()
    for page, path in pages.items():
        for width in WIDTHS:
            screenshot(browser, path, work / "figures" / picture_name(page, width), width, HEIGHT)
    claims_view = work / "report-claims.html"  # the report in a window-sized frame, scrolled to its claims table
    claims_view.write_text(
        '<html><body style="margin:0"><iframe style="width:100vw;height:100vh;border:0" '
        f'src="{pages["report"].as_uri()}" onload="this.contentDocument.querySelector(\'{CLAIMS_TABLE}\')'
        '.scrollIntoView()"></iframe></body></html>\n')
    for width in WIDTHS:
        screenshot(browser, claims_view, work / "figures" / f"report-claims-{width}px.png", width, HEIGHT)
    return {"commit": git("rev-parse", "HEAD"), "commit_date": git("show", "-s", "--format=%cI", "HEAD"),
            "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no", "--", *INPUTS)),
            "report": f"docs/results/{REPORT_GRID}", "window": {"widths": list(WIDTHS), "height": HEIGHT},
            "tally": tally_of(json.loads((work / "board.json").read_text())["counts"])}


def main() -> None:
    browser = find_browser()
    if browser is None:
        print(f"screenshots: {BROWSER_MISSING}", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        record = render(browser, Path(tmp))
        for picture in sorted((Path(tmp) / "figures").iterdir()):  # every picture made before any is replaced
            shutil.copyfile(picture, FIGURES / picture.name)
    atomic_write_json(RECORD, record)
    print(f"{RECORD.relative_to(REPO)}: {json.dumps(record['tally'])}")


if __name__ == "__main__":
    main()
