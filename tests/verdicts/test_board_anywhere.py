"""One board wherever it is read: the claims a results folder stores are what `report` and `claims` judge, from any
working directory and any complete copy; a copy that lost its shared runs, a grid file that no longer reads and
stored claims that differ from their grid file are refused, never judged on something else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lit_resformer.cli import main
from lit_resformer.runs.directory import BrokenSharedRun, GridDir
from lit_resformer.runs.results import load_results
from lit_resformer.runs.run_dir import RunDir
from tests.helpers.claims_grids import CELLS, EFFECT, VANILLA, grid_dir_from, write_summary

REPO = Path(__file__).resolve().parents[2]


def _claim(cell: str) -> dict:
    return {"claim": f"{cell} ends below vanilla", "a": cell, "b": "vanilla", "metric": "val_loss", "direction": "lower"}


def owner_and_overlay(tmp_path: Path) -> Path:
    """RUNS/owner trains vanilla and `better`; RUNS/overlay shares them (links, as the runner makes) and trains the
    rest. Returns RUNS."""
    owner = grid_dir_from(tmp_path, "owner", {"baseline": "vanilla", "seeds": [0, 1, 2], "cells": {
        "vanilla": {}, "better": CELLS["better"]}, "claims": [_claim("better")]})
    overlay = grid_dir_from(tmp_path, "overlay", {"baseline": "vanilla", "seeds": [0, 1, 2], "cells": CELLS,
                                                  "claims": [_claim(c) for c in ("better", "worse", "same")]})
    for seed, base in VANILLA.items():
        write_summary(owner, "vanilla", seed, base, grid="owner")
        write_summary(owner, "better", seed, base + EFFECT["better"][seed], grid="owner")
        for cell in ("vanilla", "better"):
            GridDir(overlay).share(cell, seed, RunDir(owner / cell / f"seed{seed}"))
        for cell in ("worse", "same"):
            write_summary(overlay, cell, seed, base + EFFECT[cell][seed], grid="overlay")
    return tmp_path / "runs"


def board_json(capsys, *args: str) -> dict:
    main(["claims", *args, "--json"])
    return json.loads(capsys.readouterr().out)


def test_a_copy_that_lost_its_shared_runs_is_refused_with_the_remedy(tmp_path, capsys):
    runs = owner_and_overlay(tmp_path)
    copy = tmp_path / "elsewhere" / "overlay"
    shutil.copytree(runs / "overlay", copy, symlinks=True)  # `cp -r`: the links come along, their runs do not
    with pytest.raises(BrokenSharedRun, match=r"better/seed0 links to \.\./\.\./owner/better/seed0, which is not "
                                              r"there \(and 5 more\).*cp -rL.*export-results"):
        load_results(copy)
    for command in (["report", str(copy)], ["claims", str(copy)]):
        with pytest.raises(SystemExit) as refused:
            main(command)
        assert "links to ../../owner/better/seed0, which is not there" in str(refused.value)
        assert "\n" not in str(refused.value)
    assert not (copy / "report.md").exists() and not (copy / "plots").exists()


def test_stored_claims_are_judged_and_a_changed_or_unreadable_grid_file_is_refused(tmp_path, capsys):
    runs = owner_and_overlay(tmp_path)
    grid_file = tmp_path / "overlay.yaml"
    before = board_json(capsys, str(runs))
    spec = yaml.safe_load(grid_file.read_text())
    spec["claims"].append({**_claim("worse"), "claim": "worse ends above vanilla", "direction": "higher"})
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SystemExit) as refused:  # not judged on the old claims while the file says otherwise
        main(["claims", str(runs)])
    assert "declares other claims than" in str(refused.value) and "lit-resformer report" in str(refused.value)
    main(["report", str(runs / "overlay")])
    assert "claims refreshed" in capsys.readouterr().out
    after = board_json(capsys, str(runs))
    shown = {c["claim"] for claim in after["claims"] for c in claim["comparisons"]}
    assert "worse ends above vanilla" in shown and after["counts"] != before["counts"]

    grid_file.write_text("claims: [unclosed\n")
    for command in (["report", str(runs / "overlay")], ["claims", str(runs)]):
        with pytest.raises(SystemExit) as refused:
            main(command)
        assert str(grid_file) in str(refused.value) and "cannot read the grid" in str(refused.value)


def test_the_board_is_the_same_from_any_directory_and_any_complete_copy(tmp_path, capsys, monkeypatch):
    runs = owner_and_overlay(tmp_path)
    here = board_json(capsys, str(runs))
    monkeypatch.chdir(tmp_path / "runs" / "owner")
    assert board_json(capsys, os.path.relpath(runs)) == here
    copy = tmp_path / "far" / "away"
    shutil.copytree(runs, copy)  # `cp -rL`: every link followed, so each grid holds its runs
    (tmp_path / "overlay.yaml").unlink()  # and no grid file beside it: the stored claims are the grid's
    monkeypatch.chdir(tmp_path / "far")
    copied = board_json(capsys, "away")
    assert json.dumps(copied).replace(str(copy), str(runs)) == json.dumps(here)


@pytest.mark.integration
def test_claims_json_over_docs_results_is_the_same_from_the_checkout_elsewhere_and_in_a_copy(tmp_path):
    """The committed board, three ways: from the checkout, from another working directory, and over a `cp -rL` copy
    of docs/results outside the checkout (where no grid file is found: the manifests' claims are the grids')."""
    def claims_json(cwd: Path, results: Path) -> str:
        out = subprocess.run([sys.executable, "-m", "lit_resformer.cli", "claims", str(results), "--json"], cwd=cwd,
                             capture_output=True, text=True, check=True).stdout
        return out.replace(str(results), "<results>")

    results = REPO / "docs" / "results"
    here = claims_json(REPO, Path("docs/results"))
    (tmp_path / "cwd").mkdir()
    assert claims_json(tmp_path / "cwd", results) == here
    shutil.copytree(results, tmp_path / "copy", ignore=shutil.ignore_patterns("*.png", "*.html", "report.md"))
    assert claims_json(tmp_path, tmp_path / "copy") == here
