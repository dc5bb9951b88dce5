"""Model FLOP utilisation: achieved training FLOP/s against this device's measured matmul peak.

Achieved = `model.flops_per_token(seq_len)` (6 x matmul parameters + attention, PaLM convention) x training
tokens/s (fwd + bwd + AdamW). Peak = FLOP/s of one large square matmul (fp32 on CPU, bf16 on CUDA), timed in
the same rounds as the training steps so both see the same machine load. Runs unchanged on CUDA (device
auto-detected, bf16 autocast, an 82M-sized model added there).
"""

from __future__ import annotations

import torch

from lit_resformer.model import ModelConfig, Transformer

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
    training_step,
)

NAME = "mfu"
BATCH, SEQ_LEN = 16, 256
PEAK_N = {"cpu": 2048, "cuda": 8192}
QUICK = dict(d_model=32, ffn_dim=64, vocab_size=128, max_seq_len=32)
QUICK_BATCH, QUICK_SEQ_LEN, QUICK_PEAK_N = 2, 16, 128


def presets(settings: Settings) -> tuple[str, ...]:
    return ("tiny", "mini", "82M") if settings.cuda and not settings.quick else ("tiny", "mini")


def run(settings: Settings) -> Result:
    batch, seq_len = (QUICK_BATCH, QUICK_SEQ_LEN) if settings.quick else (BATCH, SEQ_LEN)
    n = QUICK_PEAK_N if settings.quick else PEAK_N[settings.device.type]
    dtype = torch.bfloat16 if settings.cuda else torch.float32
    a, b = (torch.randn(n, n, device=settings.device, dtype=dtype) for _ in range(2))
    out = torch.empty(n, n, device=settings.device, dtype=dtype)
    contenders = {"peak": lambda: torch.mm(a, b, out=out)}
    flops_per_step = {"peak": 2.0 * n**3}
    configs = {}
    for preset in presets(settings):
        configs[preset] = ModelConfig.preset(preset, **(QUICK if settings.quick else {}))
        torch.manual_seed(0)
        model = Transformer(configs[preset]).to(settings.device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        tokens = random_batch(configs[preset].vocab_size, batch, seq_len, settings.device)
        contenders[preset] = training_step(model, tokens, settings, optimizer)
        flops_per_step[preset] = model.flops_per_token(seq_len) * batch * seq_len
    times = interleaved(contenders, settings)

    peak = Metric(f"{NAME}.peak_matmul_flops", flops_per_step["peak"] / median(times["peak"]), "FLOP/s",
                  better="higher")
    metrics, rows = [peak], []
    for preset in configs:
        achieved = Metric(f"{NAME}.{preset}.achieved_flops", flops_per_step[preset] / median(times[preset]),
                          "FLOP/s", better="higher")
        # per round: (flops / t_model) / (peak flops / t_peak)
        mfus = [flops_per_step[preset] / flops_per_step["peak"] * r
                for r in paired_ratios(times["peak"], times[preset])]
        mfu = Metric(f"{NAME}.{preset}.mfu", median(mfus), "fraction of peak", better="higher")
        tps = Metric(f"{NAME}.{preset}.tokens_per_s", batch * seq_len / median(times[preset]), "tokens/s",
                     better="higher")
        metrics += [tps, achieved, mfu]
        c = configs[preset]
        rows.append([preset, f"{c.n_layer}/{c.n_head}/{c.d_model}/{c.ffn_dim}",
                     f"{flops_per_step[preset] / (batch * seq_len) / 1e6:.1f}", tps.value,
                     f"{achieved.value / 1e9:.1f}", f"{100 * mfu.value:.1f}%", f"{100 * spread(mfus):.1f}%"])
    markdown = (
        f"Peak: `torch.mm` of two {n}x{n} {str(dtype).removeprefix('torch.')} matrices = "
        f"**{peak.value / 1e9:.1f} GFLOP/s**. Training: fwd + bwd + AdamW, batch {batch} x {seq_len}"
        f"{', bf16 autocast' if settings.cuda else ', fp32'}.\n\n"
        + markdown_table(["preset", "layers/heads/d/ffn", "MFLOP/token", "tokens/s", "achieved GFLOP/s", "MFU",
                          "spread (IQR)"], rows)
    )
    return Result(NAME, metrics, markdown, {"peak_matmul_n": n, "batch": batch, "seq_len": seq_len})
