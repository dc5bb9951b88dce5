"""Vanilla lit-resformer <-> `transformers.LlamaForCausalLM` (same maths, weights copied one to one).

Only the vanilla model maps onto Llama: every variant changes the computation, so `to_hf_llama` refuses
a config that is not vanilla and names the fields that make it so.
"""

from __future__ import annotations

import dataclasses

import torch

from .config import VARIANT_GROUPS, ModelConfig
from .transformer import Transformer

# lit-resformer name -> Llama name, per layer (`{i}`) and global.
_LAYER_NAMES = {
    "blocks.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blocks.{i}.attn.wq.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blocks.{i}.attn.wk.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blocks.{i}.attn.wv.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blocks.{i}.attn.wo.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blocks.{i}.mlp_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blocks.{i}.mlp.w_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blocks.{i}.mlp.w_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blocks.{i}.mlp.w_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}
_GLOBAL_NAMES = {"tok_emb.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
                 "lm_head.weight": "lm_head.weight"}


def non_vanilla_fields(config: ModelConfig) -> list[str]:
    """Dotted names of every variant field (of every group in VARIANT_GROUPS) that differs from the plain Llama model."""
    changed = [f"{group}.{f.name}" for group, kind in VARIANT_GROUPS.items() for f in dataclasses.fields(kind)
               if getattr(getattr(config, group), f.name) != getattr(kind(), f.name)]
    return changed + (["neutreno_lambda"] if config.neutreno_lambda else [])


def _name_map(n_layer: int) -> dict[str, str]:
    names = dict(_GLOBAL_NAMES)
    for i in range(n_layer):
        names.update({ours.format(i=i): theirs.format(i=i) for ours, theirs in _LAYER_NAMES.items()})
    return names


def llama_config(config: ModelConfig):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.d_model, intermediate_size=config.ffn_dim,
        num_hidden_layers=config.n_layer, num_attention_heads=config.n_head, num_key_value_heads=config.n_kv_head,
        head_dim=config.head_dim, max_position_embeddings=config.max_seq_len, rms_norm_eps=config.norm_eps,
        rope_theta=config.rope_theta, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        hidden_act="silu", initializer_range=config.init_std,
    )


def to_hf_llama(model: Transformer):
    """A `LlamaForCausalLM` computing exactly what the vanilla `model` computes."""
    from transformers import LlamaForCausalLM

    changed = non_vanilla_fields(model.config)
    if changed:
        raise ValueError(f"only a vanilla model maps onto LlamaForCausalLM; these fields are not vanilla: {changed}")
    hf = LlamaForCausalLM(llama_config(model.config)).to(model.lm_head.weight.dtype)
    ours = model.unpadded_state_dict()
    theirs = {hf_name: ours[name] for name, hf_name in _name_map(model.config.n_layer).items()}
    hf.load_state_dict(theirs, strict=True)
    return hf.eval()


def from_hf_llama(hf_model, **overrides) -> Transformer:
    """A vanilla lit-resformer Transformer with the weights of a `LlamaForCausalLM` (`overrides` go to the config)."""
    c = hf_model.config
    if getattr(c, "tie_word_embeddings", False):
        raise ValueError("tied input/output embeddings are not supported (the paper's models are untied)")
    rope = getattr(c, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type={rope['rope_type']!r} is not supported; only plain RoPE")
    theta = rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))
    config = ModelConfig(
        n_layer=c.num_hidden_layers, n_head=c.num_attention_heads, n_kv_head=c.num_key_value_heads,
        d_model=c.hidden_size, ffn_dim=c.intermediate_size, vocab_size=c.vocab_size,
        max_seq_len=c.max_position_embeddings, rope_theta=float(theta), norm_eps=c.rms_norm_eps, **overrides,
    )
    if config.head_dim != getattr(c, "head_dim", config.head_dim):
        raise ValueError(f"head_dim={c.head_dim} differs from hidden_size/num_attention_heads={config.head_dim}")
    model = Transformer(config).to(next(hf_model.parameters()).dtype)
    theirs = hf_model.state_dict()
    with torch.no_grad():
        model.load_state_dict({name: theirs[hf_name] for name, hf_name in _name_map(config.n_layer).items()},
                              strict=True)
    return model
