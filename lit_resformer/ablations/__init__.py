"""Ablation grids: a grid YAML -> runs (one directory per grid/cell/seed) -> report.

    from lit_resformer.ablations import GridOptions, run_grid, write_report
    outcome = run_grid("configs/grids/fig7.yaml", GridOptions(runs_dir="runs"))   # train, resume, skip, report
    write_report("runs/fig7")                                                    # -> runs/fig7/index.html

Command line: `lit-resformer grid GRID.yaml [...]`, `lit-resformer report RUNS/<grid>`, `lit-resformer claims`,
`lit-resformer scaling`, `lit-resformer export-results` and `lit-resformer merge-results`.
"""

from lit_resformer.run_dir import RunConflict, RunDir

from .executors import LocalExecutor, SlurmExecutor
from .job import RunJob, execute
from .metrics import read_metrics
from .report import write_report
from .runner import GridOptions, GridOutcome, PoolOptions, run_grid
from .spec import Grid, GridError, load_grid

__all__ = [
    "Grid", "GridError", "GridOptions", "GridOutcome", "LocalExecutor", "PoolOptions", "RunConflict", "RunDir",
    "RunJob", "SlurmExecutor", "execute", "load_grid", "read_metrics", "run_grid", "write_report",
]
