"""Ablation grids: a grid YAML -> runs (one directory per grid/cell/seed) -> report.

    from ablations import run_grid, write_report
    outcome = run_grid("configs/grids/fig7.yaml", runs_dir="runs")     # train, resume, skip, report
    write_report("runs/fig7")                                          # -> runs/fig7/index.html

Command line: `python -m ablations run GRID.yaml [...]` and `python -m ablations report RUNS/<grid>`.
"""

from lit_resformer.run_dir import RunConflict, RunDir

from .executors import LocalExecutor, SlurmExecutor
from .job import RunJob, execute
from .metrics import read_metrics
from .report import write_report
from .runner import GridOutcome, run_grid
from .spec import Grid, GridError, load_grid

__all__ = [
    "Grid", "GridError", "GridOutcome", "LocalExecutor", "RunConflict", "RunDir", "RunJob", "SlurmExecutor",
    "execute", "load_grid", "read_metrics", "run_grid", "write_report",
]
