"""A complete experiment YAML for a very small model on the tiny two-domain test corpus."""

from __future__ import annotations

from pathlib import Path

import yaml


def tiny_experiment(path: Path, corpus: Path, cache: Path, **sections) -> Path:
    """Write the experiment to `path`; each keyword replaces or updates one top-level section."""
    config = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": 1, "max_steps": 10, "val_check_interval": 5,
                    "check_val_every_n_epoch": None, "num_sanity_val_steps": 0, "gradient_clip_val": 1.0,
                    "enable_progress_bar": False, "enable_model_summary": False},
        "checkpoint": {"every_n_train_steps": 2},
        "model": {"config": {"n_layer": 2, "n_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64,
                             "residual": {"target": "v"}},
                  "lr": 3e-3, "warmup_steps": 3},
        "data": {"source": "local", "path": str(corpus), "bpe_vocab_size": 300, "seq_len": 16,
                 "micro_batch_size": 4, "holdout_fraction": 0.05, "cache_dir": str(cache)},
    }
    for section, values in sections.items():
        if isinstance(values, dict) and isinstance(config.get(section), dict):
            config[section] = {**config[section], **values}
        else:
            config[section] = values
    path.write_text(yaml.safe_dump(config))
    return path
