"""Export a vanilla lit-resformer checkpoint as a transformers ``LlamaForCausalLM`` folder.

    export_hf("runs/x/checkpoints/last.ckpt", "runs/x/hf")   # lit-resformer export --ckpt ... --to-hf ...

The folder holds ``config.json``, ``generation_config.json``, ``model.safetensors`` and the tokenizer
(a ``PreTrainedTokenizerFast`` around the run's ``tokenizers.Tokenizer``, ``<|endoftext|>`` as BOS, EOS and
pad), so ``AutoModelForCausalLM``/``AutoTokenizer`` and lm-eval's ``hf`` model load it directly. Only
vanilla models map onto Llama: a ResFormer/SVFormer/... checkpoint is refused, naming the config fields
that are not vanilla (no custom modeling code is shipped).
"""

from __future__ import annotations

from pathlib import Path

from eval.lm_eval_model import EOS_TOKEN


def export_model(model, tokenizer, out_dir: str | Path) -> Path:
    """Write an in-memory vanilla (Transformer, tokenizers.Tokenizer) pair as an HF Llama folder."""
    from transformers import PreTrainedTokenizerFast

    from lit_resformer.model.hf import non_vanilla_fields, to_hf_llama

    changed = non_vanilla_fields(model.config)
    if changed:
        raise ValueError(
            f"export --to-hf supports vanilla models only (LlamaForCausalLM); this checkpoint's config has "
            f"non-vanilla fields: {', '.join(changed)}"
        )
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    if eos_id is None:
        raise ValueError(f"the tokenizer has no {EOS_TOKEN!r} token")
    hf_model = to_hf_llama(model)
    for config in (hf_model.config, hf_model.generation_config):
        config.bos_token_id = config.eos_token_id = config.pad_token_id = eos_id
    out_dir = Path(out_dir)
    hf_model.save_pretrained(out_dir, safe_serialization=True)
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=EOS_TOKEN, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
        model_max_length=model.config.max_seq_len,
    )
    hf_tokenizer.save_pretrained(out_dir)
    return out_dir


def export_hf(ckpt: str | Path, out_dir: str | Path) -> Path:
    """`lit-resformer export --ckpt PATH --to-hf DIR`: a vanilla Lightning checkpoint -> HF Llama folder."""
    from lit_resformer import load_checkpoint

    ckpt = Path(ckpt)
    if not ckpt.is_file():
        raise FileNotFoundError(f"ckpt={str(ckpt)!r}: no such checkpoint file")
    model, tokenizer = load_checkpoint(ckpt)
    if tokenizer is None:
        raise ValueError(f"ckpt={str(ckpt)!r} holds no tokenizer; the HF folder needs one")
    return export_model(model, tokenizer, out_dir)
