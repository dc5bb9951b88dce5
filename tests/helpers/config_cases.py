"""Configs that `fit` (and a grid cell alike) refuses and accepts: dotted overrides of the tiny experiment, merged in
as a grid cell merges them."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import OmegaConf

from tests.helpers.experiments import tiny_experiment

# Each: dotted overrides of the tiny experiment (2 layers, max_seq_len 64, seq_len 16, micro-batch 4, local corpus).
REFUSED = {
    "seq_len above max_seq_len": {"data.seq_len": 128},
    "global batch not dividing": {"global_batch_tokens": 100},
    "no data.path for a local source": {"data.path": None},
    "data.path that does not exist": {"data.path": "/no/such/corpus"},
    "micro_batch_size 0": {"data.micro_batch_size": 0},
    "negative lr": {"model.lr": -1.0},
    "unknown variant value": {"model.config.residual.target": "w"},
    "variants that do not compose": {"model.config.share.svformer": True},  # the base has residual.target v
    "wrong type": {"trainer.max_steps": "many"},
}
ACCEPTED = {
    "the base itself": {},
    "no gradient clipping": {"trainer.gradient_clip_val": None},
    "SVFormer": {"model.config.residual.target": "none", "model.config.share.svformer": True},
    "global batch of two micro-batches": {"global_batch_tokens": 128},
    "learnable mixing": {"model.config.residual.learnable": "scalar"},
}


def cell_config(tmp_path: Path, corpus: Path, cache: Path, overrides: dict) -> dict:
    """The tiny experiment with the overrides merged in as a grid cell merges them."""
    base = yaml.safe_load(tiny_experiment(tmp_path / "base.yaml", corpus, cache, trainer={"max_steps": 2}).read_text())
    config = OmegaConf.create(base)
    for key, value in overrides.items():
        OmegaConf.update(config, key, value, merge=True)
    return OmegaConf.to_container(config)
