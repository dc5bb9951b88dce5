"""Vanilla training throughput (fwd + bwd + AdamW step) against `transformers.LlamaForCausalLM`.

Both models hold the same weights (`to_hf_llama`), see the same batch, run under the same threads and dtype,
use the same loss function on their logits and identical AdamW settings. HF runs with its default attention
implementation (recorded in the table) and `use_cache=False`, as for training. Target: ours >= 1.2x HF's
tokens/s.
"""

from __future__ import annotations

import torch

from lit_resformer.model import ModelConfig, Transformer
from lit_resformer.model.hf import to_hf_llama

from .harness import (
    Metric,
    Result,
    Settings,
    interleaved,
    markdown_table,
    median,
    paired_ratios,
    random_batch,
    spread,
    target_mark,
    training_step,
)

NAME = "hf_throughput"
TARGET = 1.2
PRESETS = ("tiny", "mini")
BATCH, SEQ_LEN = 16, 256
QUICK = dict(d_model=32, ffn_dim=64, vocab_size=128, max_seq_len=32)
QUICK_BATCH, QUICK_SEQ_LEN = 2, 16


def adamw(model: torch.nn.Module) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def run(settings: Settings) -> Result:
    batch, seq_len = (QUICK_BATCH, QUICK_SEQ_LEN) if settings.quick else (BATCH, SEQ_LEN)
    metrics, rows, hf_attention = [], [], None
    for preset in PRESETS:
        config = ModelConfig.preset(preset, **(QUICK if settings.quick else {}))
        torch.manual_seed(0)
        ours = Transformer(config)
        hf = to_hf_llama(ours)  # same weights; copied before either model moves or trains
        ours, hf = ours.to(settings.device).train(), hf.to(settings.device).train()
        hf_attention = hf.config._attn_implementation
        tokens = random_batch(config.vocab_size, batch, seq_len, settings.device)
        steps = {
            "lit-resformer": training_step(ours, tokens, settings, adamw(ours)),
            "hf-llama": training_step(hf, tokens, settings, adamw(hf),
                                      logits=lambda x, hf=hf: hf(input_ids=x, use_cache=False).logits),
        }
        times = interleaved(steps, settings)
        speedups = paired_ratios(times["hf-llama"], times["lit-resformer"])  # time ratio = throughput ratio
        tokens_per_step = batch * seq_len
        ours_tps = Metric(f"{NAME}.{preset}.lit_resformer_tokens_per_s", tokens_per_step / median(times["lit-resformer"]),
                          "tokens/s", better="higher")
        hf_tps = Metric(f"{NAME}.{preset}.hf_llama_tokens_per_s", tokens_per_step / median(times["hf-llama"]),
                        "tokens/s", better="higher")
        ratio = Metric(f"{NAME}.{preset}.ratio", median(speedups), "x HF tokens/s", TARGET, "higher")
        metrics += [ours_tps, hf_tps, ratio]
        rows.append([preset, f"{config.n_layer}/{config.n_head}/{config.d_model}/{config.ffn_dim}", ours_tps.value,
                     hf_tps.value, ratio.value, spread(speedups), target_mark(ratio)])
    markdown = (
        f"Training step = zero_grad, forward, next-token cross-entropy, backward, AdamW step; batch {batch} x "
        f"{seq_len} tokens; HF `LlamaForCausalLM` with attn_implementation=`{hf_attention}`, `use_cache=False`.\n\n"
        + markdown_table(["preset", "layers/heads/d/ffn", "lit-resformer tok/s", "HF Llama tok/s", "ratio",
                          "spread (IQR)", "target"], rows)
    )
    return Result(NAME, metrics, markdown, {"hf_attn_implementation": hf_attention, "batch": batch, "seq_len": seq_len})
