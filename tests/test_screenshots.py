"""The README's screenshots (scripts/screenshots.py, `make screenshots`): the tally recorded beside them is read from
the board's counts, it is the board's over docs/results now (or the pictures are stale), and without Chromium the
script refuses in one line."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from lit_resformer.verdicts import paper_claims as pc
from lit_resformer.writing import BROWSER_MISSING
from tests.helpers.claims_grids import row

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "screenshots.py"


@pytest.fixture(scope="module")
def screenshots():
    spec = importlib.util.spec_from_file_location("screenshots_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tally_is_each_verdicts_count_of_claims_as_claims_json_prints_it(screenshots):
    registry = {"preconditions": {}, "claims": [
        {"id": "lower", "statement": "s", "where": "Fig. 1", "comparisons": ["lower"]},
        {"id": "higher", "statement": "s", "where": "Fig. 1", "comparisons": ["higher"]},
        {"id": "both", "statement": "s", "where": "Fig. 2", "comparisons": ["both-a", "both-b"]},
        {"id": "untested", "statement": "s", "where": "Table 1", "not_tested": "needs zero-shot runs"},
        {"id": "ours", "statement": "s", "where": "ours", "comparisons": ["ours"], "beyond_paper": True}]}
    rows = [row("g-evidence", "reproduced", "lower", a="x"), row("g-evidence", "contradicted", "higher", a="y"),
            row("g-evidence", "reproduced", "both-a", a="z"), row("g-evidence", "contradicted", "both-b", a="w"),
            row("g-evidence", "inconclusive", "ours", a="v")]
    counts = json.loads(json.dumps(pc.claim_counts(pc.paper_claims(rows, registry))))  # as `claims --json` has them
    assert screenshots.tally_of(counts) == {
        "paper": {"reproduced": 1, "contradicted": 1, "mixed": 1, "inconclusive": 0, "not tested": 1},
        "beyond": {"reproduced": 0, "contradicted": 0, "mixed": 0, "inconclusive": 1, "not tested": 0}}


def test_without_chromium_the_script_refuses_in_one_line():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": ""})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"screenshots: {BROWSER_MISSING}"]


@pytest.mark.integration  # the scoreboard over docs/results (about 40 s without the verdict cache)
def test_the_screenshots_show_the_boards_tally(screenshots):
    from lit_resformer.verdicts.scoreboard_rows import scoreboard

    recorded = json.loads(screenshots.RECORD.read_text())
    board = screenshots.tally_of(pc.claim_counts(pc.paper_claims(scoreboard([screenshots.RESULTS]))))
    assert recorded["tally"] == board, (f"{screenshots.RECORD.relative_to(REPO)} records the tally "
                                        f"{recorded['tally']}, the board says {board}: the screenshots are stale; "
                                        "rerun `make screenshots` and commit docs/figures")
    for page in ("report", "scoreboard"):
        for width in screenshots.WIDTHS:
            png = (screenshots.FIGURES / screenshots.picture_name(page, width)).read_bytes()
            assert struct.unpack(">II", png[16:24]) == (width, screenshots.HEIGHT), (page, width)
