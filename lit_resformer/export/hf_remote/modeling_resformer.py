"""ResFormer, SVFormer and their relatives as a Hugging Face causal LM (loaded with `trust_remote_code=True`).

The model is the training code's own `Transformer`: `transformer.py` and the modules it imports travel beside this
file, copied from lit_resformer/model/, and import only torch. This file fits it to transformers: the
`PreTrainedModel` wrapper (weights are the training code's, under `model.`) and `ResFormerCache`, which hands
generate() the model's own KV cache. That cache holds only what each layer produces: SVFormer keeps K for every
layer and V once (per anchor), CLA one K/V per group, SkipV1Former's layers n >= 2 the half of their value heads
they compute.

Written against the Cache API of transformers 5, and tested with 5.23 and 5.24, which renamed the cache argument
and output field from `past_key_values` to `cache`.
"""

from __future__ import annotations

import dataclasses

import torch
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .cache import KVCache
from .configuration_resformer import ResFormerConfig
from .transformer import Rotary, Transformer, causal_lm_loss

# transformers 5.24 renamed the cache that generate() passes to forward, reads back from its output and reorders
# in beam search from `past_key_values` to `cache` (the old name is deprecated: it still works, with warnings, until
# it is removed). forward takes either name; the model returns and prepares its cache under the installed release's
# own name, which the fields of the output class tell.
CACHE_NAME = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"


class ResFormerCache(Cache):
    """transformers' handle on the model's `KVCache`, which is allocated by the first forward pass (it knows the
    batch, device and dtype) for `max_length` positions (generate() knows its total) or for what that pass needs,
    and grows when a later pass needs more."""

    def __init__(self, config: ResFormerConfig, max_length: int | None = None):
        super().__init__(layers=[])  # the layers' buffers are the KVCache's
        self.model_config, self.max_length = config.model_config(), max_length
        self.kv: KVCache | None = None

    def ready(self, batch: int, new_tokens: int, like: torch.Tensor) -> KVCache:
        """The KV cache with room for `new_tokens` more positions, on `like`'s device and of its dtype."""
        needed = self.get_seq_length() + new_tokens
        longest = self.model_config.max_seq_len
        if self.kv is None:
            length = max(needed, min(self.max_length or 0, longest))
            self.kv = KVCache(self.model_config, batch, length, device=like.device, dtype=like.dtype)
        elif needed > self.kv.max_seq:  # doubling keeps the copying of a token-by-token loop linear
            self.kv.reserve(min(max(needed, 2 * self.kv.max_seq), longest))
        return self.kv

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0 if self.kv is None else self.kv.pos

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1  # it grows

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.kv is not None:
            self.kv.reindex(beam_idx)

    def crop(self, length: int) -> None:
        """Forget cached positions (assisted decoding rejects drafted tokens so): transformers 5.24 passes minus how
        many, earlier releases how many to keep or, negative, minus how many."""
        if self.kv is not None:
            self.kv.pos = self.kv.pos + length if length <= 0 else min(length, self.kv.pos)


class ResFormerForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = ResFormerConfig
    base_model_prefix = "model"
    _no_split_modules = ["Block"]

    def __init__(self, config: ResFormerConfig):
        super().__init__(config)
        self.model = Transformer(config.model_config())
        self.post_init()

    def _init_weights(self, module: torch.nn.Module) -> None:
        """The model initialises its weights where it is built. What transformers' loader, which builds the model on
        the meta device, leaves empty besides the weights it loads are RoPE's tables: computed, never saved."""
        if isinstance(module, Rotary):
            module.fill_tables()

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.model.tok_emb

    def set_input_embeddings(self, value: torch.nn.Embedding) -> None:
        self.model.tok_emb = value

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.model.lm_head

    def set_output_embeddings(self, value: torch.nn.Linear) -> None:
        self.model.lm_head = value

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        # generate() would build a DynamicCache with K and V for every layer; this model keeps only what each
        # layer produces. Other cache implementations are left to transformers (and refused by forward).
        # This hook is internal to transformers, yet no public API lets a model choose the cache generate() builds;
        # its signature is the same in 5.23 and 5.24 (the export tests generate through it under both).
        wants_default = generation_config.use_cache is not False and generation_config.cache_implementation in (
            None, "dynamic")
        if wants_default and model_kwargs.get(CACHE_NAME) is None:
            # generate() feeds every token but the last it produces: max_length - 1 positions.
            model_kwargs[CACHE_NAME] = ResFormerCache(self.config, generation_config.max_length - 1)
            return
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)

    def forward(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None,
                cache: ResFormerCache | None = None, use_cache: bool | None = None,
                labels: torch.LongTensor | None = None, past_key_values: ResFormerCache | None = None,
                **kwargs) -> CausalLMOutputWithPast:
        """input_ids [B, T] (the tokens after the cached ones) -> logits [B, T, vocab].

        attention_mask [B, cached + T] marks real tokens with 1 (left padding for batched generation). The cache is
        taken as `cache` or, as transformers called it before 5.24, `past_key_values`, and returned in the output
        field of the installed transformers' name.
        """
        if past_key_values is not None:
            if cache is not None:
                raise ValueError("pass the cache as `cache` or as `past_key_values` (its name before transformers "
                                 "5.24), not both")
            cache = past_key_values
        if kwargs.get("position_ids") is not None:
            raise ValueError("position_ids are not taken: pass attention_mask for left padding (RoPE sees only the "
                             "distances between positions, which padding does not change)")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if cache is None and use_cache:
            cache = ResFormerCache(self.config)
        if cache is not None and not isinstance(cache, ResFormerCache):
            raise TypeError(f"the cache is a {type(cache).__name__}; this model keeps only the K/V each layer "
                            f"produces: pass ResFormerCache(model.config) or None")
        kv = None if cache is None else cache.ready(*input_ids.shape, like=self.model.lm_head.weight)
        padding = None if attention_mask is None or bool(attention_mask.all()) else attention_mask
        logits = self.model(input_ids, cache=kv, padding=padding)
        loss = None if labels is None else causal_lm_loss(logits[:, :-1], labels[:, 1:])
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_NAME: cache if use_cache else None})
