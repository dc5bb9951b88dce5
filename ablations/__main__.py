"""python -m ablations run GRID.yaml [options] | report RUNS_DIR/<grid> | export RUNS_DIR/<grid>... --out DIR |
merge DIR/<grid>.tar.gz RESULTS_DIR"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from lit_resformer.run_dir import RunConflict

from .job import POST_TRAINING, post_training_step
from .report import write_report
from .runner import run_grid
from .spec import GridError

EXIT_RUNS_LEFT = 75  # EX_TEMPFAIL: a time limit left runs for the next call


def _dotted_value(text: str) -> tuple[str, object]:
    """`KEY=VALUE` with VALUE read as YAML (numbers, booleans, null, lists)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. trainer.accelerator=gpu), got {text!r}")
    return key.strip(), yaml.safe_load(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ablations", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train every run of a grid (idempotent), then write its report")
    add_run_arguments(run)

    report = sub.add_parser("report", help="write report.md and index.html for RUNS_DIR/<grid>")
    report.add_argument("grid_dir", type=Path)

    export = sub.add_parser("export", help="pack each grid's finished runs (results, no checkpoints) into OUT/<grid>.tar.gz")
    export.add_argument("grid_dirs", type=Path, nargs="+", metavar="GRID_DIR", help="RUNS_DIR/<grid>")
    export.add_argument("--out", type=Path, required=True, help="folder for the <grid>.tar.gz archives")
    export.add_argument("--note", default="", help="where the runs trained (kept in the results' provenance.json)")

    merge = sub.add_parser("merge", help="add an export's finished runs to a results folder (e.g. docs/results)")
    merge.add_argument("archive", type=Path)
    merge.add_argument("results_dir", type=Path, help="the runs folder that keeps results: <results_dir>/<grid>/")

    step = sub.add_parser("post-train", help=argparse.SUPPRESS)  # used by the runner: one step on one finished run
    step.add_argument("kind", choices=sorted(POST_TRAINING))
    step.add_argument("run_dir", type=Path)
    return parser


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `run` (also used by `lit-resformer grid`)."""
    parser.add_argument("grid", type=Path, help="grid YAML, e.g. configs/grids/fig7.yaml")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="runs go to RUNS_DIR/<grid>/<cell>/seed<k>")
    parser.add_argument("--executor", choices=["local", "slurm"], default="local")
    parser.add_argument("--dry-run", action="store_true", help="list what would run and what is skipped")
    parser.add_argument("--seeds", type=int, nargs="+", help="replace the grid's seeds")
    parser.add_argument("--eval", action="store_true", help="zero-shot eval of every finished run")
    parser.add_argument("--analyze", action="store_true", help="attention analysis of every finished run")
    parser.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", type=_dotted_value,
                        help="override KEY (dotted, e.g. trainer.accelerator=gpu) in every cell; repeatable")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="stop after this many seconds: no run starts later, running ones are stopped and "
                             "resumed by the next call (exit code 75 while runs are left)")
    parser.add_argument("--allow-any-class", action="store_true",
                        help="let the grid's configs construct any class (only for a grid file you trust)")
    local = parser.add_argument_group("local executor")
    local.add_argument("--devices", help="comma-separated GPU ids to use (default: all visible GPUs)")
    local.add_argument("--gpus-per-run", type=int, default=1, help="GPUs per run (also for slurm)")
    local.add_argument("--cpu-slots", type=int, default=1, help="concurrent runs on a CPU-only machine")
    local.add_argument("--runs-per-gpu", type=int, default=1,
                       help="concurrent runs sharing each GPU (small models that cannot fill one)")
    local.add_argument("--threads-per-run", type=int,
                       help="intra-op threads of each run (OMP_NUM_THREADS; default: the cores split between the slots)")
    slurm = parser.add_argument_group("slurm executor (submitit)")
    slurm.add_argument("--partition")
    slurm.add_argument("--time", type=int, default=24 * 60, help="time limit per job in minutes (requeued after)")
    slurm.add_argument("--cpus-per-task", type=int)
    slurm.add_argument("--mem-gb", type=float)
    slurm.add_argument("--account")
    slurm.add_argument("--qos")
    slurm.add_argument("--constraint")
    slurm.add_argument("--max-requeues", type=int, default=5)


def run_from_args(args: argparse.Namespace) -> int:
    slurm = dict(
        partition=args.partition, time_min=args.time, cpus_per_task=args.cpus_per_task, mem_gb=args.mem_gb,
        account=args.account, qos=args.qos, constraint=args.constraint, max_requeues=args.max_requeues,
    )
    try:
        outcome = run_grid(
            args.grid,
            runs_dir=args.runs_dir,
            executor=args.executor,
            dry_run=args.dry_run,
            seeds=args.seeds,
            evaluate=args.eval,
            analyze=args.analyze,
            report=not args.no_report,
            devices=args.devices.split(",") if args.devices else None,
            gpus_per_run=args.gpus_per_run,
            cpu_slots=args.cpu_slots,
            threads_per_run=args.threads_per_run,
            runs_per_gpu=args.runs_per_gpu,
            time_limit_s=args.time_limit,
            forced=dict(args.set),
            slurm=slurm,
            allow_any_class=args.allow_any_class,
        )
    except (GridError, RunConflict, RuntimeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the local trainers were stopped and their runs marked interrupted
        jobs_left = " (the submitted Slurm jobs keep running: squeue, scancel)" if args.executor == "slurm" else ""
        print(f"interrupted; rerun the same command to resume{jobs_left}", flush=True)
        return 130
    return 1 if outcome.failed else EXIT_RUNS_LEFT if outcome.left else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return run_from_args(args)
    if args.command in ("export", "merge"):
        from .slices import SliceError, export_grid, merge_export

        try:
            if args.command == "export":  # one process for every grid: a bare machine imports torch slowly
                for grid_dir in args.grid_dirs:
                    done = export_grid(grid_dir, args.out / f"{grid_dir.name}.tar.gz", note=args.note)
                    print(f"{args.out / (grid_dir.name + '.tar.gz')}: {len(done['runs'])} finished run(s) of {done['grid']}")
            else:
                merged = merge_export(args.archive, args.results_dir)
                print(f"{merged['into']}: {len(merged['added'])} run(s) added, {len(merged['already_there'])} already there")
        except (SliceError, FileNotFoundError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    if args.command == "report":
        try:
            print(write_report(args.grid_dir))
        except FileNotFoundError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    post_training_step(args.kind)(args.run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
