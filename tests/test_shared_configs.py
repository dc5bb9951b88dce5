"""Cells of different grids that run the same config share their runs: the runner trains each such run once. A grid
that means to reuse another's runs must resolve, seed by seed, to exactly that grid's configs; this checks it."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GRIDS = REPO / "configs" / "grids"

# Where a run writes, not what it computes: the only fields allowed to differ between two shared runs.
OUTPUT_PATHS = (("trainer", "default_root_dir"), ("checkpoint", "dirpath"))

# (grid that reuses runs, its cell) -> (grid that owns them, its cell)
SHARED = {
    ("value-path.yaml", "vanilla"): ("evidence/fig7.yaml", "vanilla"),
    ("value-path.yaml", "resformer"): ("evidence/fig7.yaml", "resformer"),
}


def _resolved_by_seed(grid, cell: str) -> dict[int, dict]:
    """seed -> the run's config with every default filled in, output paths left out."""
    configs = {}
    for run in grid.runs():
        if run.cell != cell:
            continue
        config = grid.checker.resolved(run.config)
        for section, key in OUTPUT_PATHS:
            config.get(section, {}).pop(key, None)
        configs[run.seed] = config
    assert configs, f"{grid.name} has no cell {cell!r}"
    return configs


@pytest.fixture(scope="module")
def grids():
    from lit_resformer.grids.spec import load_grid

    files = {file for pair in SHARED.items() for file, _ in pair}
    return {file: load_grid(GRIDS / file) for file in files}


@pytest.mark.parametrize(("user", "owner"), SHARED.items(), ids=[f"{f}:{c}" for f, c in SHARED])
def test_shared_cells_resolve_to_the_same_config_at_every_seed(grids, user, owner):
    from lit_resformer.config.diff import config_differences

    mine = _resolved_by_seed(grids[user[0]], user[1])
    theirs = _resolved_by_seed(grids[owner[0]], owner[1])
    assert set(mine) <= set(theirs), f"{user} runs seeds {sorted(set(mine) - set(theirs))} that {owner} does not"
    for seed, config in mine.items():
        assert config == theirs[seed], (f"{user} and {owner} differ at seed {seed}: "
                                        f"{config_differences(config, theirs[seed])}")
