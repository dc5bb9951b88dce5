"""The checks a config must pass beyond its fields' types: across fields (sequence length, batch divisibility),
against a checkpoint it resumes or uses, and the data and training modules' own argument checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace
from tokenizers import Tokenizer

from lit_resformer.config.diff import config_differences
from lit_resformer.data import LMDataModule
from lit_resformer.data.tokenizer import load_tokenizer, parse_tokenizer_spec, tokenizer_fingerprint
from lit_resformer.model import ModelConfig
from lit_resformer.runs.checkpoint_reading import read_checkpoint
from lit_resformer.training.module import LitResFormer


def world_size(trainer: dict[str, Any]) -> int:
    devices, nodes = trainer.get("devices", "auto"), int(trainer.get("num_nodes") or 1)
    if isinstance(devices, (list, tuple)):
        per_node = len(devices)
    elif str(devices).lstrip("-").isdigit() and int(devices) > 0:
        per_node = int(devices)
    else:  # "auto" or -1: every visible GPU, else one CPU process
        accelerator = trainer.get("accelerator", "auto")
        gpus = torch.cuda.device_count() if accelerator in ("auto", "gpu", "cuda") else 0
        per_node = gpus or 1
    return per_node * nodes


def model_config(cfg: Namespace) -> ModelConfig:
    """The run's ModelConfig from a parsed config. vocab_size is linked from the tokenizer when the classes are
    built, so before that any value stands in for it."""
    fields = cfg.model.config
    fields = fields.as_dict() if hasattr(fields, "as_dict") else dict(vars(fields))
    try:
        return ModelConfig(**{**fields, "vocab_size": fields.get("vocab_size") or 1})
    except ValueError as err:
        raise ValueError(f"invalid model config (model.config): {err}") from None


def check_experiment(cfg: Namespace) -> None:
    """Checks across fields that the parser cannot express; derives trainer.accumulate_grad_batches from
    global_batch_tokens."""
    preview = model_config(cfg)
    seq_len = cfg.data.seq_len
    if seq_len > preview.max_seq_len:
        raise ValueError(f"data.seq_len={seq_len} exceeds model.config.max_seq_len={preview.max_seq_len}; "
                         f"lower data.seq_len or raise model.config.max_seq_len")
    tokens = cfg.global_batch_tokens
    if tokens is not None:
        per_step = cfg.data.micro_batch_size * seq_len * world_size(dict(vars(cfg.trainer)))
        if tokens % per_step:
            raise ValueError(f"global_batch_tokens={tokens} is not divisible by data.micro_batch_size x "
                             f"data.seq_len x devices = {per_step}")
        cfg.trainer.accumulate_grad_batches = tokens // per_step
    decay_start, max_steps = cfg.model.get("decay_start"), cfg.trainer.max_steps
    if decay_start is not None and max_steps is not None and max_steps > 0 and decay_start >= max_steps:
        raise ValueError(f"model.decay_start={decay_start} is not before trainer.max_steps={max_steps}: the decay "
                         f"would never run; leave it null to hold the peak to the end")


# Data settings a run may change when it resumes: they decide how fast or where data is read and how much of the
# validation split is scored, not which token stream it trains on.
RESUMABLE_DATA_FIELDS = ("num_workers", "cache_dir", "val_sequences_per_domain")


def check_checkpoint_matches(cfg: Namespace, ckpt_path: str | Path, resuming: bool) -> None:
    """Refuse a checkpoint made with another model, tokenizer or (when `resuming` training) another token stream
    than `cfg` describes, naming every differing field; nothing is built or read but the checkpoint's index."""
    ckpt = read_checkpoint(ckpt_path, mmap=True)
    saved_model = (ckpt.get("hyper_parameters") or {}).get("config")
    differences = []
    if isinstance(saved_model, dict):
        ignore = {"vocab_size"}  # linked from the tokenizer, compared through it below
        saved = {k: v for k, v in ModelConfig(**saved_model).to_dict().items() if k not in ignore}
        wanted = {k: v for k, v in model_config(cfg).to_dict().items() if k not in ignore}
        differences += config_differences(saved, wanted, "model.config.")
    saved_data = ckpt.get("datamodule_hyper_parameters")
    if resuming and isinstance(saved_data, dict):
        wanted = cfg.data.as_dict()
        stream = [k for k in saved_data if k in wanted and k not in RESUMABLE_DATA_FIELDS]
        differences += config_differences({k: saved_data[k] for k in stream}, {k: wanted[k] for k in stream}, "data.")
    saved_tokenizer = next((v["tokenizer_json"] for v in ckpt.values() if isinstance(v, dict) and "tokenizer_json" in v),
                           None)
    kind, value = parse_tokenizer_spec(cfg.data.tokenizer)
    if saved_tokenizer is not None and kind == "file":  # a hub or trained tokenizer is compared when data is set up
        saved_hash = tokenizer_fingerprint(Tokenizer.from_str(saved_tokenizer))
        file_hash = tokenizer_fingerprint(load_tokenizer(kind, value))
        if saved_hash != file_hash:
            differences.append(f"tokenizer hash: {saved_hash} -> {file_hash} ({value})")
    if differences:
        action = "resume from" if resuming else "use"
        raise ValueError(f"cannot {action} {ckpt_path}: it was made with another config ({'; '.join(differences)}); "
                         f"use the checkpoint's settings, or train a new run in another --trainer.default_root_dir")


def check_classes(cfg: Namespace) -> None:
    """The data module's and the training module's own argument checks, without data: the data module reads no
    corpus in its constructor, and the model is built on the meta device (no memory)."""
    LMDataModule(**cfg.data.as_dict())
    with torch.device("meta"):
        LitResFormer(**{**cfg.model.as_dict(), "config": model_config(cfg).to_dict()})
