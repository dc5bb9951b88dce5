"""The scoreboard in a terminal (lit_resformer.board.scoreboard): each tested claim's row shows its id and its words
in full, so that no two rows read the same, and fits the terminal's width."""

from __future__ import annotations

import html
from pathlib import Path

import pytest
from rich.cells import cell_len

from lit_resformer.board.scoreboard import deciding, ordered, terminal_text
from lit_resformer.cli import main
from lit_resformer.reports.forest import short_claim
from lit_resformer.reports.lead import comparison_cells
from lit_resformer.reports.page import VERDICT_STYLE
from lit_resformer.verdicts import paper_claims as pc
from lit_resformer.verdicts.scoreboard_rows import scoreboard
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


def unwrapped_rows(text: str, claims: list) -> list[tuple[str, str]]:
    """Each tested claim's (id, words) as printed, checking that no cell of its row wrapped onto a line of its own:
    its first line holds its verdict, Δ with its interval and Holm p, and its id, unless the id leads its words (a
    terminal too narrow for the id's column)."""
    tested = [c for group in (False, True) for c in ordered([c for c in claims if c.beyond_paper == group])[0]]
    rows = printed_rows(text)
    assert len(rows) == len(tested)
    shown = []
    for claim, printed in zip(tested, rows, strict=True):
        cells = comparison_cells([deciding(claim)])[0]
        first = " ".join(printed[0].split())
        assert first.startswith(f"{VERDICT_STYLE[claim.verdict][0]} {claim.verdict}"), first
        assert f" {cells['Δ (a − b)']} {cells['95% CI']} {cells['p Holm']}" in first, first
        said = words(printed)
        in_words = claim.id not in printed[0].split() and said.startswith(f"{claim.id}: ")
        assert claim.id in printed[0].split() or in_words, printed
        shown.append((claim.id, said.removeprefix(f"{claim.id}: ") if in_words else said))
    return shown


def test_a_terminal_too_narrow_for_the_id_column_puts_each_id_before_its_words():
    """An id so long that verdict, id, Δ with its interval and Holm p outgrow 80 columns leads the claim's words
    beneath instead of wrapping the Holm p onto a line of its own; at 120 columns it keeps its column."""
    long_id = "gated-attention-plus-residual-x"
    registry = {"preconditions": {}, "claims": [
        {"id": long_id, "statement": "the value residual helps on top of gated attention", "where": "ours",
         "comparisons": ["s"]},
        {"id": "short", "statement": '"ResFormer is lower than ResFormer" (sic)', "where": "ours",
         "comparisons": ["p"]}]}
    claims = pc.paper_claims([row("value-path", "reproduced", "s"), row("value-path", "contradicted", "p")], registry)
    for width in (80, 120):
        text = terminal_text(claims, width)
        assert max(map(cell_len, text.splitlines())) <= width
        assert unwrapped_rows(text, claims) == [(c.id, c.statement) for c in claims]  # "(sic)" kept
        header = next(line for line in text.splitlines() if line.startswith("verdict"))
        assert ("claim" in header.split()) == (width == 120)


@pytest.mark.integration  # the scoreboard over docs/results (about 40 s without the verdict cache)
def test_every_row_of_the_committed_board_reads_apart_and_fits_80_and_120_columns(monkeypatch, capsys):
    """`COLUMNS=80 lit-resformer claims docs/results` (and 120): no line over the width, no cell wrapped onto a line
    of its own, every tested claim's id and words in full, no two rows alike."""
    monkeypatch.setenv("COLUMNS", "80")
    main(["claims", str(RESULTS)])
    printed = capsys.readouterr().out
    claims = pc.paper_claims(scoreboard([RESULTS]))  # judged again: each grid read back from the verdict cache
    assert printed == terminal_text(claims, 80)
    tested = [c for c in claims if c.verdict != "not tested"]
    for width in (80, 120):
        text = terminal_text(claims, width)
        assert max(map(cell_len, text.splitlines())) <= width
        shown = unwrapped_rows(text, claims)
        assert sorted(shown) == sorted((c.id, short_claim(c.statement, len(c.statement))) for c in tested)
        assert len({said for _, said in shown}) == len(shown), "two claims' words read the same"


