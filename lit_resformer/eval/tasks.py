"""Task sets and offline task overrides for lm-eval.

Online, tasks are lm-eval's built-in tasks under their standard names (data from the hub).
Offline (``data_dir`` given), each requested task gets a generated YAML override with the *same task
name*: it includes lm-eval's built-in YAML for that task (so prompts, choices and metrics are exactly
lm-eval's) and only replaces where the data comes from, pointing ``dataset_path``/``data_files`` at the
local copy listed in ``<data_dir>/manifest.json``. The overrides are loaded through
``TaskManager(include_path=..., include_defaults=False)``, so nothing can fall back to the hub.

The project's own small tasks (``lit_resformer/eval/tasks_data/``) are available in both modes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import lm_eval.tasks
import yaml
from lm_eval.tasks import TaskManager
from lm_eval.tasks._index import Kind, TaskIndex
from lm_eval.tasks._yaml_loader import load_yaml

# Table 1 of the paper: zero-shot, acc and acc_norm, plus their average.
PAPER_TASKS = ("hellaswag", "openbookqa", "winogrande", "arc_easy", "arc_challenge", "piqa")
TASK_SETS = {"paper": PAPER_TASKS}

PROJECT_TASKS_DIR = Path(__file__).parent / "tasks_data"
LM_EVAL_TASKS_DIR = Path(lm_eval.tasks.__file__).parent
# Built-in lm-eval YAML of each task that can run offline (relative to lm_eval/tasks/).
BUILTIN_TASK_YAML = {
    "hellaswag": "hellaswag/hellaswag.yaml",
    "openbookqa": "openbookqa/openbookqa.yaml",
    "winogrande": "winogrande/default.yaml",
    "arc_easy": "arc/arc_easy.yaml",
    "arc_challenge": "arc/arc_challenge.yaml",
    "piqa": "piqa/piqa.yaml",
}
MANIFEST_NAME = "manifest.json"
# datasets' packaged builders that read local files, by the manifest's "format".
LOCAL_FORMATS = ("arrow", "json", "parquet", "csv")


def resolve_tasks(tasks: str | Sequence[str]) -> list[str]:
    """'paper' | 'a,b,c' | ['paper', 'x'] -> task names, set names expanded, order kept, no repeats."""
    items = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    names: list[str] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        for name in TASK_SETS.get(item, (item,)):
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError(f"tasks={tasks!r} names no task; give a task set {sorted(TASK_SETS)} or task names")
    return names


def project_task_names() -> list[str]:
    """Tasks defined by the project itself under lit_resformer/eval/tasks_data/."""
    index = TaskIndex.build([PROJECT_TASKS_DIR])
    return sorted(name for name, entry in index.items() if entry.kind in (Kind.TASK, Kind.PY_TASK))


def builtin_task_yaml(task: str) -> Path:
    if task not in BUILTIN_TASK_YAML:
        raise ValueError(f"task {task!r} has no offline override; offline tasks are {sorted(BUILTIN_TASK_YAML)}")
    return LM_EVAL_TASKS_DIR / BUILTIN_TASK_YAML[task]


def lm_eval_split(task: str) -> str:
    """The split lm-eval scores for a built-in task (its test split if it has one, else validation)."""
    config = load_yaml(builtin_task_yaml(task), resolve_func=False)
    return config.get("test_split") or config["validation_split"]


def manifest_path(data_dir: str | Path) -> Path:
    return Path(data_dir) / MANIFEST_NAME


def load_manifest(data_dir: str | Path) -> dict:
    path = manifest_path(data_dir)
    if not path.is_file():
        raise FileNotFoundError(
            f"offline task data: no manifest at {path}; build the folder with "
            f"`lit-resformer eval prepare-data {data_dir}`"
        )
    return json.loads(path.read_text())


def offline_entry(data_dir: str | Path, task: str, manifest: dict | None = None) -> dict:
    """The manifest entry of `task`, with every listed data file checked to exist."""
    data_dir = Path(data_dir)
    manifest = load_manifest(data_dir) if manifest is None else manifest
    entry = manifest["tasks"].get(task)
    if entry is None:
        raise FileNotFoundError(
            f"offline task {task!r}: not listed in {manifest_path(data_dir)} (expected its data under "
            f"{data_dir / task}); the folder holds {sorted(manifest['tasks'])}"
        )
    if entry["format"] not in LOCAL_FORMATS:
        raise ValueError(f"{manifest_path(data_dir)}: tasks.{task}.format={entry['format']!r}; allowed {list(LOCAL_FORMATS)}")
    for name in entry["files"]:
        if not (data_dir / name).is_file():
            raise FileNotFoundError(
                f"offline task {task!r}: missing data file, expected at {data_dir / name} "
                f"(listed in {manifest_path(data_dir)})"
            )
    return entry


def override_config(task: str, entry: dict, data_dir: str | Path) -> dict:
    """lm-eval task YAML (as a dict) that reuses the built-in task and reads `entry`'s local files."""
    split = entry["split"]
    return {
        "include": str(builtin_task_yaml(task)),
        "task": task,
        "dataset_path": entry["format"],
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {split: [str(Path(data_dir).resolve() / f) for f in entry["files"]]}},
        # Only the local split exists: score it, and draw no few-shot examples from absent splits.
        "training_split": None,
        "validation_split": split,
        "test_split": None,
    }


def write_offline_overrides(task_names: Sequence[str], data_dir: str | Path, override_dir: str | Path) -> list[Path]:
    """Check every offline task's files, then write one override YAML per task into `override_dir`."""
    manifest = load_manifest(data_dir)
    local = set(project_task_names())
    configs = {
        task: override_config(task, offline_entry(data_dir, task, manifest), data_dir)
        for task in task_names
        if task not in local
    }
    override_dir = Path(override_dir)
    override_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for task, config in configs.items():
        path = override_dir / f"{task}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        paths.append(path)
    return paths


def build_task_manager(
    task_names: Sequence[str], data_dir: str | Path | None = None, override_dir: str | Path | None = None,
    include_path: Sequence[str | Path] = (),
) -> TaskManager:
    """A TaskManager that knows `task_names`: hub tasks online, local overrides when `data_dir` is given. It reads
    the project's tasks, the overrides it writes into `override_dir` (an empty folder of the caller's), and the
    caller's own `include_path` folders: no other task file.

    Raises (before any model compute) if a task is unknown or its offline data file is missing.
    """
    own = [str(PROJECT_TASKS_DIR), *(str(p) for p in include_path)]
    if data_dir is None:
        # Indexing lm-eval's thousands of built-in YAMLs takes seconds: skip it when only project tasks run.
        needs_builtins = bool(include_path) or not set(task_names) <= set(project_task_names())
        manager = TaskManager(include_path=own, include_defaults=needs_builtins)
    else:
        if override_dir is None:
            raise ValueError("override_dir is required with data_dir (the generated task YAMLs go there)")
        if Path(override_dir).is_dir() and any(Path(override_dir).iterdir()):
            raise ValueError(f"{override_dir} is not empty; offline task overrides go into a folder of their own")
        write_offline_overrides(task_names, data_dir, override_dir)
        manager = TaskManager(include_path=[*own, str(override_dir)], include_defaults=False)
    unknown = [t for t in task_names if t not in manager.all_tasks]
    if unknown:
        raise ValueError(f"unknown lm-eval task(s) {unknown}; task sets: {sorted(TASK_SETS)}")
    return manager
