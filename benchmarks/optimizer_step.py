"""Muon against AdamW: the optimizer step alone and the whole training step (fwd + loss + bwd + step), per step.

Both optimizers are the ones `LitResFormer` trains with (`model.optimizer: adamw | muon`, the same parameter groups
and learning rates): AdamW on every parameter (fused on CUDA), or `MuonWithAdamW`, torch.optim.Muon on the blocks'
hidden matrices and AdamW on the rest. The two models start from the same seed and are timed interleaved in the same
process, on the same batch; the optimizer step alone is timed on fixed gradients (one backward pass first), so it
holds exactly the work the optimizer adds. torch.optim.Muon orthogonalises each matrix's update with 5 Newton-Schulz
iterations in bf16, one matrix at a time: on a CPU without native bf16 matrix units (AVX2) that is slow, on a GPU
it is a handful of small matmuls per matrix.

CPU: `ModelConfig.preset("tiny")` at the CPU grids' step (8 x 256 tokens), fp32. CUDA: the paper's 82M at 16 x 2,048
tokens, bf16 autocast, not compiled.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from lit_resformer.model import ModelConfig
from lit_resformer.training.module import LitResFormer

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

NAME = "optimizer_step"
BATCH, SEQ_LEN = 8, 256
QUICK = dict(d_model=32, ffn_dim=64, vocab_size=128, max_seq_len=32)
QUICK_BATCH, QUICK_SEQ_LEN = 2, 16
GPU_PRESET, GPU_BATCH, GPU_SEQ_LEN = "82M", 16, 2048
OPTIMIZERS = ("adamw", "muon")
LR = 2e-3  # the CPU recipe's; the step's cost does not depend on it


def newton_schulz(grad: torch.Tensor, dtype: torch.dtype, steps: int = 5) -> torch.Tensor:
    """torch.optim.Muon's orthogonalisation (torch/optim/_muon.py `_zeropower_via_newtonschulz`: the quintic
    iteration with its default coefficients) in `dtype`: bf16 as Muon runs it, fp32 to show what the dtype costs."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = grad.to(dtype)
    tall = grad.size(0) > grad.size(1)
    x = x.T if tall else x
    x = x / x.norm().clamp(min=1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


def build(config: ModelConfig, optimizer: str, settings: Settings) -> tuple[LitResFormer, torch.optim.Optimizer]:
    """The training module on the device and the optimizer it configures (the schedule is left out: its cost is
    the same for both)."""
    torch.manual_seed(0)
    lit = LitResFormer(config, lr=LR, optimizer=optimizer).to(settings.device).train()
    lit._trainer = SimpleNamespace(max_steps=1000, precision="bf16-mixed" if settings.cuda else "32-true")
    return lit, lit.configure_optimizers()["optimizer"]


def run(settings: Settings) -> Result:
    gpu = settings.cuda and not settings.quick
    preset = GPU_PRESET if gpu else "tiny"
    config = ModelConfig.preset(preset, **(QUICK if settings.quick else {}))
    batch, seq_len = (QUICK_BATCH, QUICK_SEQ_LEN) if settings.quick else (GPU_BATCH, GPU_SEQ_LEN) if gpu \
        else (BATCH, SEQ_LEN)
    tokens = random_batch(config.vocab_size, batch, seq_len, settings.device)

    contenders, groups = {}, {}
    for name in OPTIMIZERS:
        lit, optimizer = build(config, name, settings)
        groups[name] = {key: sum(p.numel() for p in group["params"])
                        for key, group in zip(lit.group_names, optimizer.param_groups, strict=True)}
        contenders[f"{name} train step"] = training_step(lit.model, tokens, settings, optimizer)
        # the optimizer step alone, on fixed gradients of a model of its own
        alone, alone_optimizer = build(config, name, settings)
        training_step(alone.model, tokens, settings)()  # fills .grad once
        contenders[f"{name} optimizer step"] = lambda o=alone_optimizer: o.step()  # keeps the optimizer alive
        if name == "muon":  # the orthogonalisation of every Muon matrix's gradient, in Muon's bf16 and in fp32
            grads = [p.grad for p in alone_optimizer.param_groups[0]["params"]]
            for dtype in (torch.bfloat16, torch.float32):
                contenders[f"ns {dtype}"] = lambda d=dtype, g=grads: [newton_schulz(x, d) for x in g]
    times = interleaved(contenders, settings)

    metrics, rows = [], []
    for part in ("optimizer step", "train step"):
        adamw, muon = times[f"adamw {part}"], times[f"muon {part}"]
        ratios = paired_ratios(muon, adamw)
        slug = part.replace(" ", "_")
        metrics += [Metric(f"{NAME}.adamw.{slug}_ms", 1e3 * median(adamw), "ms"),
                    Metric(f"{NAME}.muon.{slug}_ms", 1e3 * median(muon), "ms"),
                    Metric(f"{NAME}.muon_vs_adamw.{slug}", median(ratios), "x AdamW time")]
        rows.append([part, 1e3 * median(adamw), 1e3 * median(muon), median(ratios), spread(ratios)])
    bf16, fp32 = times[f"ns {torch.bfloat16}"], times[f"ns {torch.float32}"]
    ns_ratios = paired_ratios(bf16, fp32)
    metrics += [Metric(f"{NAME}.newton_schulz.bf16_ms", 1e3 * median(bf16), "ms"),
                Metric(f"{NAME}.newton_schulz.fp32_ms", 1e3 * median(fp32), "ms"),
                Metric(f"{NAME}.newton_schulz.bf16_vs_fp32", median(ns_ratios), "x fp32 time")]
    muon_params = groups["muon"].get("muon", 0)
    total = sum(groups["muon"].values())
    markdown = (
        f"`ModelConfig.preset(\"{preset}\")` ({config.n_layer} layers, d={config.d_model}, vocab {config.vocab_size}), "
        f"batch {batch} x {seq_len} tokens, {settings.precision}, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}. Muon takes {muon_params:,} of the {total:,} parameters "
        f"({100 * muon_params / total:.0f}%: the blocks' attention and MLP matrices); AdamW the rest. The optimizer "
        "step alone is timed on fixed gradients; the train step is fwd + loss + bwd + optimizer step.\n\n"
        + markdown_table(["timed", "AdamW ms", "Muon + AdamW ms", "Muon / AdamW", "spread (IQR)"], rows)
        + f"\n\nWhere Muon's time goes: 5 Newton-Schulz iterations on every one of its matrices, "
        f"{1e3 * median(bf16):,.1f} ms a step in bf16 as torch.optim.Muon runs them, {1e3 * median(fp32):,.1f} ms "
        f"in fp32 ({median(ns_ratios):.1f}x, spread {spread(ns_ratios):.2f}): "
        + ("a CPU without native bf16 matrix units (AVX2) emulates bf16 matmuls."
           if not settings.cuda and torch.backends.cpu.get_cpu_capability() in ("DEFAULT", "AVX2") else
           "bf16 matmuls run natively here.")
        + "\n\nThe groups under `model.optimizer: muon` (logged as `lr/<group>`): "
        + ", ".join(f"{key} {count:,}" for key, count in groups["muon"].items()) + " parameters.\n"
    )
    return Result(NAME, metrics, markdown, {"preset": preset, "batch": batch, "seq_len": seq_len,
                                            "groups": groups})
