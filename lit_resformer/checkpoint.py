"""Lightning checkpoint -> (Transformer, tokenizer), without Lightning or the training data."""

from __future__ import annotations

from pathlib import Path

import torch

from .model import ModelConfig, Transformer


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu"):
    """The model in eval mode and its `tokenizers.Tokenizer` (None if the checkpoint holds none)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    try:
        config = ModelConfig(**ckpt["hyper_parameters"]["config"])
        weights = ckpt["state_dict"]
    except KeyError as err:
        raise ValueError(f"{path} is not a lit-resformer checkpoint (no {err})") from None
    model = Transformer(config)
    prefix = "model._orig_mod." if any(k.startswith("model._orig_mod.") for k in weights) else "model."
    model.load_state_dict({k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)})
    # The data module's state (saved by Lightning under its class name) carries the tokenizer.
    tokenizer_json = next((v["tokenizer_json"] for v in ckpt.values() if isinstance(v, dict) and "tokenizer_json" in v),
                          None)
    tokenizer = None
    if tokenizer_json is not None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_str(tokenizer_json)
    return model.to(device).eval(), tokenizer
