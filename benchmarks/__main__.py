"""`python -m benchmarks [names...] [--quick]`: run benchmarks, write their JSON and markdown sections."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
import time
from pathlib import Path

import torch

from .harness import BENCHMARKS as HARNESS_BENCHMARKS
from .harness import (
    MARKDOWN,
    RESULTS_DIR,
    Settings,
    machine_meta,
    pick_device,
    retain_freed_memory,
    stop_building_on_sigterm,
    threads,
    update_markdown,
    write_json,
)

# Every benchmark, in the order `python -m benchmarks` runs them: the harness's (whose order is also the order of the
# sections of docs/BENCHMARKS.md), then optimizer_step (Muon's step time against AdamW's).
BENCHMARKS = (*HARNESS_BENCHMARKS, "optimizer_step")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="name", help=f"benchmarks to run (default: all of {list(BENCHMARKS)})")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and 2 rounds: checks the plumbing, measures nothing")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch.set_num_threads (default: all cores)")
    parser.add_argument("--reps", type=int, default=None, help="counted rounds (default 10, quick 2)")
    parser.add_argument("--warmup", type=int, default=None, help="uncounted warm-up rounds (default 2, quick 1)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--retain-freed-memory", action="store_true",
                        help="glibc mallopt: keep freed memory in the process (fewer page faults, less noise)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds each benchmark may take: on CUDA contenders are built in priority order until "
                             "the budget runs low, the rest are listed as left out (default: no limit)")
    parser.add_argument("--results-dir", type=Path, default=None,
                        help=f"default {RESULTS_DIR.relative_to(RESULTS_DIR.parents[1])}, its cuda/ folder for a GPU run")
    parser.add_argument("--markdown", type=Path, default=MARKDOWN)
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; allowed: {list(BENCHMARKS)}")
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    if args.budget_s is not None and args.budget_s <= 0:
        parser.error("--budget-s must be > 0")
    for name in ("reps", "warmup"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "reps" else 0):
            parser.error(f"--{name} must be >= {1 if name == 'reps' else 0}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.budget_s is not None:
        stop_building_on_sigterm()
    if args.retain_freed_memory:
        retain_freed_memory()
    settings = Settings(
        quick=args.quick,
        reps=args.reps if args.reps is not None else (2 if args.quick else 10),
        warmup=args.warmup if args.warmup is not None else (1 if args.quick else 2),
        device=pick_device(args.device),
        retain_freed_memory=args.retain_freed_memory,
        budget_s=args.budget_s,
    )
    results_dir = args.results_dir or (RESULTS_DIR / "cuda" if settings.cuda else RESULTS_DIR)
    with threads(args.threads):
        for name in args.names or BENCHMARKS:
            module = importlib.import_module(f"benchmarks.{name}")
            torch.manual_seed(0)
            meta = machine_meta(settings)  # before the run: the load average says how busy the machine was going in
            started = time.perf_counter()
            result = module.run(dataclasses.replace(settings, started=started))
            meta["wall_s"] = round(time.perf_counter() - started, 1)
            json_path = write_json(result, meta, results_dir)
            update_markdown(result, meta, args.markdown)
            print(f"{name}: {json_path} ({meta['wall_s']:.0f} s)", file=sys.stderr)
            for metric in result.metrics:
                mark = "" if metric.met is None else ("  [target met]" if metric.met else "  [target MISSED]")
                print(f"  {metric.metric} = {metric.value:.4g} {metric.unit}{mark}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
