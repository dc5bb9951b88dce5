"""The checks a config must pass beyond its fields' types: those that need no torch (lit_resformer.config.field_checks:
ranges, across fields), against a checkpoint it resumes or uses, and the data and training modules' own argument
checks."""

from __future__ import annotations

from pathlib import Path

import torch
from jsonargparse import Namespace
from tokenizers import Tokenizer

from lit_resformer.config import field_checks
from lit_resformer.config.diff import config_differences
from lit_resformer.config.field_checks import model_config
from lit_resformer.data import LMDataModule
from lit_resformer.data.tokenizer import load_tokenizer, parse_tokenizer_spec, tokenizer_fingerprint
from lit_resformer.model import ModelConfig
from lit_resformer.runs.checkpoint_reading import read_checkpoint
from lit_resformer.training.module import LitResFormer


def check_experiment(cfg: Namespace) -> None:
    """The checks of lit_resformer.config.field_checks (ranges, the model config, the fields against each other),
    knowing this machine's GPUs; derives trainer.accumulate_grad_batches from global_batch_tokens."""
    field_checks.check_experiment(cfg, gpus=torch.cuda.device_count())


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
