"""How long `lit-resformer` takes to refuse bad input: each command in a fresh process, as a user runs it.

Every command checks its arguments before it imports what does the work (torch, Lightning, pandas, matplotlib), so
a refusal costs the interpreter's start and the few modules the checks need. Each contender runs one refused
command (a missing grid file, a grid field that does not exist, an abbreviated option, a missing folder, config or
checkpoint) and checks that it was refused with the expected words, so that a fast answer to the wrong question
cannot pass. Beside them, for scale, two refusals that do need Lightning, since fit's own parser is what checks them
(an unknown override key in a grid's cell, an unknown `fit` option), and `import lightning` alone, which every
refusal paid before; these are timed over at most `REFERENCE_ROUNDS` rounds. Target (`targets.py`): <= 2 s for
each refusal that must be fast.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from . import targets
from .harness import ROOT, Metric, Result, Settings, interleaved, markdown_table, median, spread, target_mark

NAME = "cli_refusal"
REFERENCE_ROUNDS = 3
UNKNOWN_FIELD_GRID = "name: refused\nbase: configs/experiments/cpu-base.yaml\nbaseline: a\ncells: {a: {}}\nseedz: [0]\n"
UNKNOWN_KEY_GRID = ("name: refused\nbase: configs/experiments/cpu-base.yaml\nbaseline: a\n"
                    "cells: {a: {model.config.residul.target: v}}\n")


def refusals(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (the command's arguments, words its refusal must contain): the refusals that must be fast."""
    (tmp / "unknown-field.yaml").write_text(UNKNOWN_FIELD_GRID)
    missing = tmp / "missing"
    return {
        "grid_missing_file": (["grid", f"{missing}.yaml", "--dry-run"], "grid file not found"),
        "grid_unknown_field": (["grid", str(tmp / "unknown-field.yaml"), "--dry-run"], "unknown field(s) ['seedz']"),
        "grid_abbreviated_option": (["grid", "configs/grids/demo.yaml", "--dry-ru"], "did you mean --dry-run"),
        "report_missing_folder": (["report", str(missing)], "no such folder"),
        "claims_missing_folder": (["claims", str(missing)], "holds no grid run directory"),
        "plan_abbreviated_option": (["plan", str(missing), "--eff", "0.1"], "did you mean --effect"),
        "fit_missing_config": (["fit", "--config", f"{missing}.yaml"], "no such file"),
        "eval_missing_checkpoint": (["eval", "--ckpt", f"{missing}.ckpt"], "no such checkpoint file"),
        "export_missing_checkpoint": (["export", "--ckpt", f"{missing}.ckpt", "--to-hf", str(missing)],
                                      "no such checkpoint file"),
    }


def references(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """The refusals that fit's parser decides (Lightning imported first), for scale."""
    (tmp / "unknown-key.yaml").write_text(UNKNOWN_KEY_GRID)
    return {
        "grid_unknown_cell_key": (["grid", str(tmp / "unknown-key.yaml"), "--dry-run"], "did you mean ['residual']"),
        "fit_abbreviated_option": (["fit", "--trainer.max_step", "100"], "did you mean ['max_steps'"),
    }


def refused(args: list[str], words: str) -> None:
    """Run `lit-resformer ARGS` in a fresh interpreter; an error unless it was refused with `words`."""
    done = subprocess.run([sys.executable, "-m", "lit_resformer.cli", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode == 0 or words not in done.stderr:
        raise RuntimeError(f"lit-resformer {' '.join(args)} was not refused with {words!r}: exit {done.returncode}, "
                           f"stderr {done.stderr[-500:]!r}")


def import_lightning() -> None:
    subprocess.run([sys.executable, "-c", "import lightning"], check=True)


def run(settings: Settings) -> Result:
    with tempfile.TemporaryDirectory(prefix="bench-refusal-") as tmp:
        commands = refusals(Path(tmp))
        if settings.quick:  # the plumbing: one refusal of each kind of check
            commands = {name: commands[name] for name in ("grid_missing_file", "fit_missing_config")}
        times = interleaved({name: partial(refused, *command) for name, command in commands.items()}, settings)
        scale: dict[str, list[float]] = {}
        if not settings.quick:
            slow = references(Path(tmp))
            scale = interleaved({**{name: partial(refused, *command) for name, command in slow.items()},
                                 "import_lightning": import_lightning},
                                settings, reps=min(settings.reps, REFERENCE_ROUNDS), warmup=0)
            commands |= slow
        shown = {name: "`lit-resformer " + " ".join(args).replace(tmp, "TMP") + "`" for name, (args, _) in commands.items()}
    shown["import_lightning"] = "`python -c 'import lightning'`"
    # metric names: cli_refusal.fast.<refusal> (the target applies), cli_refusal.parser.<refusal>, .import_lightning
    metrics = {name: Metric(f"{NAME}.fast.{name}", median(values), "s", targets.target(f"{NAME}.fast", settings.cuda))
               for name, values in times.items()}
    metrics |= {name: Metric(f"{NAME}.{'' if name == 'import_lightning' else 'parser.'}{name}", median(values), "s")
                for name, values in scale.items()}
    rows = [[shown[name], m.value, spread((times | scale)[name]), target_mark(m)] for name, m in metrics.items()]
    markdown = (
        "Wall seconds from start to refusal of `python -m lit_resformer.cli ARGS` in a fresh process (median over "
        "rounds; each refusal checked for its message). The last rows, for scale: refusals that fit's parser decides "
        f"(Lightning imported first), and `import lightning` alone (at most {REFERENCE_ROUNDS} rounds).\n\n"
        + markdown_table(["refused command", "seconds", "spread (IQR)", "target"], rows)
    )
    return Result(NAME, list(metrics.values()), markdown)
