"""The board page (`claims --html`) in a real browser (headless Chromium): choosing a verdict, a grid or a regime hides
the claims of others and the plots of other grids; clicking a numeric column's header sorts the claims by its
numbers; every image is marked to load lazily, and loads once scrolled to. Two fixture grids judge one paper claim in
two regimes (4M and 40M training tokens), so the page has a plot across regimes. Skipped where Chromium is not
installed (CI installs it: scripts/install-chromium.sh)."""

from pathlib import Path

import pytest
from helpers import chromium

from lit_resformer.cli import main
from tests.helpers.claims_grids import judged_grid

CLAIM = "table5-lower-loss"  # the paper claim both grids' "better ends below vanilla" is evidence for
TRANSFER = "AdamW, 40.0M tokens, tiny"  # the regime of transfer-g's runs

# Chooses each filter in turn as a reader would (a select's value, then its change event) and records the claims
# (rows) and plots still shown; sorts by Δ twice; scrolls to the first plot across regimes and waits for it.
PROBE = """
const form = frame.querySelector("form.filters");
const table = frame.querySelector("table.board");
const rows = () => Array.from(frame.querySelectorAll("table.board tbody tr"));
const shown = selector => Array.from(frame.querySelectorAll(selector)).filter(e => e.getClientRects().length > 0);
const claims = () => shown("table.board tbody tr").map(r => ({id: r.cells[1].textContent, verdict: r.dataset.verdict}));
function choose(name, value) {
  form.elements[name].value = value;
  form.elements[name].dispatchEvent(new view.Event("change", {bubbles: true}));
}
const found = {all: claims(), rows: rows().length};
choose("verdict", "contradicted");
found.verdict = claims();
found.counter = form.querySelector("output").textContent;
choose("verdict", "");
choose("grid", "transfer-g");
found.grid = claims();
found.gridPlots = shown("details.grid-plot").map(d => ({id: d.id, open: d.open}));
found.across = shown(".across").map(e => e.id);
choose("grid", "");
choose("regime", REGIME);
found.regime = claims();
choose("regime", "");
found.reset = claims().length;
const headers = Array.from(table.tHead.rows[0].cells);
const column = headers.findIndex(h => h.textContent.startsWith("Δ"));
const deltas = () => Array.from(table.tBodies[0].rows).map(r => r.cells[column].dataset.sort);
found.unsorted = deltas();
headers[column].querySelector("button").click();
found.ascending = deltas();
found.ariaSort = headers[column].getAttribute("aria-sort");
headers[column].querySelector("button").click();
found.descending = deltas();
found.loading = Array.from(frame.images).map(i => i.getAttribute("loading"));
const plot = frame.querySelector(".across img");
plot.scrollIntoView();
await plot.decode();
found.loadedOnceNear = plot.complete && plot.naturalWidth > 0;
return found;
"""


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> tuple[Path, list]:
    from lit_resformer.verdicts.paper_claims import paper_claims
    from lit_resformer.verdicts.scoreboard_rows import scoreboard

    chromium.browser()
    tmp = tmp_path_factory.mktemp("board")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LIT_RESFORMER_VERDICT_CACHE", str(tmp / "cache"))
        evidence = judged_grid(tmp, "g", tokens=4_000_000, paper_claim=CLAIM)
        judged_grid(tmp, "transfer-g", tokens=40_000_000, corpus="other", paper_claim=CLAIM)
        page = tmp / "board.html"
        main(["claims", str(evidence.parent), "--html", str(page)])
        claims = paper_claims(scoreboard([evidence.parent]))
    return page, claims


def numbers(sorted_keys: list[str]) -> list[float]:
    """The numbers of a column in row order; the rows without one (empty keys) must all come last."""
    present = [key for key in sorted_keys if key != ""]
    assert sorted_keys == present + [""] * (len(sorted_keys) - len(present)), sorted_keys
    return [float(key) for key in present]


@pytest.mark.integration
def test_the_filters_hide_other_verdicts_grids_and_regimes_and_the_headers_sort(board, tmp_path):
    page, claims = board
    found = chromium.probed(page, tmp_path, f"const REGIME = {TRANSFER!r};" + PROBE)
    assert found["rows"] == len(claims) and len(found["all"]) == len(claims)  # every claim, each once

    contradicted = [c.id for c in claims if c.verdict == "contradicted"]
    assert len(contradicted) == 2  # "worse ends below vanilla" in each grid
    assert sorted(row["id"] for row in found["verdict"]) == sorted(contradicted)
    assert {row["verdict"] for row in found["verdict"]} == {"contradicted"}
    assert found["counter"] == f"2 of {len(claims)} claims shown"

    # transfer-g judges the paper claim (shown, not counted) and its own three comparisons no claim lists
    transfer_g = {CLAIM, "unassigned: worse ends above vanilla in training loss", "unassigned: worse ends below vanilla",
                  "unassigned: same ends below vanilla"}
    assert sorted(row["id"] for row in found["grid"]) == sorted(transfer_g)
    assert found["gridPlots"] == [{"id": "grid-transfer-g", "open": True}]  # the chosen grid's plot, unfolded
    assert found["across"] == [f"across-{CLAIM}"]
    assert sorted(row["id"] for row in found["regime"]) == sorted(transfer_g)  # transfer-g is the only 40M grid
    assert found["reset"] == len(claims)

    ascending, descending = numbers(found["ascending"]), numbers(found["descending"])
    assert found["ariaSort"] == "ascending" and found["ascending"] != found["unsorted"]
    assert ascending == sorted(ascending) and descending == sorted(ascending, reverse=True)
    assert len(ascending) == sum(c.verdict != "not tested" for c in claims)  # each tested claim has a Δ here

    assert len(found["loading"]) == 3 and set(found["loading"]) == {"lazy"}  # two grids' plots, one across regimes
    assert found["loadedOnceNear"], found
