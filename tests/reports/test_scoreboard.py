"""The scoreboard in a terminal (lit_resformer.reports.scoreboard): each tested claim's row shows its id and its words
in full, so that no two rows read the same, and fits the terminal's width."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.cells import cell_len

from lit_resformer.reports.forest import short_claim
from lit_resformer.reports.page import VERDICT_STYLE
from lit_resformer.reports.scoreboard import terminal_text
from lit_resformer.verdicts import paper_claims as pc
from tests.helpers.claims_grids import row

RESULTS = Path(__file__).resolve().parents[2] / "docs/results"
TESTED = tuple(f"{VERDICT_STYLE[v][0]} " for v in ("reproduced", "contradicted", "mixed", "inconclusive"))


def printed_rows(text: str) -> list[list[str]]:
    """Each tested claim's row as printed: its first line (verdict, id, numbers), then the lines of its words."""
    rows: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith(TESTED):
            rows.append([line.rstrip()])
            inside = True
        elif inside and line.startswith(" ") and line.strip():
            rows[-1].append(line.strip())
        else:
            inside = False
    return rows


def words(printed: list[str]) -> str:
    return " ".join(printed[1:])


def test_claims_whose_words_begin_alike_read_apart_with_their_ids():
    shared = "value embeddings (one table a layer, added to its values) beat the first layer's value V_1 at equal"
    registry = {"preconditions": {}, "claims": [
        {"id": "value-embed-steps", "statement": f"{shared} training steps", "where": "ours", "comparisons": ["s"]},
        {"id": "value-embed-params", "statement": f"{shared} parameters", "where": "ours", "comparisons": ["p"]}]}
    claims = pc.paper_claims([row("value-path", "reproduced", "s"), row("value-path", "contradicted", "p")], registry)
    for width in (80, 120):
        text = terminal_text(claims, width)
        assert max(map(cell_len, text.splitlines())) <= width
        rows = printed_rows(text)
        assert [r[0].split()[:3] for r in rows] == [["✓", "reproduced", "value-embed-steps"],
                                                     ["✗", "contradicted", "value-embed-params"]]
        assert [words(r) for r in rows] == [c.statement for c in claims]
        # verdict first, then Δ with its interval and the Holm p on the id's line; the grid where the width allows
        firsts = [" ".join(r[0].split()) for r in rows]
        assert all("-0.1000 [-0.2000, -0.0500] 0.01" in line for line in firsts)
        assert all(line.endswith(" 0.01 value-path") == (width == 120) for line in firsts)


@pytest.mark.integration  # the scoreboard over docs/results (about 40 s without the verdict cache)
def test_every_row_of_the_committed_board_reads_apart_and_fits_120_columns():
    from lit_resformer.verdicts.claims import scoreboard

    claims = pc.paper_claims(scoreboard([RESULTS]))
    text = terminal_text(claims, 120)
    assert max(map(cell_len, text.splitlines())) <= 120
    rows = printed_rows(text)
    tested = [c for c in claims if c.verdict != "not tested"]
    assert sorted(r[0].split()[2] for r in rows) == sorted(c.id for c in tested)
    printed = ["\n".join(r) for r in rows]
    assert len(set(printed)) == len(printed)
    assert sorted(map(words, rows)) == sorted(short_claim(c.statement, len(c.statement)) for c in tested)
    assert len(set(map(words, rows))) == len(rows), "two claims' words read the same"
