"""Model FLOP utilisation: achieved training FLOP/s against this device's measured matmul peak.

Achieved = `model.flops_per_token(seq_len)` (6 x matmul parameters + attention, PaLM convention; the head's real
vocabulary rows only) x training tokens/s (fwd + loss + bwd + AdamW).

Peak = the best FLOP/s that square matmuls (fp32 on CPU, bf16 on CUDA) reach on this machine: several sizes
(`PEAK_SIZES`), each call repeating its product until it does about `PEAK_CALL_FLOPS` (clocks up, launch gaps
gone), every size timed in every round beside the training steps, after the warm-up rounds; the peak is the best
size's best round. One size timed once swung by 40% between two days on the same kind of machine; the best of
many warm calls moves only when the machine does. Its spread is the interquartile range of the best size's
rounds, relative to their median: how far a typical call fell short of the peak. On a GPU the MFU is also stated
against the card's datasheet dense bf16 peak (nanochat's convention, lit_resformer.provenance), so that it compares
with theirs.

On CUDA the models are the paper's 82M, 180M and 468M at 2,048 tokens with the paper's vocabulary, through the
project's training path (`model(idx, labels=...)`: padded head, the chunked cross-entropy there) compiled as one
function, bf16 autocast and fused AdamW. `82M-logits` is the same 82M computing logits and then `causal_lm_loss`
on them (also compiled), to show what the chunked loss buys. Targets (`targets.py`): 82M >= 45%, 180M >= 50%.
"""

from __future__ import annotations

import torch

from lit_resformer.model import ModelConfig, Transformer, causal_lm_loss
from lit_resformer.model.loss import chunked_loss_pays
from lit_resformer.provenance import spec_peak_flops

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
    random_batch,
    spread,
    target_mark,
    training_step,
)

NAME = "mfu"
BATCH, SEQ_LEN = 16, 256
PEAK_SIZES = {"cpu": (512, 1024, 1536, 2048), "cuda": (4096, 8192, 16384)}
PEAK_CALL_FLOPS = {"cpu": 2 * 2048**3, "cuda": 10 * 2 * 8192**3}  # ~0.2 s on one CPU core, ~15 ms on an H100
QUICK = dict(d_model=32, ffn_dim=64, vocab_size=128, max_seq_len=32)
QUICK_BATCH, QUICK_SEQ_LEN, QUICK_PEAK_SIZES = 2, 16, (64, 128)
GPU_SEQ_LEN = 2048
GPU_BATCH = {"82M": 16, "180M": 16, "468M": 8}  # 468M at 16 x 2,048 does not leave room for the others
KEEP_FOR_TIMING = 0.25  # stop building contenders when less than this share of the budget is left


def contenders(settings: Settings) -> dict[str, tuple[str, int, int, bool]]:
    """name -> (preset, batch, seq_len, through the training path's own loss), in the order they are built."""
    if settings.quick:
        return {p: (p, QUICK_BATCH, QUICK_SEQ_LEN, True) for p in ("tiny", "mini")}
    if not settings.cuda:
        return {p: (p, BATCH, SEQ_LEN, True) for p in ("tiny", "mini")}
    table = {p: (p, b, GPU_SEQ_LEN, True) for p, b in GPU_BATCH.items()}
    table["82M-logits"] = ("82M", GPU_BATCH["82M"], GPU_SEQ_LEN, False)
    return table


def matmul_calls(settings: Settings) -> dict[str, tuple[int, int, object]]:
    """`peak n=<size>` -> (size, products per call, the call), one per peak size."""
    kind = settings.device.type
    dtype = torch.bfloat16 if settings.cuda else torch.float32
    calls = {}
    for n in QUICK_PEAK_SIZES if settings.quick else PEAK_SIZES[kind]:
        a, b, out = (torch.randn(n, n, device=settings.device, dtype=dtype) for _ in range(3))
        repeats = max(1, round(PEAK_CALL_FLOPS[kind] / (2 * n**3)))

        def call(a=a, b=b, out=out, repeats=repeats) -> None:
            for _ in range(repeats):
                torch.mm(a, b, out=out)

        calls[f"peak n={n}"] = (n, repeats, call)
    return calls


