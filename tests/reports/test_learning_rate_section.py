"""The report's learning-rate section: each arm's loss against the swept rate with its seed band and chosen point,
the confirmation seeds at the chosen points; only in a grid that claims something at chosen points."""

import pytest

from lit_resformer.reports.document import Plotter
from lit_resformer.reports.grid_report import write_report
from tests.helpers.claims_grids import claims_grid
from tests.helpers.select_grids import (
    SURFACE_BUDGETS,
    name,
    surface,
    surface_loss,
    surface_manifest,
    tuned_grid,
    tuned_manifest,
)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return tuned_manifest(tmp_path_factory.mktemp("tuned"))


def test_the_section_shows_each_arms_curve_and_its_chosen_point(tmp_path, manifest):
    results = tuned_grid(tmp_path, manifest, {name("vanilla", 1e-3): 4.60, name("resformer", 2e-3): 4.50})
    write_report(results.grid_dir.path)
    report = results.grid_dir.report_file.read_text()
    section = report[report.index("## Final loss against model.lr"):]
    assert "(plots/loss_by_learning_rate.png)" in section
    assert (results.grid_dir.plots_dir / "loss_by_learning_rate.png").is_file()
    assert "| vanilla | 0.001 ★ | 4.6050 [4.6000, 4.6100] | 2 | 4.6033 [" in section  # pilot 4.60/4.61; seeds 2-4
    assert "| resformer | 0.002 ★ |" in section and "| resformer | 0.001 | 4.5550 [4.5500, 4.5600] | 2 | – |" in section
    assert ("Bracket check: vanilla 0.001, resformer 0.002: each chosen model.lr lies inside the swept range "
            "[0.0005, 0.004]") in section


def test_a_grid_without_such_claims_has_no_section(tmp_path):
    grid_dir = claims_grid(tmp_path)
    write_report(grid_dir)
    assert "## Final loss against" not in (grid_dir / "report.md").read_text()


def test_a_block_that_chooses_at_each_budget_shows_a_panel_and_rows_for_each(tmp_path):
    results = surface(tmp_path, surface_manifest(tmp_path / "m"), surface_loss)
    write_report(results.grid_dir.path)
    section = results.grid_dir.report_file.read_text()
    section = section[section.index("## Final loss against model.lr at each trainer.max_steps"):]
    assert "| trainer.max_steps | arm | model.lr |" in section
    assert "| 1000 | vanilla | 0.004 ★ |" in section and "| 4000 | vanilla | 0.004 ★ |" in section
    assert "| 2000 | vanilla | 0.002 ★ |" in section and "| 2000 | vanilla | 0.004 |" in section
    assert "vanilla 0.004 at 1000" in section and f"resformer 0.002 at {SURFACE_BUDGETS[-1]}" in section


def test_each_arm_keeps_one_style_in_every_budgets_panel(tmp_path, monkeypatch):
    """Each budget's cells are other cells, each in its own style: drawn so, an arm changed colour from panel to
    panel and the legend, taken from the last panel, named the wrong curves in the others."""
    figures = {}
    save = Plotter.save

    def kept(self, fig, stem):
        figures[stem] = fig
        return save(self, fig, stem)

    monkeypatch.setattr(Plotter, "save", kept)
    results = surface(tmp_path, surface_manifest(tmp_path / "m"), surface_loss)
    write_report(results.grid_dir.path)
    panels = [{line.get_label(): (line.get_color(), line.get_marker(), line.get_linestyle())
               for line in ax.lines if not line.get_label().startswith("_")}
              for ax in figures["loss_by_learning_rate"].axes]
    assert len(panels) == len(SURFACE_BUDGETS) and set(panels[0]) == {"vanilla", "resformer"}
    assert all(panel == panels[0] for panel in panels)
    assert panels[0]["vanilla"] != panels[0]["resformer"]
