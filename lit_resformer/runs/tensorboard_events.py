"""Committed runs as TensorBoard runs: `lit-resformer tensorboard PATH [--out DIR]`.

A results folder keeps each run's metrics as a (gzipped) CSV only, which TensorBoard cannot read. This writes, with
TensorBoard's own event writer (through `torch.utils.tensorboard.SummaryWriter`), one TensorBoard run per finished run,
in OUT/<grid>/<cell>/seed<k>, so that `tensorboard --logdir OUT` lists every grid, cell and seed:

- every logged metric under its own tag against the training step (the CSV's `step`), as Lightning logged it;
- the loss curves again against training tokens, under `tokens/<tag>` (step = the tokens seen by that step, read from
  the run's own `train/tokens_seen`: lit_resformer.runs.run_dir.tokens_seen_by), since runs of different batch
  sizes or sequence lengths compare by tokens;
- the run's hyperparameters for the HParams dashboard: every `model.*` field of its resolved config (the variant's
  fields, the learning rate and schedule), its seed, sequence length, micro-batch, steps and data source, its grid and
  cell, and the tokens and parameters its summary records; the final `val/loss` and `train/loss` are its metrics.

Writing is idempotent: each run's folder records the hash of the files it was written from (SOURCE_STAMP) and is
rewritten, never appended to, when they change; folders of runs no longer in the results are removed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from lit_resformer.runs.directory import GridDir, grid_dirs
from lit_resformer.runs.run_dir import RunDir, tokens_seen_by

DEFAULT_OUT = "tensorboard"  # beside the results: PATH/tensorboard
SOURCE_STAMP = "source.json"  # in each TensorBoard run's folder: what it was written from
STAMP_VERSION = 1  # bumped when what is written for the same files changes
TOKEN_AXIS = "tokens/"  # the tag prefix of the curves drawn against training tokens
ON_TOKEN_AXIS = ("train/loss", "val/loss", "val/bpb")  # the tags (and their per-domain tags) drawn against tokens
FINAL_METRICS = ("val/loss", "train/loss")  # the HParams dashboard's metric columns
# resolved-config fields beside model.* that tell runs apart
RUN_FIELDS = ("seed_everything", "global_batch_tokens", "trainer.max_steps", "trainer.precision", "data.source",
              "data.seq_len", "data.micro_batch_size", "data.tokenizer", "data.bpe_vocab_size")


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def hparam_value(value: Any) -> bool | int | float | str:
    """A config value as the HParams dashboard takes it (bool, number or text)."""
    if isinstance(value, bool | int | float | str):
        return value
    return "none" if value is None else json.dumps(value)


def run_hparams(grid: str, cell: str, run: RunDir) -> dict[str, bool | int | float | str]:
    """The hyperparameters shown for one run: its grid, cell and seed, its resolved config's model.* and RUN_FIELDS,
    and the tokens and parameters its summary records."""
    config = flatten(yaml.safe_load(run.config_file.read_text()) or {}) if run.config_file.is_file() else {}
    summary = run.read_summary() or {}
    chosen = {key: value for key, value in config.items() if key.startswith("model.") or key in RUN_FIELDS}
    chosen |= {"grid": grid, "cell": cell, "seed": summary.get("seed"), "tokens": summary.get("tokens_seen"),
               "params": summary.get("params")}
    return {key: hparam_value(value) for key, value in chosen.items()}


def source_hash(run: RunDir) -> str:
    """What a run's TensorBoard folder is written from: its metrics files, resolved config and summary."""
    digest = hashlib.sha256(f"version {STAMP_VERSION}".encode())
    for path in [*run.metric_files(), run.config_file, run.summary_file]:
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def on_token_axis(tag: str) -> bool:
    return any(tag == name or tag.startswith(name + "/") for name in ON_TOKEN_AXIS)


def write_run(grid: str, cell: str, run: RunDir, folder: Path) -> None:
    """One run's events into `folder` (which must not exist yet)."""
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    series = run.read_metrics()
    tokens = tokens_seen_by(series)
    with SummaryWriter(log_dir=str(folder)) as writer:
        for tag, points in series.items():
            for step, value in points:
                writer.add_scalar(tag, value, step)
            if on_token_axis(tag) and tokens:
                for step, value in points:
                    writer.add_scalar(TOKEN_AXIS + tag, value, tokens(step))
        experiment, start, end = hparams(run_hparams(grid, cell, run),
                                          {tag: series[tag][-1][1] for tag in FINAL_METRICS if series.get(tag)})
        for summary in (experiment, start, end):
            writer.file_writer.add_summary(summary)


def write_grid(grid: GridDir, out: Path) -> tuple[int, int]:
    """The grid's finished runs into OUT/<grid>/<cell>/seed<k>; (runs written, runs already up to date)."""
    name = grid.name
    wanted: set[Path] = set()
    written = kept = 0
    for cell, seed, run in grid.finished_runs():
        folder = out / name / cell / f"seed{seed}"
        wanted.add(folder)
        stamp = {"version": STAMP_VERSION, "source": source_hash(run)}
        if (folder / SOURCE_STAMP).is_file() and json.loads((folder / SOURCE_STAMP).read_text()) == stamp:
            kept += 1
            continue
        folder.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}.") as tmp:
            fresh = Path(tmp) / folder.name
            write_run(name, cell, run, fresh)
            (fresh / SOURCE_STAMP).write_text(json.dumps(stamp) + "\n")
            if folder.exists():
                shutil.rmtree(folder)
            fresh.rename(folder)
        written += 1
    for stale in sorted((out / name).glob("*/seed*")) if (out / name).is_dir() else []:
        if stale not in wanted:
            shutil.rmtree(stale)
    return written, kept


def write_tensorboard(paths: Iterable[str | Path], out: str | Path | None = None) -> tuple[Path, list[str]]:
    """Every finished run of the grids under `paths` (each a grid's run directory or a folder of them) as TensorBoard
    runs under OUT (default: PATH/tensorboard beside the first path); (OUT, a line per grid)."""
    paths = [Path(p) for p in paths]
    grids = grid_dirs(paths)
    out = Path(out) if out is not None else paths[0] / DEFAULT_OUT
    lines = []
    for grid in grids:
        written, kept = write_grid(grid, out)
        lines.append(f"{grid.name}: {written} run(s) written, {kept} up to date")
    return out, lines
