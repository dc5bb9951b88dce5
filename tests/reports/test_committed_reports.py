"""Reading never writes: `lit-resformer report docs/results/<grid>` (the way to get a committed grid's HTML page) leaves
the repository as it was, `git status --porcelain` empty. Each committed grid's report is rendered in a copy of the
results beside the repository's configs (so that its grid file is found, as in the checkout), and every file git
tracks in that grid's folder must come out byte for byte as committed, every new file one git ignores (index.html).
fig7-evidence, the README's example, is in the integration tier; every other committed grid in the slow one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lit_resformer.runs.directory import MANIFEST

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path("docs/results")
EXAMPLE = "fig7-evidence"  # the grid the README points a newcomer to


def git(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], input=stdin, capture_output=True, text=True)


def committed_grids() -> list[str]:
    return sorted(p.parent.name for p in (REPO / RESULTS).glob(f"*/{MANIFEST}"))


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> Path:
    """A checkout-shaped copy: docs/results copied (shared runs stay links, as committed), configs linked."""
    if git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        pytest.skip("not a git checkout: nothing tells which files are tracked")
    root = tmp_path_factory.mktemp("checkout")
    shutil.copytree(REPO / RESULTS, root / RESULTS, symlinks=True, ignore=shutil.ignore_patterns("index.html"))
    (root / "configs").symlink_to(REPO / "configs")
    return root


def changed_by_report(root: Path, grid: str) -> list[str]:
    """What `git status --porcelain` would list in the grid's folder after its report is written in the copy."""
    from lit_resformer.cli import main

    main(["report", str(root / RESULTS / grid)])
    folder = RESULTS / grid
    tracked = git("ls-files", "-z", "--", str(folder)).stdout.split("\0")
    tracked = [path for path in tracked if path]
    changed = [path for path in tracked
               if not (root / path).is_symlink() and (not (root / path).is_file()
                                                      or (root / path).read_bytes() != (REPO / path).read_bytes())]
    present = {str(p.relative_to(root)) for p in (root / folder).rglob("*") if p.is_file() and not p.is_symlink()
               and not any(part.is_symlink() for part in p.relative_to(root).parents if part != Path("."))}
    new = sorted(present - set(tracked))
    ignored = set(git("check-ignore", "--stdin", stdin="\n".join(new)).stdout.split()) if new else set()
    return changed + [f"?? {path}" for path in new if path not in ignored]


@pytest.mark.integration
def test_reading_the_readme_example_grid_leaves_the_repository_as_committed(committed):
    assert changed_by_report(committed, EXAMPLE) == []


@pytest.fixture(scope="module")
def results_index():
    from lit_resformer.runs.directory import grid_dirs, grid_index

    return grid_index(grid_dirs([REPO / RESULTS]))


@pytest.mark.integration
@pytest.mark.parametrize("grid", committed_grids())
def test_every_committed_reports_claims_read_as_the_code_judges_them_now(results_index, grid):
    """The cheap half of the slow test below, for every committed grid: its report's Claims section (verdicts, notes,
    footnotes), judged again as `report` judges it, is in its committed report.md line for line. A change to how
    verdicts read (a new note, say) then fails here until the committed reports are written again; the slow tier alone
    let 15 of them go stale (their provenance notes)."""
    from lit_resformer.measures.scaling import sweep_analysis
    from lit_resformer.reports.document import Document
    from lit_resformer.reports.grid_report import _claims_section
    from lit_resformer.runs.results import load_results
    from lit_resformer.verdicts.judgements import evaluate_grid
    from lit_resformer.verdicts.regime import grid_regime

    results = load_results(REPO / RESULTS / grid)
    doc = Document(results.grid_dir.path)
    _claims_section(doc, evaluate_grid(results, sweep_analysis(results), index=results_index), grid_regime(results),
                    forest=None)
    committed = set((REPO / RESULTS / grid / "report.md").read_text().splitlines())
    assert [line for line in doc.markdown().splitlines() if line.strip() and line not in committed] == []


@pytest.mark.slow
@pytest.mark.parametrize("grid", [g for g in committed_grids() if g != EXAMPLE])
def test_reading_any_committed_grid_leaves_the_repository_as_committed(committed, grid):
    assert changed_by_report(committed, grid) == []


def test_a_report_is_dated_by_its_runs_and_the_same_from_any_folder_at_any_time(tmp_path, monkeypatch):
    """The report names no clock time and no folder path: the same runs written anywhere give the same bytes, dated by
    the last run to finish."""
    from lit_resformer.reports import grid_report
    from tests.helpers.claims_grids import claims_grid

    grid_dir = claims_grid(tmp_path / "here")
    for seed, finished in enumerate(["2026-11-27T04:03:11+00:00", "2026-11-27T05:10:00+01:00", "2026-11-26T23:00:00Z"]):
        summary = grid_dir / "vanilla" / f"seed{seed}" / "summary.json"
        summary.write_text(summary.read_text()[:-1] + f', "finished_at": "{finished}"}}')
    grid_report.write_report(grid_dir)
    first = (grid_dir / "report.md").read_text()
    assert "as they stood when the last of them finished, 2026-11-27 04:10 UTC." in first  # 05:10 at +01:00

    elsewhere = tmp_path / "elsewhere" / "deeper" / grid_dir.name
    shutil.copytree(grid_dir, elsewhere)

    class Later(grid_report.datetime):
        @classmethod
        def now(cls, tz=None):
            return grid_report.datetime(2031, 1, 1, tzinfo=tz)

    monkeypatch.setattr(grid_report, "datetime", Later)
    grid_report.write_report(elsewhere)
    assert (elsewhere / "report.md").read_text() == first
    assert str(grid_dir) not in first  # (the base experiment is named as the manifest records it)
