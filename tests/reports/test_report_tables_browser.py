"""A grid report's claims table in a real browser (headless Chromium), over the synthetic judged grid and over a
committed grid whose table is as wide as they come (fig7-evidence: long claims, the paper's effects, provenance
notes): at a desktop's width it fits its box, verdict first, every number on one line; on a phone its rows stack, and
the first row's verdict and Δ are on screen without scrolling sideways. Skipped where Chromium is not installed."""

import shutil
from pathlib import Path

import pytest
from helpers import chromium

from lit_resformer.reports.grid_report import write_report
from lit_resformer.verdicts.rendering import COLUMNS, NUMBER_COLUMNS
from tests.helpers.claims_grids import judged_grid

REPO = Path(__file__).resolve().parents[2]
COMMITTED = "fig7-evidence"  # its claims table was 1,422 px wide in a 1,100 px box
CLAIMS_TABLE = "#claims div.wide table"  # the Claims section's table, in the box it would scroll in


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    chromium.browser()
    tmp = tmp_path_factory.mktemp("tables")
    committed = tmp / COMMITTED
    shutil.copytree(REPO / "docs" / "results" / COMMITTED, committed, symlinks=False)  # the report is written there
    return {"judged": write_report(judged_grid(tmp / "judged")), COMMITTED: write_report(committed)}


@pytest.mark.integration
@pytest.mark.parametrize("name", ["judged", COMMITTED])
def test_claims_table_fits_its_box_on_a_desktop_verdict_first_and_numbers_on_one_line(reports, name, tmp_path):
    seen = chromium.table_layout(reports[name], tmp_path, 1400, 900, CLAIMS_TABLE, list(COLUMNS))
    assert seen["rowDisplay"] == "table-row", seen  # a table, not the narrow screen's cards
    assert seen["tableScrollWidth"] <= seen["boxClientWidth"], seen  # nothing hidden in the box's sideways scroll
    assert seen["pageScrollWidth"] <= seen["width"] == 1400, seen
    columns = seen["columns"]
    assert [columns[name]["index"] for name in COLUMNS] == list(range(len(COLUMNS)))  # verdict first, in that order
    assert all(columns[name]["right"] <= seen["width"] for name in COLUMNS), seen  # every column on screen
    assert {name: columns[name]["maxLines"] for name in NUMBER_COLUMNS} == dict.fromkeys(NUMBER_COLUMNS, 1), seen


@pytest.mark.integration
@pytest.mark.parametrize("name", ["judged", COMMITTED])
def test_verdict_and_delta_of_the_first_row_are_on_a_phones_screen(reports, name, tmp_path):
    seen = chromium.table_layout(reports[name], tmp_path, 420, 800, CLAIMS_TABLE, ["verdict", "Δ (a − b)"])
    assert seen["rowDisplay"] == "grid", seen  # each row stacked into a card
    assert seen["tableScrollWidth"] <= seen["boxClientWidth"] and seen["pageScrollWidth"] <= seen["width"] == 420, seen
    for column in ("verdict", "Δ (a − b)"):
        cell = seen["columns"][column]
        assert cell["shown"] and cell["width"] > 0 and cell["height"] > 0, (column, seen)
        assert 0 <= cell["left"] and cell["right"] <= seen["width"], (column, seen)  # on screen, no sideways scroll
    assert seen["columns"]["verdict"]["index"] == 0


# Every table of the page at a phone's width: its width against the box it would scroll in, and for a table of cards
# (not the verdicts' own) whether every cell but the row's first is shown under its column's name; each image's shown
# width against its own.
PHONE_PROBE = """
const tables = Array.from(frame.querySelectorAll("table")).map(table => {
  let box = table.parentElement;
  while (box !== frame.body && !/auto|scroll/.test(view.getComputedStyle(box).overflowX)) box = box.parentElement;
  const cells = Array.from(table.querySelectorAll("tbody td")).filter(td => td.cellIndex > 0 && td.textContent);
  return {section: (table.closest("section,details") || {}).id, width: table.scrollWidth, box: box.clientWidth,
          verdicts: table.closest(".verdicts") !== null,
          unnamed: cells.filter(td => view.getComputedStyle(td, "::before").content !==
                                      JSON.stringify(td.dataset.label + ": ")).length};
});
const images = Array.from(frame.images);
await Promise.all(images.map(i => { i.loading = "eager";
                                    return i.complete ? null : new Promise(done => { i.onload = i.onerror = done; }); }));
const shown = images.map(i => ({alt: i.alt, scale: i.getBoundingClientRect().width / i.naturalWidth}));
return {width: view.innerWidth, pageWidth: frame.documentElement.scrollWidth, tables: tables, images: shown};
"""


@pytest.mark.integration
@pytest.mark.parametrize("name", ["judged", COMMITTED])
def test_on_a_phone_no_table_is_wider_than_its_box_and_the_forest_plot_keeps_its_words_legible(reports, name, tmp_path):
    seen = chromium.probed(reports[name], tmp_path, PHONE_PROBE, size=(420, 800))
    assert seen["pageWidth"] <= seen["width"] == 420, seen
    assert len(seen["tables"]) >= 4, seen  # the claims, final losses, runs, provenance at least
    assert [t for t in seen["tables"] if t["width"] > t["box"]] == [], seen  # nothing scrolls sideways in its box
    assert [t for t in seen["tables"] if not t["verdicts"] and t["unnamed"]] == [], seen  # each value under its name
    forest = next(image for image in seen["images"] if image["alt"].startswith("Forest plot"))
    assert forest["scale"] >= 0.65, forest  # its 10-point words at least 10 px tall (110 dpi)
