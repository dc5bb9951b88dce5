"""Runs shared across grids: a run whose config (every field's value, seed included) another grid of the runs folder
has already trained, or an earlier cell of the same grid trains, is linked to that run and trained once; the
scoreboard counts its comparisons once; a link whose run was deleted is trained again."""

from __future__ import annotations

import io
import shutil
import tarfile

import yaml

from lit_resformer.grids import GridOptions, load_grid, run_grid
from lit_resformer.reports import write_report
from lit_resformer.runs.archive import export_grid, merge_export
from lit_resformer.runs.directory import GridDir, grid_dirs, grid_index
from lit_resformer.runs.results import load_results
from lit_resformer.verdicts.judgements import evaluate_grid
from lit_resformer.verdicts.scoreboard_rows import scoreboard
from tests.helpers.fake_trainer import calls, summary, write_grid

CLAIM = {"claim": "ResFormer beats vanilla", "a": "resformer", "b": "vanilla", "metric": "val_loss",
         "direction": "lower"}
FIRST = {"baseline": "vanilla", "seeds": [0, 1],
         "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}, "claims": [CLAIM]}
# The same two runs written differently (ResFormer's source spelled out, which is its default), a run of its own,
# and a cell that repeats vanilla within the grid.
SECOND = {"baseline": "vanilla", "seeds": [0, 1],
          "cells": {"vanilla": {}, "resformer": {"model.config.residual": {"target": "v", "source": "first"}},
                    "residual-q": {"model.config.residual.target": "q"}, "vanilla-again": {}},
          "claims": [CLAIM]}


def grid_file(tmp_path, name, spec):
    path = write_grid(tmp_path, spec, name=f"{name}.yaml")
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "name": name}, sort_keys=False))
    return path


def listing(grid, runs, fake) -> tuple[dict[str, str], str]:
    """What a dry run plans for each run (run name -> action), and its last line."""
    out = io.StringIO()
    run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=fake, dry_run=True), out=out)
    lines = out.getvalue().splitlines()
    actions = dict(line.split(maxsplit=1) for line in lines if line.startswith("  ") and "/seed" in line.split()[0])
    return actions, lines[-1]


def test_a_run_trained_in_another_grid_is_shared_not_trained_again(tmp_path, fake):
    runs = tmp_path / "runs"
    first, second = grid_file(tmp_path, "first", FIRST), grid_file(tmp_path, "second", SECOND)
    assert run_grid(load_grid(first), GridOptions(runs_dir=runs, train_command=fake), progress=False).failed == []

    planned, last = listing(second, runs, fake)
    assert planned["second/vanilla/seed0"] == "shared: trained as first/vanilla/seed0"
    assert planned["second/resformer/seed1"] == "shared: trained as first/resformer/seed1"
    assert planned["second/vanilla-again/seed0"] == "shared: trained as first/vanilla/seed0"
    assert planned["second/residual-q/seed0"] == "run"
    assert last == "dry run: 2 of 8 runs would start"
    assert not (runs / "second").exists()  # a dry run links nothing

    outcome = run_grid(load_grid(second), GridOptions(runs_dir=runs, train_command=fake, report=write_report), progress=False)
    assert outcome.failed == []
    grid = GridDir(runs / "second")
    for cell in ("vanilla", "resformer", "vanilla-again"):
        for seed in (0, 1):
            origin = "vanilla" if cell == "vanilla-again" else cell
            assert grid.shared_from(cell, seed).path == (runs / "first" / origin / f"seed{seed}").resolve()
            assert len(calls(runs / "first" / origin / f"seed{seed}")) == 1  # trained once, in the first grid
    assert grid.shared_from("residual-q", 0) is None and len(calls(runs / "second/residual-q/seed0")) == 1
    # The second grid reads the shared runs as its own: its report and results have every cell.
    results = load_results(runs / "second")
    assert set(results.done) == {"vanilla", "resformer", "residual-q", "vanilla-again"}
    assert summary(runs / "second/vanilla/seed1")["grid"] == "first"  # its summary says where it trained
    assert results.done["vanilla-again"][1].trained_as == "first/vanilla/seed1"
    assert results.done["residual-q"][1].trained_as is None
    # (two runs of "second" are that one run: the note they share is one footnote of the runs table)
    assert "shared: trained as first/vanilla/seed1" in (runs / "second/report.md").read_text()

    # One comparison on the same runs, seen in both grids, is one row of the scoreboard.
    rows = [v for v in scoreboard([runs]) if v.claim.claim == CLAIM["claim"]]
    assert len(rows) == 1 and set(rows[0].grids) == {"first", "second"}

    # Calling again changes nothing; the links stay links.
    again, last = listing(second, runs, fake)
    assert last == "dry run: 0 of 8 runs would start"
    assert again["second/vanilla-again/seed1"] == "shared: trained as first/vanilla/seed1"


