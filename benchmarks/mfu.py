"""Model FLOP utilisation: achieved training FLOP/s against this device's measured matmul peak.

Achieved = `model.flops_per_token(seq_len)` (6 x matmul parameters + attention, PaLM convention; the head's real
vocabulary rows only) x training tokens/s (fwd + loss + bwd + AdamW). Peak = FLOP/s of large square matmuls
(fp32 on CPU, bf16 on CUDA), timed in the same rounds as the training steps so both see the same machine; on
CUDA each peak call runs `PEAK_REPEATS` products back to back, so the clocks are up and launch gaps vanish.

On CUDA the models are the paper's 82M, 180M and 468M at 2,048 tokens with the paper's vocabulary, through the
project's training path (`model(idx, labels=...)`: padded head, chunked cross-entropy) compiled as one function,
bf16 autocast and fused AdamW. `82M-logits` is the same 82M computing logits and then `causal_lm_loss` on them
(also compiled), to show what the chunked loss buys. Targets (what the best small-model trainers reach on an H100): 82M >= 45%, 180M >= 50%.
"""

from __future__ import annotations

import torch

from lit_resformer.model import ModelConfig, Transformer, causal_lm_loss

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

NAME = "mfu"
BATCH, SEQ_LEN = 16, 256
PEAK_N = {"cpu": 2048, "cuda": 8192}
PEAK_REPEATS = {"cpu": 1, "cuda": 10}
QUICK = dict(d_model=32, ffn_dim=64, vocab_size=128, max_seq_len=32)
QUICK_BATCH, QUICK_SEQ_LEN, QUICK_PEAK_N = 2, 16, 128
GPU_SEQ_LEN = 2048
GPU_BATCH = {"82M": 16, "180M": 16, "468M": 8}  # 468M at 16 x 2,048 does not leave room for the others
TARGETS = {"82M": 0.45, "180M": 0.50}
KEEP_FOR_TIMING = 0.25  # stop building contenders when less than this share of the budget is left


def contenders(settings: Settings) -> dict[str, tuple[str, int, int, bool]]:
    """name -> (preset, batch, seq_len, chunked loss), in the order they are built."""
    if settings.quick:
        return {p: (p, QUICK_BATCH, QUICK_SEQ_LEN, True) for p in ("tiny", "mini")}
    if not settings.cuda:
        return {p: (p, BATCH, SEQ_LEN, True) for p in ("tiny", "mini")}
    table = {p: (p, b, GPU_SEQ_LEN, True) for p, b in GPU_BATCH.items()}
    table["82M-logits"] = ("82M", GPU_BATCH["82M"], GPU_SEQ_LEN, False)
    return table


def run(settings: Settings) -> Result:
    kind = settings.device.type
    n = QUICK_PEAK_N if settings.quick else PEAK_N[kind]
    repeats = PEAK_REPEATS[kind]
    dtype = torch.bfloat16 if settings.cuda else torch.float32
    a, b = (torch.randn(n, n, device=settings.device, dtype=dtype) for _ in range(2))
    out = torch.empty(n, n, device=settings.device, dtype=dtype)

    def peak() -> None:
        for _ in range(repeats):
            torch.mm(a, b, out=out)

    table = contenders(settings)
    configs, flops_per_step = {}, {"peak": 2.0 * n**3 * repeats}

    def builder(name: str):
        preset, batch, seq_len, chunked = table[name]

        def build():
            configs[name] = ModelConfig.preset(preset, **(QUICK if settings.quick else {}))
            torch.manual_seed(0)
            model = Transformer(configs[name]).to(settings.device).train()
            tokens = random_batch(configs[name].vocab_size, batch, seq_len, settings.device)
            loss = None if chunked else (lambda x, y, model=model: causal_lm_loss(model(x), y))
            step = training_step(model, tokens, settings, adamw(model, settings), loss=loss, compile=settings.cuda)
            step()  # compiles on CUDA
            flops_per_step[name] = model.flops_per_token(seq_len) * batch * seq_len
            return step

        return build

    steps, left_out = build_within_budget({name: builder(name) for name in table}, settings, KEEP_FOR_TIMING)
    times = interleaved({"peak": peak, **steps}, settings)

    peak_metric = Metric(f"{NAME}.peak_matmul_flops", flops_per_step["peak"] / median(times["peak"]), "FLOP/s",
                         better="higher")
    metrics, rows = [peak_metric], []
    unit, scale = ("TFLOP/s", 1e12) if settings.cuda else ("GFLOP/s", 1e9)
    for name in steps:
        preset, batch, seq_len, chunked = table[name]
        achieved = Metric(f"{NAME}.{name}.achieved_flops", flops_per_step[name] / median(times[name]),
                          "FLOP/s", better="higher")
        # per round: (flops / t_model) / (peak flops / t_peak)
        mfus = [flops_per_step[name] / flops_per_step["peak"] * r for r in paired_ratios(times["peak"], times[name])]
        target = TARGETS.get(name) if settings.cuda else None
        mfu = Metric(f"{NAME}.{name}.mfu", median(mfus), "fraction of peak", target, better="higher")
        tps = Metric(f"{NAME}.{name}.tokens_per_s", batch * seq_len / median(times[name]), "tokens/s",
                     better="higher")
        metrics += [tps, achieved, mfu]
        c = configs[name]
        rows.append([name, f"{c.n_layer}/{c.n_head}/{c.d_model}/{c.ffn_dim}", f"{c.vocab_size:,}",
                     f"{batch} x {seq_len}", "chunked" if chunked else "logits + causal_lm_loss",
                     f"{flops_per_step[name] / (batch * seq_len) / 1e6:.1f}", tps.value,
                     f"{achieved.value / scale:.1f}", f"{100 * mfu.value:.1f}%", f"{100 * spread(mfus):.1f}%",
                     target_mark(mfu)])
    step_kind = "fwd + loss + bwd + fused AdamW, compiled as one function" if settings.cuda \
        else "fwd + loss + bwd + AdamW"
    markdown = (
        f"Peak: `torch.mm` of two {n}x{n} {str(dtype).removeprefix('torch.')} matrices"
        f"{f', {repeats} back to back per call' if repeats > 1 else ''} = "
        f"**{peak_metric.value / scale:.1f} {unit}**. Training: {step_kind}, {settings.precision}.\n\n"
        + markdown_table(["contender", "layers/heads/d/ffn", "vocab", "batch", "loss", "MFLOP/token", "tokens/s",
                          f"achieved {unit}", "MFU", "spread (IQR)", "target"], rows)
        + (f"\n\nLeft out (budget of {settings.budget_s:.0f} s spent): {', '.join(left_out)}." if left_out else "")
    )
    return Result(NAME, metrics, markdown, {"peak_matmul_n": n, "peak_repeats": repeats, "left_out": left_out,
                                            "contenders": {k: list(v) for k, v in table.items()}})
