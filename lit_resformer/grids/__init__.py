"""Ablation grids: a grid YAML -> runs (one directory per grid/cell/seed), trained unattended and resumably.

    from lit_resformer.grids import GridOptions, run_grid
    from lit_resformer.reports import write_report
    outcome = run_grid("configs/grids/fig7.yaml", GridOptions(runs_dir="runs"))   # train, resume, skip, report
    write_report("runs/fig7")                                                    # -> runs/fig7/index.html

Command line: `lit-resformer grid GRID.yaml [...]`, `lit-resformer export-results` and `lit-resformer merge-results`.
"""

from lit_resformer.grids.executors import LocalExecutor, SlurmExecutor
from lit_resformer.grids.jobs import RunJob, execute
from lit_resformer.grids.runner import GridOptions, GridOutcome, PoolOptions, run_grid
from lit_resformer.grids.spec import Grid, GridError, load_grid

__all__ = [
    "Grid", "GridError", "GridOptions", "GridOutcome", "LocalExecutor", "PoolOptions", "RunJob", "SlurmExecutor",
    "execute", "load_grid", "run_grid",
]
