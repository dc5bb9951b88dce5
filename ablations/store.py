"""The run store: one directory per grid/cell/seed.

    RUNS/<grid>/grid.yaml                  the expanded grid (what the report reads)
    RUNS/<grid>/<cell>/seed<k>/
        experiment.yaml                    resolved experiment config, written before the run
        summary.json                       status and results (schema below), rewritten atomically
        logs/stdout.log, logs/stderr.log   the training process's output, appended per attempt
        config.yaml, csv/, tb/, checkpoints/   written by `lit-resformer fit` itself

summary.json fields: grid, cell, seed, status (running | done | failed | diverged | interrupted),
diverged_step, error (one line), error_tail (last lines of stderr), returncode, attempts, resumed,
steps, final_train_loss / best_train_loss (moving average over `train_loss_window` logged steps),
final_val_loss / best_val_loss, final_val_loss_by_domain / best_val_loss_by_domain, unigram_val_loss /
unigram_val_loss_by_domain (the plateau reference: the validation tokens' loss under the training split's
unigram, logged at step 0), params,
kv_cache_bytes_per_token, model_stats_source (checkpoint | config), tokens_per_sec (median over logged steps), tokens_seen, wall_time_sec
(all attempts), started_at, finished_at, host, pid, slurm_job_id, command.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import socket
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from . import metrics as M

STATUSES = ("running", "done", "failed", "diverged", "interrupted")
FINISHED = ("done", "diverged")  # a rerun of the grid skips these; failed and interrupted runs are retried
TRAIN_LOSS_WINDOW = 10
DIVERGED = re.compile(r"diverged: non-finite loss at step (\d+)")
TRAINER_OUTPUTS = ("config.yaml", "checkpoints", "csv", "tb")  # what `lit-resformer fit` writes into a run


class RunConflict(RuntimeError):
    """A run directory holds a run made with a different config."""


class RunBusy(RuntimeError):
    """Another process is working in this run directory."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same directory, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def config_differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two configs, e.g. ['trainer.max_steps: 300 -> 200']."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            out += config_differences(old.get(key, "<missing>"), new.get(key, "<missing>"), f"{prefix}{key}.")
        return out
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.experiment = self.path / "experiment.yaml"
        self.summary_path = self.path / "summary.json"
        self.logs = self.path / "logs"
        self.stdout = self.logs / "stdout.log"
        self.stderr = self.logs / "stderr.log"
        self.last_ckpt = self.path / "checkpoints" / "last.ckpt"
        self.lock_path = self.path / ".lock"

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ------------------------------------------------------------------ config
    def read_config(self) -> dict | None:
        if not self.experiment.is_file():
            return None
        return yaml.safe_load(self.experiment.read_text())

    def check_config(self, config: dict, run_name: str) -> None:
        """Refuse to reuse a directory whose run was made with another config."""
        existing = self.read_config()
        if existing is not None and existing != config:
            diff = config_differences(existing, config)
            shown = "; ".join(diff[:5]) + (f"; ... ({len(diff)} differences)" if len(diff) > 5 else "")
            raise RunConflict(
                f"run {run_name} in {self.path} was made with a different config ({shown}); "
                f"delete that directory or use another --runs-dir"
            )

    def write_config(self, config: dict, run_name: str) -> None:
        self.check_config(config, run_name)
        if not self.experiment.is_file():
            atomic_write_text(self.experiment, yaml.safe_dump(config, sort_keys=False))

    # ------------------------------------------------------------------ summary
    def read_summary(self) -> dict | None:
        if not self.summary_path.is_file():
            return None
        return json.loads(self.summary_path.read_text())

    def write_summary(self, summary: dict) -> None:
        atomic_write_json(self.summary_path, _json_safe(summary))

    @property
    def status(self) -> str | None:
        summary = self.read_summary()
        return summary["status"] if summary else None

    def resumable(self) -> bool:
        return self.last_ckpt.is_file()

    def has_training_output(self) -> bool:
        """Whether a training process already wrote here; `fit` then needs --ckpt_path last (which
        starts from scratch, in a new csv/version_N, when no checkpoint was saved yet)."""
        return any((self.path / name).exists() for name in TRAINER_OUTPUTS)

    def last_step(self) -> int | None:
        loss = M.series(M.read_metrics(self.path), M.TRAIN_LOSS)
        return int(loss.index[-1]) if len(loss) else None

    # ------------------------------------------------------------------ exclusive use
    @contextlib.contextmanager
    def lock(self):
        """Hold an exclusive flock on the run for as long as this block (and any process that
        inherits the yielded file descriptor) runs. Raises RunBusy if someone else holds it."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise RunBusy(f"{self.path} is in use by another process (lock {self.lock_path})") from e
            os.ftruncate(fd, 0)
            os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
            yield fd
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ metrics -> summary
    def results(self) -> dict:
        """Loss, throughput and size figures from the run's metrics and config."""
        metrics = M.read_metrics(self.path)
        train = M.series(metrics, M.TRAIN_LOSS)
        out: dict[str, Any] = {"steps": int(train.index[-1]) if len(train) else None}
        train = train[train.map(math.isfinite)]
        smoothed = M.smooth(train, TRAIN_LOSS_WINDOW)
        out["final_train_loss"] = float(smoothed.iloc[-1]) if len(smoothed) else None
        out["best_train_loss"] = float(smoothed.min()) if len(smoothed) else None
        out["train_loss_window"] = TRAIN_LOSS_WINDOW
        val = M.series(metrics, M.VAL_LOSS)
        out["final_val_loss"] = float(val.iloc[-1]) if len(val) else None
        out["best_val_loss"] = float(val.min()) if len(val) else None
        final_by_domain, best_by_domain = {}, {}
        for domain in M.domains(metrics):
            values = M.series(metrics, M.VAL_DOMAIN_PREFIX + domain)
            if len(values):
                final_by_domain[domain] = float(values.iloc[-1])
                best_by_domain[domain] = float(values.min())
        out["final_val_loss_by_domain"] = final_by_domain
        out["best_val_loss_by_domain"] = best_by_domain
        unigram = M.series(metrics, M.UNIGRAM_LOSS)
        out["unigram_val_loss"] = float(unigram.iloc[-1]) if len(unigram) else None
        out["unigram_val_loss_by_domain"] = {
            domain: float(values.iloc[-1])
            for domain in final_by_domain
            if len(values := M.series(metrics, M.UNIGRAM_DOMAIN_PREFIX + domain))
        }
        throughput = M.series(metrics, M.TOKENS_PER_SEC)
        out["tokens_per_sec"] = float(throughput.median()) if len(throughput) else None
        seen = M.series(metrics, M.TOKENS_SEEN)
        out["tokens_seen"] = float(seen.iloc[-1]) if len(seen) else None
        out.update(model_stats(self.read_config() or {}, self.last_ckpt))
        return out


