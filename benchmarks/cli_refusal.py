"""How long `lit-resformer` takes to refuse bad input: each command in a fresh process, as a user runs it.

Every command checks its arguments before it imports what does the work (torch, Lightning, pandas, matplotlib), so
a refusal costs the interpreter's start and the few modules the checks need; `fit`'s parser and checks run on the
recorded copy of its parser (lit_resformer.config.quick_check). Each contender runs one refused command in an empty
working folder (where `fit` would make its run directory) and must be refused with the expected words, in exactly one
line on stderr and nothing on stdout, leaving that folder empty: a fast answer to the wrong question, a traceback or
a half-made run directory fails the benchmark.

What is judged is the user + system CPU time of the refusing process: what it costs an idle core. The wall time is
shown beside it, but on a machine whose cores are busy with other work (this suite's long training runs) it mostly
measures the wait for a core, about load average / cores times the CPU time, so the table says the load it was
measured under.

For scale, timed over at most `REFERENCE_ROUNDS` rounds: a refusal that fit's parser itself decides, Lightning
imported first (an unknown key of a grid's cell, which the grid checks with fit's parser), and `import lightning`
alone, which every `fit` refusal paid before. Target (`targets.py`): <= 2 CPU seconds for each refusal that must be
fast.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import targets
from .harness import ROOT, Metric, Result, Settings, markdown_table, median, spread, target_mark

NAME = "cli_refusal"
REFERENCE_ROUNDS = 3
EXPERIMENT = ROOT / "configs" / "experiments" / "cpu-demo-resformer.yaml"
UNKNOWN_FIELD_GRID = (f"name: refused\nbase: {ROOT}/configs/experiments/cpu-base.yaml\nbaseline: a\ncells: {{a: {{}}}}\n"
                      "seedz: [0]\n")
UNKNOWN_KEY_GRID = (f"name: refused\nbase: {ROOT}/configs/experiments/cpu-base.yaml\nbaseline: a\n"
                    "cells: {a: {model.config.residul.target: v}}\n")
UNKNOWN_KEY_EXPERIMENT = f"compose: [{EXPERIMENT}]\nmodel: {{lrr: 0.001}}\n"


def refusals(inputs: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (the command's arguments, words its refusal must contain): the refusals that must be fast. Files they
    read are written to `inputs`."""
    (inputs / "unknown-field.yaml").write_text(UNKNOWN_FIELD_GRID)
    (inputs / "unknown-key-experiment.yaml").write_text(UNKNOWN_KEY_EXPERIMENT)
    missing = inputs / "missing"
    fit = ["fit", "--config", str(EXPERIMENT)]
    cases = {
        "fit_abbreviated_option": ([*fit, "--trainer.max_step", "5"], "did you mean ['max_steps'"),
        "fit_negative_max_steps": ([*fit, "--trainer.max_steps", "-5"], "trainer.max_steps=-5 is out of range"),
        "fit_gpu_on_a_cpu_machine": ([*fit, "--trainer.accelerator", "gpu"], "no GPU can be used here"),
        "fit_unknown_residual_target": ([*fit, "--model.config.residual.target", "w"],
                                        "model.config.residual.target expects one of ['none', 'v', 'q', 'k']"),
        "fit_seq_len_beyond_the_model": ([*fit, "--data.seq_len", "4096"], "data.seq_len=4096 exceeds"),
        "fit_seq_len_not_a_number": ([*fit, "--data.seq_len", "long"], "data.seq_len expects a number (integer)"),
        "fit_negative_lr": ([*fit, "--model.lr", "-0.001"], "model.lr=-0.001 is out of range"),
        "fit_unknown_optimizer": ([*fit, "--model.optimizer", "sgd"], "model.optimizer expects one of ['adamw'"),
        "fit_unknown_precision": ([*fit, "--trainer.precision", "8"], "trainer.precision expects one of"),
        "fit_model_that_does_not_compose": ([*fit, "--model.config.n_head", "3"], "must be divisible by n_head=3"),
        "fit_unknown_key_in_a_file": (["fit", "--config", str(inputs / "unknown-key-experiment.yaml")],
                                      "LitResFormer has no field 'lrr'; did you mean ['lr'"),
        "fit_missing_checkpoint": ([*fit, "--ckpt_path", f"{missing}.ckpt"], f"--ckpt_path {missing}.ckpt is missing"),
        "fit_missing_config": (["fit", "--config", f"{missing}.yaml"], "no such file"),
        "validate_abbreviated_option": (["validate", "--config", str(EXPERIMENT), "--trainer.limit_val_batche", "1"],
                                        "did you mean ['limit_val_batches'"),
        "grid_missing_file": (["grid", f"{missing}.yaml", "--dry-run"], "grid file not found"),
        "grid_unknown_field": (["grid", str(inputs / "unknown-field.yaml"), "--dry-run"], "unknown field(s) ['seedz']"),
        "grid_abbreviated_option": (["grid", str(ROOT / "configs/grids/demo.yaml"), "--dry-ru"],
                                    "did you mean --dry-run"),
        "report_missing_folder": (["report", str(missing)], "no such folder"),
        "claims_missing_folder": (["claims", str(missing)], "holds no grid run directory"),
        "plan_abbreviated_option": (["plan", str(missing), "--eff", "0.1"], "did you mean --effect"),
        "eval_missing_checkpoint": (["eval", "--ckpt", f"{missing}.ckpt"], "no such checkpoint file"),
        "export_missing_checkpoint": (["export", "--ckpt", f"{missing}.ckpt", "--to-hf", str(missing)],
                                      "no such checkpoint file"),
    }
    from lit_resformer.config.field_checks import accelerator_problem

    if accelerator_problem("gpu") is None:  # a machine with a GPU would train, not refuse
        del cases["fit_gpu_on_a_cpu_machine"]
    return cases