def test_the_board_page_is_one_file_with_every_claim_filterable_and_a_plot_across_regimes(tmp_path, monkeypatch):
    """Two grids judge table5-lower-loss at 4M and 40M training tokens (the second a transfer grid): the page holds
    every claim once in its table, each tagged with what the filters match; one plot across the two regimes; every
    image inline and marked lazy, no resource from elsewhere; a second page draws no plot again."""
    import re

    from lit_resformer.board.scoreboard import html_page
    from lit_resformer.reports import forest
    from tests.helpers.claims_grids import judged_grid

    monkeypatch.setenv("LIT_RESFORMER_VERDICT_CACHE", str(tmp_path / "cache"))
    evidence = judged_grid(tmp_path, "g", tokens=4_000_000, paper_claim="table5-lower-loss")
    transfer = judged_grid(tmp_path, "transfer-g", tokens=40_000_000, corpus="other", paper_claim="table5-lower-loss")
    rows = scoreboard([evidence.parent])
    claims = pc.paper_claims(rows)
    drawn = []
    draw = forest.forest_plot
    monkeypatch.setattr(forest, "forest_plot", lambda *args: (drawn.append(args[2]), draw(*args))[1])
    page = html_page(claims, rows, {"g": evidence, "transfer-g": transfer}, tmp_path / "board.html")
    assert sorted(drawn) == ["g", "table5-lower-loss", "transfer-g"]  # a plot per grid, one across regimes

    tags = re.findall(r'<tr data-verdict="([^"]*)" data-grid="([^"]*)" data-regime="([^"]*)">.*?<td class="id">'
                      r"([^<]*)</td>", page)
    assert sorted(t[3] for t in tags) == sorted(html.escape(c.id) for c in claims)  # every claim, once a row
    by_id = {t[3]: t for t in tags}
    regimes = "AdamW, 4.0M tokens, tiny|AdamW, 40.0M tokens, tiny"
    assert by_id["table5-lower-loss"][:3] == ("reproduced", "g|transfer-g", regimes)
    assert by_id["fig7-throughout"][:3] == ("not tested", "", "")  # measured nowhere here: no grid, no regime
    assert re.findall(r'<div class="across" id="([^"]*)" data-verdict="reproduced" data-grid="g\|transfer-g" '
                      rf'data-regime="{re.escape(regimes)}">', page) == ["across-table5-lower-loss"]

    images = re.findall(r"<img [^>]*>", page)
    assert len(images) == 3 and all(' loading="lazy" ' in i and ' src="data:image/png;base64,' in i for i in images)
    assert not re.search(r'<(script|link|iframe)[^>]* (src|href)=|url\(', page)  # nothing to fetch: works offline
    assert page.count("<script>") == 1 and page.count("<style>") == 1

    assert html_page(claims, rows, {"g": evidence, "transfer-g": transfer}, tmp_path / "board.html") == page
    assert len(drawn) == 3  # the second page read every plot back from the cache


def test_each_grid_links_to_its_page_where_written_else_to_its_report_md_saying_how_to_write_it(tmp_path, monkeypatch):
    import re

    from lit_resformer.board.scoreboard import html_page
    from tests.helpers.claims_grids import judged_grid

    monkeypatch.setenv("LIT_RESFORMER_VERDICT_CACHE", str(tmp_path / "cache"))
    grids = {name: judged_grid(tmp_path, name, paper_claim="table5-lower-loss") for name in ("g", "h")}
    rows = scoreboard([grids["g"].parent])
    claims = pc.paper_claims(rows)

    def page_and_links() -> tuple[str, dict[str, str]]:
        """The page and its grid links, grid -> where it goes."""
        page = html_page(claims, rows, grids, tmp_path / "pages" / "board.html")
        return page, {grid: href for href, grid in re.findall(r'<summary><h3><a href="([^"]*)">([^<]*)</a>', page)}

    page, links = page_and_links()
    assert links == {"g": "../runs/g/report.md", "h": "../runs/h/report.md"}
    assert (f"(0 of 2), else to its report.md, which a browser shows as text. <code>lit-resformer report "
            f"{grids['g']}</code> writes a grid's page") in page
    (grids["h"] / "index.html").write_text("<html></html>")
    page, links = page_and_links()
    assert links == {"g": "../runs/g/report.md", "h": "../runs/h/index.html"} and "(1 of 2)" in page
    (grids["g"] / "index.html").write_text("<html></html>")
    page, links = page_and_links()
    assert set(links.values()) == {"../runs/g/index.html", "../runs/h/index.html"}
    assert "<p>Each grid's name links to its report's page.</p>" in page