def model_stats(config: dict, checkpoint: Path | None = None) -> dict:
    """Parameter count and KV-cache bytes per token of the run's model. The model config comes from
    the checkpoint when there is one (its vocab_size is the tokenizer's, linked at run time), else
    from the experiment config. The model is built on the meta device, so this costs no memory; the
    KV cache is counted in the dtype the run trains in (2 bytes under 16-bit precision, else 4)."""
    import torch

    from lit_resformer.model import ModelConfig, Transformer, kv_cache_bytes

    model_cfg, source = (config.get("model") or {}).get("config"), "config"
    if checkpoint is not None and checkpoint.is_file():
        try:
            hparams = torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=True).get("hyper_parameters", {})
            model_cfg, source = hparams["config"], "checkpoint"
        except Exception:  # unreadable or foreign checkpoint: the experiment config is the next best source
            pass
    if model_cfg is None:
        return {"params": None, "kv_cache_bytes_per_token": None, "model_stats_source": None}
    cfg = ModelConfig(**model_cfg)
    with torch.device("meta"):
        params = Transformer(cfg).num_params()
    precision = str((config.get("trainer") or {}).get("precision", "32-true"))
    dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float16 if precision.startswith("16") else torch.float32
    kv = kv_cache_bytes(cfg, batch=1, seq=1, dtype=dtype)
    return {"params": params, "kv_cache_bytes_per_token": kv, "model_stats_source": source}


def diverged_step(log_text: str) -> int | None:
    match = DIVERGED.search(log_text)
    return int(match.group(1)) if match else None


def error_lines(log_text: str, tail: int = 40) -> tuple[str | None, str | None]:
    """(one-line error, last lines) from a failed attempt's stderr. Progress bars redraw lines
    with carriage returns; only the last state of each line is kept."""
    lines = [line.rsplit("\r", 1)[-1].rstrip() for line in log_text.splitlines()]
    lines = [line for line in lines if line.strip()]
    if not lines:
        return None, None
    # The exception line of a traceback is the last line that starts at column 0 after the traceback.
    error = next((line for line in reversed(lines) if not line.startswith((" ", "\t"))), lines[-1])
    return error.strip(), "\n".join(lines[-tail:])


def _json_safe(value: Any) -> Any:
    """NaN/inf are not JSON; a diverged run's losses become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value
