"""The model: config dataclasses, the transformer with every variant, KV cache and decoding."""

from .cache import KVCache, kv_cache_bytes
from .config import PRESETS, DWAConfig, ModelConfig, ResidualConfig, ShareConfig, ValueEmbedConfig
from .transformer import Trace, Transformer, causal_lm_loss

__all__ = [
    "PRESETS", "DWAConfig", "KVCache", "ModelConfig", "ResidualConfig", "ShareConfig", "Trace", "Transformer",
    "ValueEmbedConfig", "causal_lm_loss", "kv_cache_bytes",
]
