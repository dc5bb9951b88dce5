"""Committed runs as TensorBoard runs: `lit-resformer tensorboard PATH [--out DIR]`.

A results folder keeps each run's metrics as a (gzipped) CSV only, which TensorBoard cannot read. This writes one
TensorBoard run per finished run, in OUT/<grid>/<cell>/seed<k>, so that `tensorboard --logdir OUT` lists every grid,
cell and seed, with what TensorBoard shows of them and nothing more:

- the curves a grid is judged on and the model's own mixing, each under its tag against the training step (the CSV's
  `step`), as Lightning logged them: the training loss, every validation metric (per domain, with the unigram and
  bigram references) and the learned mixing weights (`mix/...`); the schedule (whose settings are hyperparameters,
  below), the gradient norm and the throughput and bookkeeping columns stay in the CSV;
- the loss curves again against training tokens, under `tokens/<tag>` (step = the tokens seen by that step, read from
  the run's own `train/tokens_seen`: lit_resformer.runs.run_dir.tokens_seen_by), since runs of different batch
  sizes or sequence lengths compare by tokens;
- at most POINTS_PER_TAG points of a curve, evenly spaced, its first and last kept: TensorBoard keeps no more of a
  scalar tag by default (it samples the rest away on loading), so more would cost disk and time and show nothing;
- the run's hyperparameters for the HParams dashboard: every `model.*` field of its resolved config (the variant's
  fields, the learning rate and schedule), its seed, sequence length, micro-batch, steps and data source, its grid and
  cell, and the tokens and parameters its summary records; the final `val/loss` and `train/loss` are its metrics.

The events are TensorBoard's own protocol buffers (and the HParams summaries PyTorch's `hparams`), written in its record
format in one pass: the records' CRC-32C, which TensorBoard's Python writer computes a byte at a time, is computed
here with its table for all records of a length at once (numpy), which makes the whole board a matter of a minute.

Writing is idempotent: each run's folder records the hash of the files it was written from (SOURCE_STAMP) and is
rewritten, never appended to, when they change; folders of runs no longer in the results are removed. The default
folder, PATH/tensorboard, is ignored by git (.gitignore), so reading committed results leaves the repository as it is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from lit_resformer.runs.directory import GridDir, grid_dirs
from lit_resformer.runs.run_dir import RunDir, tokens_seen_by

DEFAULT_OUT = "tensorboard"  # beside the results: PATH/tensorboard
SOURCE_STAMP = "source.json"  # in each TensorBoard run's folder: what it was written from
STAMP_VERSION = 2  # bumped when what is written for the same files changes
TOKEN_AXIS = "tokens/"  # the tag prefix of the curves drawn against training tokens
ON_TOKEN_AXIS = ("train/loss", "val/loss", "val/bpb")  # the tags (and their per-domain tags) drawn against tokens
SHOWN = ("train/loss", "val", "mix")  # the tags written, with those below them (val/loss/code, mix/...)
POINTS_PER_TAG = 1000  # TensorBoard's default reservoir for a scalar tag (`--samples_per_plugin scalars=1000`)
FINAL_METRICS = ("val/loss", "train/loss")  # the HParams dashboard's metric columns
EVENTS_FILE = "events.out.tfevents.0.lit-resformer"  # one per run; the name TensorBoard looks for, fixed: same input,
# same bytes
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
    config = flatten(run.read_config() or {})
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


def below(tag: str, names: Sequence[str]) -> bool:
    """Whether `tag` is one of `names` or a tag below one (val/loss/code is below val/loss and val)."""
    return any(tag == name or tag.startswith(name + "/") for name in names)


def thinned(points: list[tuple[int, float]], limit: int = POINTS_PER_TAG) -> list[tuple[int, float]]:
    """At most `limit` of the points, evenly spaced over them, the first and the last kept."""
    if len(points) <= limit:
        return points
    return [points[i] for i in np.linspace(0, len(points) - 1, limit).round().astype(int)]


# ----------------------------------------------------------------------------------------------
# TensorBoard's record format: per record, its length (uint64), the masked CRC-32C of those 8 bytes, the record, the
# masked CRC-32C of the record (all little-endian).


def masked_crc32c(records: Sequence[bytes]) -> np.ndarray:
    """TensorBoard's masked CRC-32C of each record (tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c),
    with its table, for all records of one length at once."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import CRC_TABLE

    table = np.array(CRC_TABLE, dtype=np.uint32)
    out = np.empty(len(records), dtype=np.uint32)
    by_length: dict[int, list[int]] = {}
    for index, record in enumerate(records):
        by_length.setdefault(len(record), []).append(index)
    for length, indices in by_length.items():
        data = np.frombuffer(b"".join(records[i] for i in indices), dtype=np.uint8).reshape(len(indices), length)
        crc = np.full(len(indices), 0xFFFFFFFF, dtype=np.uint32)
        for column in data.T:
            crc = table[(crc ^ column) & 0xFF] ^ (crc >> np.uint32(8))
        crc ^= np.uint32(0xFFFFFFFF)
        out[indices] = ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)
    return out


