"""`lit-resformer lm-eval ARGS`: lm-eval's own command line, with the project's model registered.

    lit-resformer lm-eval --model_args ckpt=runs/x/checkpoints/last.ckpt,batch_size=16 --tasks piqa,arc_easy

ARGS are lm-eval's (see `lm-eval run --help`); its `run` command gets these defaults when they are absent:
``--model lit-resformer``, ``--device`` (cuda when available, else mps, else cpu) and ``--include_path`` to the
project's own tasks, joined, when offline task data is prepared (``--data-dir DIR``, else
$LIT_RESFORMER_EVAL_DATA; made by `lit-resformer eval prepare-data DIR`), by task overrides that read every
task of that folder from disk instead of the hub. An ``--include_path`` of your own replaces all of that.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

LM_EVAL_COMMANDS = ("run", "ls", "validate")


def _has_option(argv: list[str], *names: str) -> bool:
    return any(arg == name or arg.startswith(name + "=") for arg in argv for name in names)


def available_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


def task_folder(data_dir: str | Path | None, out_dir: str | Path) -> Path:
    """The folder for --include_path: the project's tasks, plus offline overrides when `data_dir` is given."""
    from lit_resformer.eval.tasks import PROJECT_TASKS_DIR, load_manifest, write_offline_overrides

    if data_dir is None:
        return PROJECT_TASKS_DIR
    out_dir = Path(out_dir)
    write_offline_overrides(sorted(load_manifest(data_dir)["tasks"]), data_dir, out_dir / "offline")
    shutil.copytree(PROJECT_TASKS_DIR, out_dir / "project", dirs_exist_ok=True)
    return out_dir


def lm_eval_argv(argv: list[str], include_path: Path, device: str) -> list[str]:
    """lm-eval's arguments with this project's defaults added where the user gave none."""
    command, rest = (argv[0], argv[1:]) if argv[:1] and argv[0] in LM_EVAL_COMMANDS else ("run", argv)
    if command != "run" or _has_option(rest, "-h", "--help"):
        return [command, *rest]
    defaults = []
    if not _has_option(rest, "--model", "-M"):
        defaults += ["--model", "lit-resformer"]
    if not _has_option(rest, "--device"):
        defaults += ["--device", device]
    if not _has_option(rest, "--include_path"):
        defaults += ["--include_path", str(include_path)]
    return [command, *rest, *defaults]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="lit-resformer lm-eval", add_help=False, allow_abbrev=False,
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=os.environ.get("LIT_RESFORMER_EVAL_DATA") or None, metavar="DIR",
                        help="offline task data made by `lit-resformer eval prepare-data DIR`")
    ours, theirs = parser.parse_known_args(argv)
    if _has_option(theirs, "-h", "--help"):
        parser.print_help()
        print()
    from lm_eval.__main__ import cli_evaluate

    import lit_resformer.eval.lm_eval_model  # noqa: F401  (registers the model "lit-resformer")

    own_argv = sys.argv
    with tempfile.TemporaryDirectory(prefix="lit-resformer-tasks-") as tmp:
        include_path = task_folder(ours.data_dir, tmp)
        sys.argv = ["lm-eval", *lm_eval_argv(theirs, include_path, available_device())]  # lm-eval parses sys.argv
        try:
            cli_evaluate()
        finally:
            sys.argv = own_argv
