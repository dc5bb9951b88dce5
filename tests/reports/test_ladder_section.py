"""The report's ladder section: the gap and the data saving at the end of each decay against the budget, each with
its interval, and their fitted trends with theirs."""

import re

import pytest

from lit_resformer.reports.grid_report import write_report
from tests.helpers.select_grids import ladder, ladder_manifest


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return ladder_manifest(tmp_path_factory.mktemp("ladder"))


def test_the_section_shows_gap_and_saving_by_budget_with_their_trends(tmp_path, manifest):
    results = ladder(tmp_path, manifest, lambda budget, seed: 1.25)  # 20% less data at every budget
    write_report(results.grid_dir.path)
    report = results.grid_dir.report_file.read_text()
    section = report[report.index("## resformer against vanilla at the end of each decay"):]
    assert (results.grid_dir.plots_dir / "ladder_resformer_vs_vanilla.png").is_file()
    # vanilla falls 0.3 nats per doubling, so 1.25x the data is 0.3 log2(1.25) = 0.0966 nats
    assert "| 2000 | – | -0.0966 [-0.0966, -0.0966] | +20.0% [+20.0%, +20.0%] | 3 |" in section
    assert re.search(r"Trend of the saving per doubling of the budget: [+-]0\.0% \[[+-]0\.0%, [+-]0\.0%\] \(percentage "
                     r"points\), 95% CI over 3 seeds", section)
    assert "## Gap against training length" not in report  # a rung is no rescaled schedule
    # the bars by domain: the rungs that end the ladder's largest decay (a trunk never decays; 5 budgets' bars crowd)
    assert "Only the rungs at the largest budget (trainer.max_steps=" in report