def write_records(path: Path, records: Sequence[bytes]) -> None:
    headers = [struct.pack("<Q", len(record)) for record in records]
    header_crcs, record_crcs = masked_crc32c(headers), masked_crc32c(records)
    with open(path, "wb") as f:
        f.write(b"".join(header + struct.pack("<I", header_crc) + record + struct.pack("<I", record_crc)
                         for header, header_crc, record, record_crc in zip(headers, header_crcs.tolist(), records,
                                                                           record_crcs.tolist(), strict=True)))


def run_events(grid: str, cell: str, run: RunDir) -> list[bytes]:
    """One run's events, serialized: the file's version, dated when the run finished, its curves (SHOWN, thinned, the
    loss curves also against tokens) and its hyperparameters. A point carries no time of its own (9 bytes of every
    20-odd): runs are compared by step and by tokens, and a results folder keeps no clock time per step."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from torch.utils.tensorboard.summary import hparams

    finished = (run.read_summary() or {}).get("finished_at")
    wall_time = datetime.fromisoformat(finished).timestamp() if finished else 0.0
    series = run.read_metrics()
    tokens = tokens_seen_by(series)
    events = [Event(wall_time=wall_time, file_version="brain.Event:2")]

    def scalars(tag: str, points: list[tuple[int, float]]) -> None:
        events.extend(Event(step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]))
                      for step, value in points)

    for tag, points in series.items():
        if not below(tag, SHOWN):
            continue
        points = thinned(points)
        scalars(tag, points)
        if tokens and below(tag, ON_TOKEN_AXIS):
            scalars(TOKEN_AXIS + tag, [(tokens(step), value) for step, value in points])
    experiment, start, end = hparams(run_hparams(grid, cell, run),
                                     {tag: series[tag][-1][1] for tag in FINAL_METRICS if series.get(tag)})
    events.extend(Event(summary=summary) for summary in (experiment, start, end))
    return [event.SerializeToString() for event in events]


def write_run(grid: str, cell: str, run: RunDir, folder: Path) -> None:
    """One run's events into `folder` (which must not exist yet)."""
    folder.mkdir(parents=True)
    write_records(folder / EVENTS_FILE, run_events(grid, cell, run))


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


def write_tensorboard(paths: Iterable[str | Path], out: str | Path | None = None,
                      progress: Callable[[str], None] = lambda line: None) -> tuple[Path, list[str]]:
    """Every finished run of the grids under `paths` (each a grid's run directory or a folder of them) as TensorBoard
    runs under OUT (default: PATH/tensorboard beside the first path); (OUT, a line per grid). `progress` is given a
    line as each grid is done: the runs converted so far of all, and the seconds since the start."""
    paths = [Path(p) for p in paths]
    grids = grid_dirs(paths)
    out = Path(out) if out is not None else paths[0] / DEFAULT_OUT
    total = sum(len(grid.finished_runs()) for grid in grids)
    done = 0
    start = time.monotonic()
    lines = []
    for number, grid in enumerate(grids, 1):
        written, kept = write_grid(grid, out)
        done += written + kept
        lines.append(f"{grid.name}: {written} run(s) written, {kept} up to date")
        progress(f"runs {done}/{total}, grid {number}/{len(grids)}, {time.monotonic() - start:.0f} s: {lines[-1]}")
    return out, lines
