"""The one palette every plot draws its series with; plain-text lines whose columns line up; markdown tables whose
cells name their column in HTML."""

import re
from pathlib import Path

from lit_resformer.writing import MARKERS, OKABE_ITO, aligned_lines, markdown_to_html, series_styles


def test_twelve_series_stay_apart_in_colour_blind_safe_colours_each_with_its_own_marker():
    labels = [f"cell{i}" for i in range(12)]
    styles = series_styles(labels)
    assert list(styles) == labels
    assert len({(s["color"], s["marker"], s["linestyle"]) for s in styles.values()}) == 12
    assert len({s["marker"] for s in styles.values()}) == 12  # told apart without their colour
    assert {s["color"] for s in styles.values()} == set(OKABE_ITO)  # Okabe and Ito's eight, nothing else
    assert [s["color"] for s in styles.values()][:8] == list(OKABE_ITO)  # no colour twice among the first eight
    # past eight the colours come again, dashed
    assert [s["linestyle"] for s in styles.values()] == ["-"] * 8 + ["--"] * 4
    assert series_styles(labels[:3]) == {label: styles[label] for label in labels[:3]}  # a label's style is its place's
    assert len(MARKERS) >= 12


def test_aligned_lines_pad_each_column_to_its_widest_cell_and_numbers_to_the_right():
    assert aligned_lines([("claim", "p", "grid"), ("a", "0.01", "g"), ("longer-id", "1.2e-05", "")], right={1}) == [
        "claim            p  grid", "a             0.01  g", "longer-id  1.2e-05"]


def test_each_html_table_cell_names_its_column_as_its_header_shows_it():
    page = markdown_to_html("| **verdict** | a \\| b \\* | `c_d` & e |\n|---|---|---|\n| x | 1 |\n| y | 2 | 3 |\n", Path("."), "t")
    assert re.findall(r"<th>(.*?)</th>", page) == ["<strong>verdict</strong>", "a | b *", "<code>c_d</code> &amp; e"]
    assert re.findall(r'<td data-label="([^"]*)">([^<]*)</td>', page) == [
        ("verdict", "x"), ("a | b *", "1"), ("c_d &amp; e", ""), ("verdict", "y"), ("a | b *", "2"), ("c_d &amp; e", "3")]
