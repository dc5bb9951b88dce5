"""run_eval: score a checkpoint on zero-shot tasks with lm-eval and write results + Table 1 report.

    from eval.run import run_eval
    run_eval("runs/x/checkpoints/last.ckpt", tasks="paper", data_dir="eval_data", out_dir="runs/x/eval")

Writes into ``out_dir``:
    results.json            lm-eval's results dict (everything but the per-example samples) plus
                            ``lit_resformer`` = {name, ckpt, data_dir, tasks, offline: manifest entries}
    samples_<task>.jsonl    lm-eval's per-example records (arguments, loglikelihoods, metrics)
    zero_shot.md / .csv     the Table 1 style table (eval.report)
    offline_tasks/          the generated task overrides (offline mode only)
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import lm_eval
from lm_eval.api.model import LM
from lm_eval.utils import handle_non_serializable

from eval.lm_eval_model import DEFAULT_BATCH_SIZE, LitResFormerLM
from eval.report import write_report
from eval.tasks import build_task_manager, load_manifest, project_task_names, resolve_tasks
from lit_resformer.reporting import atomic_write, atomic_write_json
from lit_resformer.run_dir import EVAL_RESULTS, RunDir


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


def run_eval(
    ckpt: str | Path | LM,
    tasks: str | Sequence[str] = "paper",
    limit: int | float | None = None,
    data_dir: str | Path | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    out_dir: str | Path | None = None,
    device: str = "cpu",
    name: str | None = None,
) -> dict:
    """Evaluate `ckpt` zero-shot on `tasks` and return lm-eval's results dict (with samples).

    ckpt: a Lightning checkpoint path, or an lm-eval ``LM`` already built (e.g. ``LitResFormerLM(model=...,
        tokenizer=...)`` or lm-eval's ``HFLM``); then `batch_size`/`device` are the LM's own.
    tasks: "paper" (the six Table 1 tasks), comma-separated names, or a list of names/sets.
    data_dir: offline task data (see eval.prepare_data); None scores the standard tasks from the hub.
    Task names and offline files are checked before the checkpoint is loaded.
    """
    task_names = resolve_tasks(tasks)
    with tempfile.TemporaryDirectory() as tmp:
        override_dir = Path(out_dir) / "offline_tasks" if out_dir is not None else Path(tmp)
        task_manager = build_task_manager(task_names, data_dir=data_dir, override_dir=override_dir)
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
