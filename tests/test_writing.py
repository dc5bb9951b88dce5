"""The one palette every plot draws its series with; plain-text lines whose columns line up."""

from lit_resformer.writing import MARKERS, OKABE_ITO, aligned_lines, series_styles


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
