"""run_eval: score a checkpoint on zero-shot tasks with lm-eval and write results + Table 1 report.

    from lit_resformer.eval.run import run_eval
    run_eval("runs/x/checkpoints/last.ckpt", tasks="paper", data_dir="eval_data", out_dir="runs/x/eval")

Writes into ``out_dir``:
    results.json            lm-eval's results dict (everything but the per-example samples) plus
                            ``lit_resformer`` = {name, ckpt, data_dir, tasks, offline: manifest entries}
    samples_<task>.jsonl    lm-eval's per-example records (arguments, loglikelihoods, metrics)
    zero_shot.md / .csv     the Table 1 style table (lit_resformer.eval.report)
    offline_tasks/          a copy of the generated task overrides, for the record (offline mode only)

Task files are code to lm-eval (`!function` imports Python next to them), so a call loads only the task files it
generates itself, into a fresh folder of its own, plus the project's tasks and folders the caller names in
`include_path`; never a file it finds in `out_dir` or `data_dir`. The offline path opens no network connection:
the Hugging Face libraries are put in offline mode for the call (`datasets` would otherwise report each local
load to the hub).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import lm_eval
from lm_eval.api.model import LM
from lm_eval.utils import handle_non_serializable

from lit_resformer.eval.lm_eval_model import DEFAULT_BATCH_SIZE, LitResFormerLM
from lit_resformer.eval.report import write_report
from lit_resformer.eval.tasks import build_task_manager, load_manifest, project_task_names, resolve_tasks
from lit_resformer.runs.run_dir import EVAL_RESULTS, RunDir
from lit_resformer.writing import atomic_write, atomic_write_json


def _default_name(ckpt) -> str:
    """A run's checkpoint is named by its run (RunDir.name), any other file by its stem, an in-memory LM by its class."""
    if isinstance(ckpt, (str, Path)):
        run = RunDir.from_checkpoint(ckpt)
        return run.name if run else Path(ckpt).stem
    return type(ckpt).__name__


def write_results(results: dict, out_dir: str | Path) -> Path:
    """results.json without samples, plus one samples_<task>.jsonl per task; returns results.json's path."""
    out_dir = Path(out_dir)
    summary = {k: v for k, v in results.items() if k != "samples"}
    for task, samples in results.get("samples", {}).items():
        lines = (json.dumps(s, default=handle_non_serializable, ensure_ascii=False) for s in samples)
        atomic_write(out_dir / f"samples_{task}.jsonl", "\n".join(lines) + "\n")
    # written last: its presence says the evaluation is complete
    return atomic_write_json(out_dir / EVAL_RESULTS, summary, default=handle_non_serializable, ensure_ascii=False)


OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """HF hub and datasets in offline mode for the block: their environment variables, and the flags the libraries
    already read from them when imported (with the download-count report `datasets` sends on every load)."""
    import datasets
    import huggingface_hub

    flags = [(datasets.config, "HF_HUB_OFFLINE", True), (datasets.config, "HF_DATASETS_OFFLINE", True),
             (datasets.config, "HF_UPDATE_DOWNLOAD_COUNTS", False), (huggingface_hub.constants, "HF_HUB_OFFLINE", True)]
    saved_flags = [(module, name, getattr(module, name)) for module, name, _ in flags]
    saved_env = {name: os.environ.get(name) for name in OFFLINE_ENV}
    try:
        for module, name, value in flags:
            setattr(module, name, value)
        os.environ.update(dict.fromkeys(OFFLINE_ENV, "1"))
        yield
    finally:
        for module, name, value in saved_flags:
            setattr(module, name, value)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_eval(
    ckpt: str | Path | LM,
    tasks: str | Sequence[str] = "paper",
    limit: int | float | None = None,
    data_dir: str | Path | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    out_dir: str | Path | None = None,
    device: str = "cpu",
    name: str | None = None,
    include_path: Sequence[str | Path] = (),
) -> dict:
    """Evaluate `ckpt` zero-shot on `tasks` and return lm-eval's results dict (with samples).

    ckpt: a Lightning checkpoint path, or an lm-eval ``LM`` already built (e.g. ``LitResFormerLM(model=...,
        tokenizer=...)`` or lm-eval's ``HFLM``); then `batch_size`/`device` are the LM's own.
    tasks: "paper" (the six Table 1 tasks), comma-separated names, or a list of names/sets.
    data_dir: offline task data (see lit_resformer.eval.prepare_data); None scores the standard tasks from the hub.
    include_path: folders of the caller's own task YAMLs (trusted by passing them: lm-eval may run their code).
    Task names and offline files are checked before the checkpoint is loaded.
    """
    task_names = resolve_tasks(tasks)
    offline = hub_offline() if data_dir is not None else contextlib.nullcontext()
    with tempfile.TemporaryDirectory(prefix="lit-resformer-tasks-") as override_dir, offline:
        task_manager = build_task_manager(task_names, data_dir=data_dir, override_dir=override_dir,
                                          include_path=include_path)
        lm = ckpt if isinstance(ckpt, LM) else LitResFormerLM(ckpt=ckpt, batch_size=batch_size, device=device)
        try:
            results = lm_eval.simple_evaluate(
                model=lm,
                tasks=task_names,
                limit=limit,
                task_manager=task_manager,
                batch_size=batch_size,
                device=device,
                log_samples=True,
            )
        except ConnectionError as err:  # `datasets` could not reach the hub for a task's data
            raise ConnectionError(
                f"{err}; without network, score from offline task data: prepare it once with "
                f"`lit-resformer eval prepare-data DIR` (or `make eval-data`), then pass --data-dir DIR (a grid's "
                f"--eval reads $LIT_RESFORMER_EVAL_DATA)"
            ) from None
        if out_dir is not None and data_dir is not None:
            record = Path(out_dir) / "offline_tasks"
            shutil.rmtree(record, ignore_errors=True)
            shutil.copytree(override_dir, record)
    local = set(project_task_names())
    offline = {}
    if data_dir is not None:
        manifest = load_manifest(data_dir)
        offline = {t: manifest["tasks"][t] for t in task_names if t not in local}
    results["lit_resformer"] = {
        "name": name or _default_name(ckpt),
        "ckpt": str(ckpt) if isinstance(ckpt, (str, Path)) else None,
        "data_dir": str(data_dir) if data_dir is not None else None,
        "tasks": task_names,
        "offline": offline,
    }
    if out_dir is not None:
        write_results(results, out_dir)
        write_report(results, out_dir, results["lit_resformer"]["name"])
    return results


def evaluate_run_dir(run_dir: str | Path) -> Path:
    """The grid's `--eval` step: score a run's last checkpoint on the paper tasks into its eval folder.

    Offline data comes from $LIT_RESFORMER_EVAL_DATA (made by `lit-resformer eval prepare-data`); without it the
    standard tasks load from the hub. $LIT_RESFORMER_EVAL_TASKS replaces the paper task set, $LIT_RESFORMER_EVAL_LIMIT
    caps the examples per task.
    """
    run = RunDir(run_dir)
    limit = os.environ.get("LIT_RESFORMER_EVAL_LIMIT")
    run_eval(run.last_checkpoint, tasks=os.environ.get("LIT_RESFORMER_EVAL_TASKS", "paper"),
             limit=int(limit) if limit else None,
             data_dir=os.environ.get("LIT_RESFORMER_EVAL_DATA") or None, out_dir=run.eval_dir)
    return run.eval_results