def test_an_export_holds_shared_runs_as_files_and_a_deleted_run_trains_again(tmp_path, fake):
    runs = tmp_path / "runs"
    first, second = grid_file(tmp_path, "first", FIRST), grid_file(tmp_path, "second", SECOND)
    run_grid(load_grid(first), GridOptions(runs_dir=runs, train_command=fake), progress=False)
    run_grid(load_grid(second), GridOptions(runs_dir=runs, train_command=fake), progress=False)

    export_grid(runs / "second", tmp_path / "second.tar.gz")
    with tarfile.open(tmp_path / "second.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["second/vanilla/seed0/summary.json"].isfile()
    assert not any(m.issym() for m in members.values())
    merged = merge_export(tmp_path / "second.tar.gz", tmp_path / "results")
    assert "vanilla/seed0" in merged["added"]
    assert not (tmp_path / "results/second/vanilla/seed0").is_symlink()  # "first", which trained it, is not there
    export_grid(runs / "first", tmp_path / "first.tar.gz")
    before = scoreboard([tmp_path / "results"])
    merge_export(tmp_path / "first.tar.gz", tmp_path / "results")
    # now stored once: the copy in "second" is a link to the run in "first", and every verdict reads the same
    for cell in ("vanilla", "resformer", "vanilla-again"):
        for seed in (0, 1):
            shared = tmp_path / f"results/second/{cell}/seed{seed}"
            assert shared.is_symlink() and shared.resolve() == (tmp_path / f"results/first/{cell.removesuffix('-again')}"
                                                                f"/seed{seed}").resolve(), shared
    assert not (tmp_path / "results/second/residual-q/seed0").is_symlink()  # trained in "second" itself
    # the same results read through the links; the comparisons of runs "first" trained are now judged there
    index = grid_index(grid_dirs([tmp_path / "results"]))
    after = [v.to_dict() for v in evaluate_grid(tmp_path / "results/second", index=index)]
    shared = [v.to_dict() for v in before if "second" in v.grids]
    assert [v["note"].startswith("judged in first") for v in after] == [v["judged_in"] == "first" for v in after]
    assert any(v["judged_in"] == "first" for v in after)
    assert [{k: x for k, x in v.items() if k not in ("note", "judged_in")} for v in after] == \
        [{k: x for k, x in v.items() if k not in ("note", "judged_in")} for v in shared]

    # "first" leaves this folder (a kept grid landing in docs/results): the links into it dangle, and the next merge
    # of "second" stores the runs' files where they were (merge-results failed there with "File exists")
    shutil.rmtree(tmp_path / "results/first")
    assert (tmp_path / "results/second/vanilla/seed0").is_symlink()
    merged = merge_export(tmp_path / "second.tar.gz", tmp_path / "results")
    assert "vanilla/seed0" in merged["added"] and "residual-q/seed0" in merged["already_there"]
    for cell in ("vanilla", "resformer", "vanilla-again"):
        stored = tmp_path / f"results/second/{cell}/seed0"
        assert not stored.is_symlink() and (stored / "summary.json").is_file(), stored

    shutil.rmtree(runs / "first")  # the runs the links point to are gone
    assert listing(second, runs, fake)[0]["second/vanilla/seed0"] == "run"
    assert run_grid(load_grid(second), GridOptions(runs_dir=runs, train_command=fake), progress=False).failed == []
    assert not (runs / "second/vanilla/seed0").is_symlink()
    assert summary(runs / "second/vanilla/seed0")["grid"] == "second"
    # vanilla-again now shares the run trained here
    assert GridDir(runs / "second").shared_from("vanilla-again", 0).path == (runs / "second/vanilla/seed0").resolve()
