"""The model: config dataclasses, the transformer with every variant, KV cache and decoding."""

from .cache import KVCache, kv_cache_bytes
from .config import (
    PRESETS,
    VARIANT_GROUPS,
    AttnGateConfig,
    DenseValueConfig,
    DWAConfig,
    ModelConfig,
    ResidualConfig,
    SATFormerConfig,
    ShareConfig,
    ValueEmbedConfig,
    XSAConfig,
)
from .transformer import Trace, Transformer, causal_lm_loss

__all__ = [
    "PRESETS", "VARIANT_GROUPS", "AttnGateConfig", "DWAConfig", "DenseValueConfig", "KVCache", "ModelConfig",
    "ResidualConfig", "SATFormerConfig", "ShareConfig", "Trace", "Transformer", "ValueEmbedConfig", "XSAConfig",
    "causal_lm_loss", "kv_cache_bytes",
]
