"""Export a lit-resformer checkpoint as a Hugging Face model folder.

    export_hf("runs/x/checkpoints/last.ckpt", "runs/x/hf")   # lit-resformer export --ckpt ... --to-hf ...

A vanilla model becomes a plain ``LlamaForCausalLM``. Every other config becomes a ``trust_remote_code`` folder:
``configuration_resformer.py`` / ``modeling_resformer.py`` (copied from ``hf_remote/`` beside this file, importing
only torch and transformers), ``config.json`` with the variant fields, ``auto_map``, the transformers release it
was exported with and the major versions the code is tested under, and ``model.safetensors`` whose names are the
training code's own. Both kinds hold ``generation_config.json`` and the tokenizer (a
``PreTrainedTokenizerFast`` around the run's ``tokenizers.Tokenizer``, ``<|endoftext|>`` as BOS, EOS and pad), so
``AutoModelForCausalLM``/``AutoTokenizer`` and lm-eval's ``hf`` model load either without this project.
"""

from __future__ import annotations

from pathlib import Path

import torch

from lit_resformer.data.tokenizer import EOS_TOKEN

# ModelConfig fields that choose how the model is computed on a device, not what it computes.
NOT_ARCHITECTURE = ("size", "attn_impl")
EMBEDDING_ROWS = ("tok_emb.weight", "lm_head.weight")  # may be padded past vocab_size for fast kernels


def hf_config_fields(model_config: dict) -> dict:
    """A ModelConfig as a dict -> the keyword arguments of ResFormerConfig; refuses fields the HF code lacks."""
    from lit_resformer.model.config import VARIANT_GROUPS

    from .hf_remote.configuration_resformer import GROUP_DEFAULTS

    # A group the training code has and the exported code lacks is unknown below, field by field.
    groups = {name: GROUP_DEFAULTS.get(name, {}) for name in VARIANT_GROUPS}
    known = {"vocab_size", "n_layer", "n_head", "n_kv_head", "d_model", "ffn_dim", "max_seq_len", "rope_theta",
             "norm_eps", "init_std", "neutreno_lambda", *groups}
    fields = {k: v for k, v in model_config.items() if k not in NOT_ARCHITECTURE}
    unknown = sorted(set(fields) - known) + sorted(
        f"{group}.{k}" for group, defaults in groups.items() for k in set(fields.get(group, {})) - set(defaults))
    if unknown:
        raise ValueError(f"the exported modeling code does not know the config field(s) {unknown}; "
                         f"teach lit_resformer/export/hf_remote/ what they compute before exporting this model")
    return fields


def hf_state_dict(state_dict: dict, vocab_size: int) -> dict:
    """The training code's weights for the exported model (same names), embedding rows cut to `vocab_size`."""
    weights = {name: tensor.detach().to("cpu").contiguous() for name, tensor in state_dict.items()}
    for name in EMBEDDING_ROWS:  # padded rows are never predicted or scored
        weights[name] = weights[name][:vocab_size].contiguous()
    return weights


def _special_token_id(tokenizer) -> int:
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    if eos_id is None:
        raise ValueError(f"the tokenizer has no {EOS_TOKEN!r} token")
    return eos_id


def _save_tokenizer(tokenizer, out_dir: Path, max_seq_len: int) -> None:
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=EOS_TOKEN, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
        model_max_length=max_seq_len,
    ).save_pretrained(out_dir)


def _set_special_tokens(hf_model, token_id: int) -> None:
    for config in (hf_model.config, hf_model.generation_config):
        config.bos_token_id = config.eos_token_id = config.pad_token_id = token_id


def export_resformer(model_config: dict, state_dict: dict, tokenizer, out_dir: str | Path) -> Path:
    """A ModelConfig (as a dict) and its weights -> a trust_remote_code folder with the modeling code in it."""
    from transformers import __version__ as transformers_version

    from .hf_remote.configuration_resformer import ResFormerConfig
    from .hf_remote.modeling_resformer import ResFormerForCausalLM

    token_id = _special_token_id(tokenizer)
    config = ResFormerConfig(**hf_config_fields(model_config), exported_with_transformers=transformers_version)
    weights = hf_state_dict(state_dict, config.vocab_size)
    with torch.device("meta"):  # the weights are assigned below, so nothing is initialised
        hf_model = ResFormerForCausalLM(config)
    hf_model.load_state_dict(weights, strict=True, assign=True)
    _set_special_tokens(hf_model, token_id)
    # save_pretrained copies the two modules into the folder and writes auto_map for these classes.
    ResFormerConfig.register_for_auto_class()
    ResFormerForCausalLM.register_for_auto_class("AutoModelForCausalLM")
    out_dir = Path(out_dir)
    hf_model.save_pretrained(out_dir, safe_serialization=True)
    _save_tokenizer(tokenizer, out_dir, config.max_seq_len)
    return out_dir


def export_llama(model, tokenizer, out_dir: str | Path) -> Path:
    """A vanilla Transformer -> a plain LlamaForCausalLM folder (no custom code)."""
    from lit_resformer.model.hf import to_hf_llama

    token_id = _special_token_id(tokenizer)
    hf_model = to_hf_llama(model)
    _set_special_tokens(hf_model, token_id)
    out_dir = Path(out_dir)
    hf_model.save_pretrained(out_dir, safe_serialization=True)
    _save_tokenizer(tokenizer, out_dir, model.config.max_seq_len)
    return out_dir


def export_model(model, tokenizer, out_dir: str | Path) -> Path:
    """Write an in-memory (Transformer, tokenizers.Tokenizer) pair as an HF folder: Llama if vanilla, else remote code."""
    from lit_resformer.model.hf import non_vanilla_fields

    if not non_vanilla_fields(model.config):
        return export_llama(model, tokenizer, out_dir)
    return export_resformer(model.config.to_dict(), model.state_dict(), tokenizer, out_dir)


def export_hf(ckpt: str | Path, out_dir: str | Path) -> Path:
    """`lit-resformer export --ckpt PATH --to-hf DIR`: a Lightning checkpoint -> HF folder."""
    from lit_resformer import load_checkpoint

    ckpt = Path(ckpt)
    if not ckpt.is_file():
        raise FileNotFoundError(f"ckpt={str(ckpt)!r}: no such checkpoint file")
    model, tokenizer = load_checkpoint(ckpt)
    if tokenizer is None:
        raise ValueError(f"ckpt={str(ckpt)!r} holds no tokenizer; the HF folder needs one")
    return export_model(model, tokenizer, out_dir)
