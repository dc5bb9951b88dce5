"""README's 'What we found' is the board's: its table is generated from the committed results, and a test fails when
the two differ, so no number in it can go stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from lit_resformer.board.findings import (
    FINDINGS,
    FINDINGS_END,
    FINDINGS_START,
    findings_in,
    findings_markdown,
    tally,
    with_findings,
)
from lit_resformer.verdicts.scoreboard_rows import scoreboard
from tests.helpers.claims_grids import row

REPO = Path(__file__).resolve().parents[2]


def test_a_finding_shows_its_rows_numbers_and_leaves_out_a_grid_not_there():
    first = FINDINGS[0]
    shown = row(first.grid, "reproduced", f"{first.comparison} (Table 5) {first.point}".rstrip())
    table = findings_markdown([shown])
    assert table.count("\n") == 3  # the header, its rule and one row: the other findings' grids are not there
    assert "−0.1000 [−0.2000, −0.0500]" in table.replace("-", "−") and "Holm p 0.01" in table
    assert f"[{first.grid}](docs/results/{first.grid}/report.md)" in table
    assert "| transfer: shown, not counted |" in table  # a transfer grid's row says it is outside the tally


def test_a_rows_tally_says_when_its_comparison_changed_after_its_data():
    declared = {"status": "exploratory", "confirmed_by": None}
    shown = row("fig7-evidence", "reproduced", "x")
    assert tally(shown, {}) == "the paper's"
    assert tally(shown, {("fig7-evidence", "x"): declared}).startswith("exploratory")
    assert tally(shown, {("fig7-evidence", "x"): {**declared, "status": "confirmed",
                                                  "confirmed_by": {"grid": "fig7-confirm"}}}) == (
        "confirmed by fig7-confirm: counted there")
    assert tally(shown, {("fig7-repro", "x"): declared}) == "the paper's"  # another grid's comparison
    assert tally(row("transfer-muon", "reproduced", "x"), {("transfer-muon", "x"): declared}).startswith("transfer")


def test_the_table_is_replaced_between_the_markers_only():
    document = f"intro\n{FINDINGS_START}\nold table\n{FINDINGS_END}\noutro\n"
    updated = with_findings(document, "| new |\n")
    assert updated == f"intro\n{FINDINGS_START}\n| new |\n{FINDINGS_END}\noutro\n"
    assert findings_in(updated) == "| new |\n"
    with pytest.raises(ValueError, match="no findings markers"):
        with_findings("no markers", "| new |\n")


@pytest.mark.integration  # the board over docs/results
def test_readme_what_we_found_is_the_boards():
    readme = (REPO / "README.md").read_text()
    assert findings_in(readme) == findings_markdown(scoreboard([REPO / "docs/results"])), (
        "regenerate it: lit-resformer claims docs/results --findings --out README.md")
