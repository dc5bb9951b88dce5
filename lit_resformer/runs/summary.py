"""What a grid run's summary.json holds, and how its results are computed once, when the run ends.

summary.json fields: grid, cell, seed, status (running | done | failed | diverged | interrupted),
diverged_step, error (one line), error_tail (last lines of stderr), returncode, attempts, resumed,
steps, final_train_loss / best_train_loss (moving average over `train_loss_window` logged steps),
final_val_loss / best_val_loss, final_val_loss_by_domain / best_val_loss_by_domain, unigram_val_loss /
unigram_val_loss_by_domain (the plateau reference: the validation tokens' loss under the training split's
unigram, logged at step 0), bigram_val_loss / bigram_val_loss_by_domain (the evidence gate: the same tokens
under the training split's Kneser-Ney bigram), final_val_bpb / best_val_bpb, final_val_bpb_by_domain /
best_val_bpb_by_domain (bits per UTF-8 byte, `val/bpb`: comparable across tokenizers; overall the mean over domains,
as the loss), unigram_val_bpb / unigram_val_bpb_by_domain, bigram_val_bpb / bigram_val_bpb_by_domain (the
references in bits per byte), params, kv_cache_bytes_per_token, model_stats_source (checkpoint | config), tokens_per_sec (median over logged steps),
tokens_seen, epoch_tokens (the training tokens of one pass over the training split, read where the run went on
into a second: tokens_seen / epoch_tokens is how many times it saw its data; None for a run that stayed within its
first pass), wall_time_sec (all attempts), started_at, finished_at, host, pid, slurm_job_id, command,
provenance (lit_resformer.provenance: code version, library versions, device and precision), device_use (the
measured peak and the runs sharing a GPU that its MFU is stated with), references_added (when
the bigram reference was computed after the run by `add_references`, and how closely its unigram check matched).

The final and best losses are computed here and nowhere else: the report, the claims and the scaling fits read them
from the summary (lit_resformer.runs.results).
"""

from __future__ import annotations

import csv
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lit_resformer.runs.curves as M
from lit_resformer.runs.run_dir import FINISHED, RunDir, open_metrics

TRAIN_LOSS_WINDOW = 10


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def last_step(run: RunDir) -> int | None:
    loss = M.series(M.read_metrics(run), M.TRAIN_LOSS)
    return int(loss.index[-1]) if len(loss) else None


def results(run: RunDir) -> dict:
    """Loss, throughput and size figures from the run's metrics and config."""
    return {**metric_results(M.read_metrics(run)), "epoch_tokens": epoch_tokens(run), "corpus_hash": run.corpus_hash(),
            **model_stats(run.read_experiment() or {}, run.last_checkpoint)}


def epoch_tokens(run: RunDir) -> float | None:
    """The training tokens of one pass over the training split: tokens_seen at the last step Lightning logged in its
    first epoch, when the logs show a second one (None when they do not: the run never repeated its data). Exact
    when every step is logged; with log_every_n_steps k, up to k - 1 steps short, so that the epochs derived from
    it err towards more repetition, not less. Lightning's epoch column is read from the log files themselves:
    the metrics table (lit_resformer.runs.curves) leaves it out."""
    first_epoch, repeated = None, False
    for path in run.metric_files():
        with open_metrics(path) as f:
            for row in csv.DictReader(f):
                seen, epoch = row.get(M.TOKENS_SEEN), row.get("epoch")
                if not seen or not epoch:
                    continue
                if int(float(epoch)) == 0:
                    first_epoch = max(first_epoch or 0.0, float(seen))
                else:
                    repeated = True
    return first_epoch if repeated else None


# The fields of `metric_results`: a summary written without them (results that could not be read when the run
# ended) has them computed from its logged metrics when it is loaded (lit_resformer.runs.results). The bigram reference is
# not among them: runs summarised before it was logged have no bigram in their metrics either; nor, for the same
# reason, are the bits per byte (BPB_FIELDS).
METRIC_FIELDS = ("steps", "final_train_loss", "best_train_loss", "train_loss_window", "final_val_loss", "best_val_loss",
                 "final_val_loss_by_domain", "best_val_loss_by_domain", "unigram_val_loss", "unigram_val_loss_by_domain",
                 "tokens_per_sec", "tokens_seen")

# Bits per byte as the training module logs them (lit_resformer.training.module: `val/bpb`, `val/bpb/<domain>`, and
# `val/<reference>_bpb[/<domain>]` at step 0).
VAL_BPB = "val/bpb"
VAL_BPB_DOMAIN_PREFIX = "val/bpb/"
BPB_FIELDS = ("final_val_bpb", "best_val_bpb", "final_val_bpb_by_domain", "best_val_bpb_by_domain",
              "unigram_val_bpb", "unigram_val_bpb_by_domain", "bigram_val_bpb", "bigram_val_bpb_by_domain")


