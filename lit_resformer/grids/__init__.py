"""Ablation grids: a grid YAML -> runs (one directory per grid/cell/seed), trained unattended and resumably.

    from lit_resformer.grids import GridOptions, load_grid, run_grid
    from lit_resformer.reports import write_report
    grid = load_grid("configs/grids/fig7.yaml")                # read and check every cell before anything runs
    outcome = run_grid(grid, GridOptions(runs_dir="runs"))      # train, resume, skip, report
    write_report("runs/fig7")                                                    # -> runs/fig7/index.html

Command line: `lit-resformer grid GRID.yaml [...]`, `lit-resformer export-results` and `lit-resformer merge-results`.
"""

import importlib

# Each public name and the module that defines it, imported on first use: the grid reader (claim_spec, directory) is
# needed where a run is not (report, claims), and the runner's modules bring Lightning with them.
_EXPORTS = {"GridOptions": "runner", "GridOutcome": "runner", "PoolOptions": "runner", "run_grid": "runner",
            "Grid": "grid", "GridError": "grid", "load_grid": "spec"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"lit_resformer.grids.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'lit_resformer.grids' has no attribute {name!r}")
