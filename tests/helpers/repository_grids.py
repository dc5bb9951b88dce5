"""The repository's grid files, each loaded once per test process: loading resolves every cell and checks it against
`fit`'s parser (a LightningCLI parser a grid), seconds that dozens of tests would otherwise pay again. The tests read
the Grid they get and never change it. The `repository_grid` fixture (conftest.py) passes the GPU tier its corpus."""

from __future__ import annotations

import functools
from pathlib import Path

from lit_resformer.grids.grid import Grid
from lit_resformer.grids.spec import load_grid

GRIDS = Path(__file__).resolve().parents[2] / "configs" / "grids"


@functools.cache
def repository_grid(relative: str, code_corpus: str | None = None) -> Grid:
    """configs/grids/<relative>, with `data.path` forced to `code_corpus` where a grid trains on code."""
    return load_grid(GRIDS / relative, forced={"data.path": code_corpus} if code_corpus else None)
