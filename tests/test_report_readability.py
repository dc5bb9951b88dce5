"""The grid report as a reader meets it: a table of what each cell changes relative to the base experiment, step
axes with whole-number ticks, and files that others may read."""

import os
import stat

import pandas as pd
import pytest
import yaml
from test_report import make_grid_dir, synthetic_grid, write_run

import lit_resformer.reports.document as document_module
from lit_resformer.reports.grid_report import write_report
from lit_resformer.writing import atomic_write, atomic_write_json


def markdown_section(text: str, heading: str) -> list[str]:
    section = text.split(f"## {heading}\n", 1)[1]
    return section.split("\n## ", 1)[0].strip().splitlines()


def test_report_tables_what_each_cell_changes_relative_to_the_base(tmp_path):
    # The report's base: trainer.max_steps 100, model.lr 1e-3, no residual (default target "none").
    grid_dir = make_grid_dir(tmp_path, {
        "baseline": "vanilla",
        "overrides": {"trainer.max_steps": 50},
        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v", "model.config.residual.lam": 0.25},
                  "same-lr": {"model.lr": 1e-3, "model.config.residual.lam": 0.5}},  # base and default values
    })
    for cell in ("vanilla", "resformer", "same-lr"):
        write_run(grid_dir, cell, 0, {step: 3.0 - 0.01 * step for step in range(20)})
    write_report(grid_dir)
    lines = markdown_section((grid_dir / "report.md").read_text(), "Cells")
    assert "Every cell: trainer.max_steps 100 → 50." in lines
    table = [line for line in lines if line.startswith("|")]
    assert table == [
        '| cell | model.config.residual.lam (base 0.5) | model.config.residual.target (base "none") |',
        "|---|---|---|",
        "| vanilla |  |  |",
        '| resformer | 0.25 | "v" |',
        "| same-lr |  |  |",
    ]


def test_report_of_an_older_manifest_shows_the_grid_files_overrides(tmp_path):
    grid_dir = make_grid_dir(tmp_path, {"baseline": "vanilla", "overrides": {"trainer.max_steps": 50},
                                        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}})
    manifest = yaml.safe_load((grid_dir / "grid.yaml").read_text())
    assert "version" not in manifest  # as the runner wrote it before manifests had a version
    for cell in manifest["cells"]:
        del cell["changes"]  # nor did the runner record the changes then
    (grid_dir / "grid.yaml").write_text(yaml.safe_dump(manifest))
    write_report(grid_dir)
    lines = markdown_section((grid_dir / "report.md").read_text(), "Cells")
    assert "Every cell: trainer.max_steps → 50." in lines
    assert [line for line in lines if line.startswith("|")] == [
        "| cell | model.config.residual.target |", "|---|---|", "| vanilla |  |", '| resformer | "v" |']


def test_step_axes_tick_whole_steps(tmp_path, monkeypatch):
    """Four logged steps: matplotlib's default locator would tick 0.5, 1.0, 1.5, ..."""
    ticks = []
    save_figure = document_module.save_figure

    def record(fig, path):
        ticks.append((path.name, list(fig.axes[0].get_xticks())))
        return save_figure(fig, path)

    monkeypatch.setattr(document_module, "save_figure", record)
    plotter = document_module.Plotter(tmp_path, ["a", "b"])
    curves = {"a": pd.Series([3.0, 2.5, 2.2, 2.0], index=[0, 1, 2, 3]), "b": pd.Series([3.1, 2.4, 2.1, 1.9])}
    plotter.curves("loss", curves, "loss", "loss")
    (name, xticks), = ticks
    assert name == "loss.png" and len(xticks) >= 2
    assert all(float(x).is_integer() for x in xticks), xticks


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_report_files_are_readable_by_others_unless_the_umask_says_otherwise(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        grid_dir = synthetic_grid(tmp_path)
        written = [write_report(grid_dir), grid_dir / "report.md", *(grid_dir / "plots").glob("*.png"),
                   atomic_write(tmp_path / "a.txt", "text"), atomic_write_json(tmp_path / "b.json", {"x": 1})]
    finally:
        os.umask(old)
    assert len(written) > 4
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in written} == {path.name: mode for path in written}
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary file left behind
