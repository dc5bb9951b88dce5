"""A run's checkpoints, in one place: loading one as (Transformer, tokenizer) here, without Lightning or the training
data (so that eval, analysis and export import no trainer), and writing them during training in
`lit_resformer.checkpoint.saving` (Lightning's ModelCheckpoint, tidied). Reading a checkpoint file safely is
`lit_resformer.run_dir.read_checkpoint`, beside the run directory whose checkpoints it ranks."""

from __future__ import annotations

from pathlib import Path

import torch

from ..model import ModelConfig, Transformer
from ..run_dir import CheckpointError, read_checkpoint


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu"):
    """The model in eval mode and its `tokenizers.Tokenizer`. Scoring, sampling data for analysis and export all
    need the run's own tokenizer, so a checkpoint without one is refused."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    ckpt = read_checkpoint(path)
    try:
        config = ModelConfig(**ckpt["hyper_parameters"]["config"])
        weights = ckpt["state_dict"]
    except KeyError as err:
        raise CheckpointError(path, f"not a lit-resformer checkpoint (no {err})") from None
    except TypeError:
        raise CheckpointError(path, "not a lit-resformer checkpoint (its contents are not a Lightning "
                                    "checkpoint's)") from None
    model = Transformer(config)
    prefix = "model._orig_mod." if any(k.startswith("model._orig_mod.") for k in weights) else "model."
    model.load_state_dict({k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)})
    # The data module's state (saved by Lightning under its class name) carries the tokenizer.
    tokenizer_json = next((v["tokenizer_json"] for v in ckpt.values() if isinstance(v, dict) and "tokenizer_json" in v),
                          None)
    if tokenizer_json is None:
        raise ValueError(f"{path} holds no tokenizer (a checkpoint of `lit-resformer fit` carries its run's)")
    from tokenizers import Tokenizer

    return model.to(device).eval(), Tokenizer.from_str(tokenizer_json)
