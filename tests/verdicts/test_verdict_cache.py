"""The board's cache of judged grids (lit_resformer.verdicts.verdict_cache): a grid whose runs and manifest did not change is
read back, not judged again, and reads back exactly; any change to a run's results or to the stored claims is a new
key."""

from __future__ import annotations

import json

import pytest

from lit_resformer.runs.directory import GridDir, grid_dirs, grid_index
from lit_resformer.verdicts import judgements
from lit_resformer.verdicts.judgements import Judgements
from lit_resformer.verdicts.scoreboard_rows import scoreboard
from lit_resformer.verdicts.verdict_cache import VerdictCache, grid_key
from tests.helpers.claims_grids import claims_grid


def board(runs, cache: VerdictCache) -> list[dict]:
    return [v.to_dict() for v in scoreboard([runs], Judgements(grid_index(grid_dirs([runs])), cache))]


def test_a_grid_is_judged_once_and_read_back_exactly_until_its_runs_or_claims_change(tmp_path, monkeypatch):
    grid = claims_grid(tmp_path)
    runs, cache = grid.parent, VerdictCache(tmp_path / "cache")
    first = board(runs, cache)
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1

    def judged_again(*args, **kwargs):
        raise AssertionError("judged again")

    monkeypatch.setattr(judgements, "_unadjusted_verdicts", judged_again)
    assert board(runs, cache) == first  # every field, power and regime included

    key = grid_key(GridDir(grid))
    summary = grid / "better" / "seed0" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "final_val_loss": 4.0}))
    assert grid_key(GridDir(grid)) != key
    with pytest.raises(AssertionError, match="judged again"):
        board(runs, cache)

    summary_key = grid_key(GridDir(grid))
    GridDir(grid).write_claims([])
    assert grid_key(GridDir(grid)) != summary_key
