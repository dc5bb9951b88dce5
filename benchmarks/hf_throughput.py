"""Vanilla training throughput (fwd + loss + bwd + AdamW step) against `transformers.LlamaForCausalLM`.

Both models hold the same weights (`to_hf_llama`), see the same batch, run under the same threads and dtype and
identical AdamW settings. Ours trains through its own path (`model(idx, labels=...)`: padded head, the loss path
`chunked_loss_pays` picks: plain logits + cross-entropy on the CPU, chunked on CUDA). HF runs with its default
attention implementation (recorded in the table) and `use_cache=False`,
twice: with the project's loss function on its logits, and with its own `labels=` loss as users run it
(`model(input_ids=x, labels=x)`, which shifts inside and so scores 2,047 of 2,048 positions). On CUDA: the
paper's 82M at 2,048 tokens with the paper's vocabulary, every contender compiled, bf16 autocast, fused AdamW.
Targets (`targets.py`): parity with HF on the CPU, with either loss; on CUDA >= 1.2x with the project's loss and
>= 1.3x with HF's own.
"""

from __future__ import annotations

import torch

from lit_resformer.model import ModelConfig, Transformer, causal_lm_loss
from lit_resformer.model.hf import to_hf_llama

from . import targets
from .harness import (
    Metric,
    Result,
    Settings,
    adamw,
    build_within_budget,
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
PRESETS = ("tiny", "mini")
BATCH, SEQ_LEN = 16, 256
GPU_PRESETS, GPU_BATCH, GPU_SEQ_LEN = ("82M",), 16, 2048
QUICK = dict(d_model=32, ffn_dim=64, vocab_size=128, max_seq_len=32)
QUICK_BATCH, QUICK_SEQ_LEN = 2, 16
KEEP_FOR_TIMING = 0.2


def contenders(config: ModelConfig, batch: int, seq_len: int, settings: Settings):
    """Training steps of ours and of HF Llama with the same weights, in priority order; HF's attention kind."""
    torch.manual_seed(0)
    ours = Transformer(config)
    hf = to_hf_llama(ours)  # same weights; copied before either model moves or trains
    ours, hf = ours.to(settings.device).train(), hf.to(settings.device).train()
    tokens = random_batch(config.vocab_size, batch, seq_len, settings.device)

    def build(model, loss=None):
        step = training_step(model, tokens, settings, adamw(model, settings), loss=loss, compile=settings.cuda)
        step()  # compiles on CUDA
        return step

    builders = {
        "lit-resformer": lambda: build(ours),
        "hf-llama": lambda: build(hf, lambda x, y: causal_lm_loss(hf(input_ids=x, use_cache=False).logits, y)),
        "hf-llama-own-loss": lambda: build(hf, lambda x, y: hf(input_ids=x, labels=x, use_cache=False).loss),
    }
    return builders, hf.config._attn_implementation


def run(settings: Settings) -> Result:
    gpu = settings.cuda and not settings.quick
    batch, seq_len = (QUICK_BATCH, QUICK_SEQ_LEN) if settings.quick else (GPU_BATCH, GPU_SEQ_LEN) if gpu \
        else (BATCH, SEQ_LEN)
    metrics, rows, hf_attention, left_out = [], [], None, []
    for preset in GPU_PRESETS if gpu else PRESETS:
        config = ModelConfig.preset(preset, **(QUICK if settings.quick else {}))
        builders, hf_attention = contenders(config, batch, seq_len, settings)
        steps, skipped = build_within_budget(builders, settings, KEEP_FOR_TIMING, required=2)
        left_out += [f"{preset} {name}" for name in skipped]
        times = interleaved(steps, settings)
        tokens_per_step = batch * seq_len
        ours_tps = Metric(f"{NAME}.{preset}.lit_resformer_tokens_per_s", tokens_per_step / median(times["lit-resformer"]),
                          "tokens/s", better="higher")
        metrics.append(ours_tps)
        for name, suffix in (("hf-llama", ""), ("hf-llama-own-loss", "_own_loss")):
            if name not in times:
                continue
            target = targets.target(f"{NAME}.ratio{suffix}", settings.cuda)
            speedups = paired_ratios(times[name], times["lit-resformer"])  # time ratio = throughput ratio
            hf_tps = Metric(f"{NAME}.{preset}.hf_llama{suffix}_tokens_per_s", tokens_per_step / median(times[name]),
                            "tokens/s", better="higher")
            ratio = Metric(f"{NAME}.{preset}.ratio{suffix}", median(speedups), "x HF tokens/s", target, "higher")
            metrics += [hf_tps, ratio]
            loss = "project's `causal_lm_loss` on its logits" if name == "hf-llama" else "its own `labels=` loss"
            rows.append([preset, f"{config.n_layer}/{config.n_head}/{config.d_model}/{config.ffn_dim}", loss,
                         ours_tps.value, hf_tps.value, ratio.value, spread(speedups), target_mark(ratio)])
    markdown = (
        f"Training step = zero_grad, forward, next-token cross-entropy, backward, AdamW step; batch {batch} x "
        f"{seq_len} tokens, {settings.precision}; HF `LlamaForCausalLM` with attn_implementation=`{hf_attention}`, "
        "`use_cache=False`.\n\n"
        + markdown_table(["preset", "layers/heads/d/ffn", "HF loss", "lit-resformer tok/s", "HF Llama tok/s",
                          "ratio", "spread (IQR)", "target"], rows)
        + (f"\n\nLeft out (budget of {settings.budget_s:.0f} s spent): {', '.join(left_out)}." if left_out else "")
    )
    return Result(NAME, metrics, markdown, {"hf_attn_implementation": hf_attention, "batch": batch, "seq_len": seq_len,
                                            "left_out": left_out})