def run(settings: Settings) -> Result:
    dtype = torch.bfloat16 if settings.cuda else torch.float32
    peaks = matmul_calls(settings)
    table = contenders(settings)
    configs, flops_per_step = {}, {name: 2.0 * n**3 * repeats for name, (n, repeats, _) in peaks.items()}

    def builder(name: str):
        preset, batch, seq_len, training_path = table[name]

        def build():
            configs[name] = ModelConfig.preset(preset, **(QUICK if settings.quick else {}))
            torch.manual_seed(0)
            model = Transformer(configs[name]).to(settings.device).train()
            tokens = random_batch(configs[name].vocab_size, batch, seq_len, settings.device)
            loss = None if training_path else (lambda x, y, model=model: causal_lm_loss(model(x), y))
            step = training_step(model, tokens, settings, adamw(model, settings), loss=loss, compile=settings.cuda)
            step()  # compiles on CUDA
            flops_per_step[name] = model.flops_per_token(seq_len) * batch * seq_len
            return step

        return build

    steps, left_out = build_within_budget({name: builder(name) for name in table}, settings, KEEP_FOR_TIMING)
    times = interleaved({**{name: call for name, (_, _, call) in peaks.items()}, **steps}, settings)

    rates = {name: [flops_per_step[name] / t for t in times[name]] for name in peaks}
    best = max(rates, key=lambda name: max(rates[name]))
    peak = max(rates[best])
    peak_metric = Metric(f"{NAME}.peak_matmul_flops", peak, "FLOP/s", better="higher")
    peak_spread = Metric(f"{NAME}.peak_matmul_spread", spread(rates[best]) / median(rates[best]),
                         "fraction of the best size's median", better="lower")
    metrics, rows = [peak_metric, peak_spread], []
    datasheet = spec_peak_flops(torch.cuda.get_device_name(settings.device)) if settings.cuda else None
    unit, scale = ("TFLOP/s", 1e12) if settings.cuda else ("GFLOP/s", 1e9)
    for name, (n, _, _) in peaks.items():
        metrics.append(Metric(f"{NAME}.matmul_n{n}_flops", max(rates[name]), "FLOP/s", better="higher"))
    for name in steps:
        preset, batch, seq_len, training_path = table[name]
        achieved = Metric(f"{NAME}.{name}.achieved_flops", flops_per_step[name] / median(times[name]),
                          "FLOP/s", better="higher")
        mfus = [flops_per_step[name] / t / peak for t in times[name]]  # each round against the one peak
        mfu = Metric(f"{NAME}.{name}.mfu", median(mfus), "fraction of peak",
                     targets.target(f"{NAME}.{name}", settings.cuda), better="higher")
        tps = Metric(f"{NAME}.{name}.tokens_per_s", batch * seq_len / median(times[name]), "tokens/s",
                     better="higher")
        metrics += [tps, achieved, mfu]
        c = configs[name]
        rows.append([name, f"{c.n_layer}/{c.n_head}/{c.d_model}/{c.ffn_dim}", f"{c.vocab_size:,}",
                     f"{batch} x {seq_len}", loss_label(settings, c, batch * seq_len) if training_path
                     else "logits + causal_lm_loss",
                     f"{flops_per_step[name] / (batch * seq_len) / 1e6:.1f}", tps.value,
                     f"{achieved.value / scale:.1f}", f"{100 * mfu.value:.1f}%", f"{100 * spread(mfus):.1f}%",
                     *([] if datasheet is None else [f"{100 * achieved.value / datasheet:.1f}%"]), target_mark(mfu)])
    step_kind = "fwd + loss + bwd + fused AdamW, compiled as one function" if settings.cuda \
        else "fwd + loss + bwd + AdamW"
    peak_rows = [[f"{n} x {n}", repeats, f"{max(rates[name]) / scale:.1f}", f"{median(rates[name]) / scale:.1f}",
                  f"{100 * spread(rates[name]) / median(rates[name]):.1f}%", "**peak**" if name == best else ""]
                 for name, (n, repeats, _) in peaks.items()]
    markdown = (
        f"Peak: the best of `torch.mm` on square {str(dtype).removeprefix('torch.')} matrices of {len(peaks)} sizes, "
        f"each in every round = **{peak_metric.value / scale:.1f} {unit}** ({peaks[best][0]} x {peaks[best][0]}; "
        f"spread of its rounds {100 * peak_spread.value:.1f}% of their median).\n\n"
        + markdown_table(["size", "products per call", f"best {unit}", f"median {unit}", "spread (IQR)", ""],
                         peak_rows)
        + f"\n\nTraining: {step_kind}, {settings.precision}; MFU = achieved / peak, per round"
        + ("" if datasheet is None else f"; MFU (datasheet) = achieved / {datasheet / scale:.1f} {unit}, the card's "
           "dense bf16 datasheet peak")
        + ".\n\n"
        + markdown_table(["contender", "layers/heads/d/ffn", "vocab", "batch", "loss", "MFLOP/token", "tokens/s",
                          f"achieved {unit}", "MFU", "spread (IQR)", *([] if datasheet is None else ["MFU (datasheet)"]),
                          "target"], rows)
        + (f"\n\nLeft out (budget of {settings.budget_s:.0f} s spent): {', '.join(left_out)}." if left_out else "")
    )
    return Result(NAME, metrics, markdown, {"peak_matmul_n": peaks[best][0],
                                            "peak_sizes": [n for n, _, _ in peaks.values()], "left_out": left_out,
                                            "contenders": {k: list(v) for k, v in table.items()}})


def loss_label(settings: Settings, config: ModelConfig, tokens: int) -> str:
    """Which loss path the training path takes for this step (the one decision, `chunked_loss_pays`)."""
    chunked = chunked_loss_pays(settings.device, tokens * config.padded_vocab_size)
    return "chunked" if chunked else "plain logits + cross-entropy"