def references(inputs: Path) -> dict[str, tuple[list[str], str]]:
    """A refusal that fit's parser decides (Lightning imported first), for scale."""
    (inputs / "unknown-key.yaml").write_text(UNKNOWN_KEY_GRID)
    return {"grid_unknown_cell_key": (["grid", str(inputs / "unknown-key.yaml"), "--dry-run"],
                                      "did you mean ['residual']")}


def refused(args: list[str], words: str, one_line: bool = True) -> tuple[float, float]:
    """Run `lit-resformer ARGS` in a fresh interpreter in an empty folder: (wall seconds, user + system seconds). An
    error unless it was refused with `words`, in one line (`one_line`) and leaving nothing behind."""
    with tempfile.TemporaryDirectory(prefix="bench-refusal-cwd-") as cwd:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "lit_resformer.cli", *args], cwd=cwd, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        left = sorted(str(p.relative_to(cwd)) for p in Path(cwd).rglob("*"))
    command = f"lit-resformer {' '.join(args)}"
    if done.returncode == 0 or words not in done.stderr:
        raise RuntimeError(f"{command} was not refused with {words!r}: exit {done.returncode}, "
                           f"stderr {done.stderr[-500:]!r}")
    if one_line and (len(done.stderr.splitlines()) != 1 or done.stdout):
        raise RuntimeError(f"{command} was refused in more than one line: stdout {done.stdout!r}, "
                           f"stderr {done.stderr!r}")
    if left:
        raise RuntimeError(f"{command} left {left} behind in its working folder")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def import_lightning() -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import lightning"], check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def timed(contenders: dict, rounds: int, warmup: int) -> dict[str, tuple[list[float], list[float]]]:
    """name -> (wall seconds, CPU seconds) per counted round; rounds interleaved, the order rotated every round."""
    names = list(contenders)
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in names}
    for index in range(warmup + rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu = contenders[name]()
            if index >= warmup:
                times[name][0].append(wall)
                times[name][1].append(cpu)
    return times


def run(settings: Settings) -> Result:
    with tempfile.TemporaryDirectory(prefix="bench-refusal-") as tmp:
        commands = refusals(Path(tmp))
        if settings.quick:  # the plumbing: one refusal of each kind of check
            commands = {name: commands[name] for name in ("grid_missing_file", "fit_negative_max_steps")}
        times = timed({name: lambda c=command: refused(*c) for name, command in commands.items()},
                      settings.reps, settings.warmup)
        scale: dict[str, tuple[list[float], list[float]]] = {}
        if not settings.quick:
            slow = references(Path(tmp))
            contenders = {name: lambda c=command: refused(*c, one_line=False) for name, command in slow.items()}
            scale = timed({**contenders, "import_lightning": import_lightning},
                          min(settings.reps, REFERENCE_ROUNDS), warmup=0)
            commands |= slow
        shown = {name: "`lit-resformer " + " ".join(args).replace(tmp, "TMP").replace(str(ROOT) + "/", "") + "`"
                 for name, (args, _) in commands.items()}
    shown["import_lightning"] = "`python -c 'import lightning'`"
    # metric names: cli_refusal.fast.<refusal> (CPU seconds, the target applies), cli_refusal.parser.<refusal> and
    # cli_refusal.import_lightning (CPU seconds, for scale), and cli_refusal.wall.<refusal> (wall seconds of each)
    metrics, rows = [], []
    for name, (wall, cpu) in (times | scale).items():
        group = "fast." if name in times else "" if name == "import_lightning" else "parser."
        target = targets.target(f"{NAME}.fast", settings.cuda) if name in times else None
        seconds = Metric(f"{NAME}.{group}{name}", median(cpu), "s", target)
        metrics += [seconds, Metric(f"{NAME}.wall.{name}", median(wall), "s")]
        rows.append([shown[name], seconds.value, spread(cpu), target_mark(seconds), median(wall), spread(wall)])
    load = os.getloadavg()
    under_load = f"wall s, under load {load[0]:.1f} on {os.cpu_count()} cores"
    markdown = (
        "Seconds from start to refusal of `python -m lit_resformer.cli ARGS` in a fresh process, run in an empty "
        "folder (median over rounds, spread the interquartile range). The target judges the user + system CPU time "
        "of the process, which is what the refusal costs an idle core. **The wall time was measured under load**: "
        f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min, at the end) on "
        f"{os.cpu_count()} cores, busy with other work, so a process waits for a core about load / cores times its "
        "CPU time; it is shown, not judged. Each refusal is checked for its words, for being one line on stderr with "
        "nothing on stdout, and for leaving its folder empty. The last rows, for scale: a refusal that fit's parser "
        f"decides (Lightning imported first) and `import lightning` alone (at most {REFERENCE_ROUNDS} rounds).\n\n"
        + markdown_table(["refused command", "CPU s (user + system)", "spread", "target", under_load, "spread"], rows)
    )
    return Result(NAME, metrics, markdown)
