"""The post-hoc check (lit_resformer.board.declared) on a small repository whose history we write: a field fixed
before the results passes, one changed after them is unjustified until it carries the paper's quote, and restoring
what stood when the results came is no change."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from lit_resformer.board import declared

CELLS = [{"name": n, "family": n, "coords": {}} for n in ("vanilla", "better", "worse")]
LOWER = {"claim": "better ends below vanilla", "a": "better", "b": "vanilla", "metric": "val_loss", "direction": "lower"}
HIGHER = {"claim": "worse ends above vanilla", "a": "worse", "b": "vanilla", "metric": "val_loss", "direction": "higher"}


def commit(repo: Path, when: str, grid_claims: list[dict], registry: list[dict]) -> None:
    (repo / "configs/grids").mkdir(parents=True, exist_ok=True)
    (repo / "configs/grids/g.yaml").write_text(yaml.safe_dump({"name": "g", "base": "none.yaml", "baseline": "vanilla",
                                                                "cells": {c["name"]: {} for c in CELLS},
                                                                "claims": grid_claims}))
    (repo / "configs/claims.yaml").write_text(yaml.safe_dump({"claims": registry}))
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when, "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", when], check=True, env=env)


def results(repo: Path, started: str, name: str = "g", folder: str = "docs/results") -> Path:
    grid = repo / folder / name
    grid.mkdir(parents=True)
    (grid / "grid.yaml").write_text(yaml.safe_dump({"version": 2, "name": name, "grid_file": f"configs/grids/{name}.yaml",
                                                    "baseline": "vanilla", "cells": CELLS, "claims": []}))
    for cell in ("vanilla", "better", "worse"):
        (grid / cell / "seed0").mkdir(parents=True)
        (grid / cell / "seed0/summary.json").write_text(json.dumps(
            {"status": "done", "started_at": started, "wall_time_sec": 60.0}))
    return repo / folder


def by_id(rows: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in rows}


def test_a_claim_changed_after_its_results_needs_the_papers_quote(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    entry = {"id": "x", "statement": "better is better", "where": "Fig. 1", "comparisons": [LOWER["claim"]]}
    commit(repo, "2026-01-01T00:00:00+00:00", [LOWER], [entry])
    root = results(repo, "2026-01-02T00:00:00+00:00")
    # after the runs: a new comparison, a margin on the old one, the registry entry re-read
    commit(repo, "2026-01-03T00:00:00+00:00", [{**LOWER, "margin": 0.01}, HIGHER], [{**entry, "reading": "later"}])
    rows = by_id(declared.declaration_report([root], repo=repo))
    assert rows["g: better ends below vanilla"]["change"] == "margin: None -> 0.01"
    assert rows["g: worse ends above vanilla"]["change"] == "not declared"
    assert rows["x"]["change"] == "reading: None -> 'later'"
    assert {r["status"] for r in rows.values()} == {"unjustified"}
    assert rows["g: better ends below vanilla"]["results_seen"] == "2026-01-02T00:01:00+00:00"

    # quoted, the changes stand; restored, the old form is no change at all; a comparison no claim counts is
    # shown as such
    quote = "'only residual connections for values yield positive effects' (4.3)"
    commit(repo, "2026-01-04T00:00:00+00:00", [LOWER, {**HIGHER, "quote": quote}], [{**entry, "quote": quote}])
    rows = by_id(declared.declaration_report([root], counted={("g", LOWER["claim"])}, repo=repo))
    assert rows["g: better ends below vanilla"]["status"] == "fixed before its results"
    assert rows["g: worse ends above vanilla"]["status"] == "changed after its results, quoted"
    assert rows["x"]["status"] == "fixed before its results"
    commit(repo, "2026-01-05T00:00:00+00:00", [LOWER, HIGHER], [entry])
    rows = by_id(declared.declaration_report([root], counted={("g", LOWER["claim"])}, repo=repo))
    assert rows["g: worse ends above vanilla"]["status"] == "unjustified, shown only"
    assert declared.unjustified(rows.values()) == []


def test_every_results_folder_given_is_dated(tmp_path):
    """Grids in two results folders (`claims A B --preconditions`): the comparisons of both are dated, each
    against its own grid file."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "configs/grids").mkdir(parents=True)
    (repo / "configs/grids/h.yaml").write_text(yaml.safe_dump({"name": "h", "base": "none.yaml", "baseline": "vanilla",
                                                                "cells": {c["name"]: {} for c in CELLS},
                                                                "claims": [HIGHER]}))
    commit(repo, "2026-01-01T00:00:00+00:00", [LOWER], [])
    first = results(repo, "2026-01-02T00:00:00+00:00")
    second = results(repo, "2026-01-02T00:00:00+00:00", "h", "elsewhere")
    rows = by_id(declared.declaration_report([first, second], repo=repo))
    assert {k: r["status"] for k, r in rows.items() if r["kind"] == "comparison"} == {
        "g: better ends below vanilla": "fixed before its results", "h: worse ends above vanilla": "fixed before its results"}
    assert by_id(declared.declaration_report([second], repo=repo)).keys() == {"h: worse ends above vanilla"}
