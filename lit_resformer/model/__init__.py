"""The model: config dataclasses, the transformer with every variant, KV cache and decoding.

Each name is imported from its module on first use: `lit_resformer.model.config` (plain Python) must stay cheap to
import, since a command checks a config with it before torch is imported (lit_resformer.config.quick_check)."""

import importlib

_MODULES = {
    "cache": ("KVCache", "kv_cache_bytes"),
    "config": ("PRESETS", "VARIANT_GROUPS", "AttnGateConfig", "DenseValueConfig", "DWAConfig", "ModelConfig",
               "ResidualConfig", "SATFormerConfig", "ShareConfig", "ValueEmbedConfig", "XSAConfig"),
    "transformer": ("Trace", "Transformer", "causal_lm_loss"),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