def metric_results(metrics) -> dict:
    """The summary's loss and throughput fields (METRIC_FIELDS) from a run's metrics table (lit_resformer.runs.curves)."""
    train = M.series(metrics, M.TRAIN_LOSS)
    out: dict[str, Any] = {"steps": int(train.index[-1]) if len(train) else None}
    smoothed = M.train_curve(metrics, TRAIN_LOSS_WINDOW)
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
    for name, overall, prefix in (("unigram", M.UNIGRAM_LOSS, M.UNIGRAM_DOMAIN_PREFIX),
                                  ("bigram", M.BIGRAM_LOSS, M.BIGRAM_DOMAIN_PREFIX)):
        reference = M.series(metrics, overall)
        out[f"{name}_val_loss"] = float(reference.iloc[-1]) if len(reference) else None
        out[f"{name}_val_loss_by_domain"] = {
            domain: float(values.iloc[-1])
            for domain in final_by_domain
            if len(values := M.series(metrics, prefix + domain))
        }
    out.update(bpb_results(metrics, list(final_by_domain)))
    throughput = M.series(metrics, M.TOKENS_PER_SEC)
    out["tokens_per_sec"] = float(throughput.median()) if len(throughput) else None
    seen = M.series(metrics, M.TOKENS_SEEN)
    out["tokens_seen"] = float(seen.iloc[-1]) if len(seen) else None
    return out


def bpb_results(metrics, domains: list[str]) -> dict:
    """The summary's bits-per-byte fields (BPB_FIELDS): final and best `val/bpb`, overall and per domain, and the
    references' (None and {} for a run that logged none: its tokenizer was not byte-level, or it predates them)."""
    out: dict[str, Any] = {}
    val = M.series(metrics, VAL_BPB)
    out["final_val_bpb"] = float(val.iloc[-1]) if len(val) else None
    out["best_val_bpb"] = float(val.min()) if len(val) else None
    final, best = {}, {}
    for domain in domains:
        values = M.series(metrics, VAL_BPB_DOMAIN_PREFIX + domain)
        if len(values):
            final[domain], best[domain] = float(values.iloc[-1]), float(values.min())
    out["final_val_bpb_by_domain"], out["best_val_bpb_by_domain"] = final, best
    for name in ("unigram", "bigram"):
        reference = M.series(metrics, f"val/{name}_bpb")
        out[f"{name}_val_bpb"] = float(reference.iloc[-1]) if len(reference) else None
        out[f"{name}_val_bpb_by_domain"] = {
            domain: float(values.iloc[-1]) for domain in domains if len(values := M.series(metrics, f"val/{name}_bpb/{domain}"))
        }
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


# nats: a rebuilt data module's unigram reference must equal the one a run logged this closely per domain, which shows
# that it validates on the same tokens under the same tokenizer
REFERENCE_MATCH = 1e-6


def add_references(run: RunDir) -> str:
    """Add the bigram reference (the evidence gate) to the summary of a finished run trained before it was logged.
    The run's data module is rebuilt from its experiment config (tokenizer and token caches found or rebuilt by
    content hash) and the reference is written only when the rebuilt validation tokens are the run's own: the
    unigram reference the run logged must come out again within REFERENCE_MATCH per domain. The embedded corpus
    takes its code half from the installed Python's standard library, so a run trained under another Python is
    refused, not guessed. Returns what happened, in words."""
    summary = run.read_summary() or {}
    if summary.get("status") not in FINISHED:
        return "skipped: not finished"
    if summary.get("bigram_val_loss") is not None:
        return "skipped: has a bigram reference"
    logged = summary.get("unigram_val_loss_by_domain") or {}
    data = (run.read_experiment() or {}).get("data")
    if not logged or data is None:
        return "skipped: no unigram reference or data config to check the rebuilt data against"
    from lit_resformer.data import LMDataModule

    module = LMDataModule(**data)
    module.prepare_data()
    module.setup("fit")
    unigram = module.unigram_val_losses()
    if set(unigram) != set(logged):
        return f"refused: the rebuilt data has domains {sorted(unigram)}, the run validated on {sorted(logged)}"
    off = max(abs(unigram[d] - logged[d]) for d in logged)
    if off > REFERENCE_MATCH:
        return (f"refused: the rebuilt validation tokens are not the run's (unigram reference off by {off:.2g} nats; "
                "another Python's standard library, or another corpus)")
    bigram = module.bigram_val_losses()
    summary["bigram_val_loss_by_domain"] = bigram
    summary["bigram_val_loss"] = sum(bigram.values()) / len(bigram)  # averaged over domains, as val/loss is
    summary["references_added"] = {"at": now(), "unigram_match": off}
    run.write_summary(summary)
    return f"bigram reference {summary['bigram_val_loss']:.4f} added (unigram reference matched within {off:.1g})"


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
