"""Step time (fwd + bwd) of every variant of the fig7 / fig9 / fig10 / fig13 grids relative to vanilla.

All variants are built up front with the same seed and timed interleaved on the same batch, so the ratio of
each to vanilla is taken over neighbouring measurements (see harness). Targets (`targets.py`): ResFormer <= 1.02x
and SVFormer <= 1.00x vanilla; on CUDA also cross-layer attention <= 1.2x. On CUDA the base is the paper's 82M at 2,048 tokens
(paper vocabulary), each variant compiled, bf16 autocast, built in the order of `GPU_PRIORITY` while the budget
lasts.
"""

from __future__ import annotations

import torch

from lit_resformer.model import ModelConfig, Transformer, kv_cache_bytes

from . import targets
from .harness import (
    Metric,
    Result,
    Settings,
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

NAME = "variant_overhead"
BATCH, SEQ_LEN = 8, 256  # the CPU grids' step (19 variants a round: the largest share of `make bench`)
QUICK = dict(d_model=32, ffn_dim=64, vocab_size=128, max_seq_len=32)
QUICK_BATCH, QUICK_SEQ_LEN = 2, 16
GPU_PRESET, GPU_BATCH, GPU_SEQ_LEN = "82M", 16, 2048
# The targeted variants first, then the rest of the learnable and KV-sharing families (each compile costs ~20 s).
GPU_PRIORITY = ("vanilla", "resformer", "svformer", "cross_attention", "learnable_head", "learnable_token",
                "denseformer", "svformer_gqa_half", "cla2", "gqa_half", "neutreno", "identity", "learnable_scalar")
KEEP_FOR_TIMING = 0.2
RESFORMER = {"residual": {"target": "v"}}


def variants(n_head: int) -> dict[str, tuple[str, str, dict]]:
    """slug -> (grid, label, config overrides), as the cells of configs/grids/<grid>.yaml; "extra" cells are in
    no grid but complete the KV-sharing picture. GQA cells are sized from the preset's head count."""
    half, single = n_head // 2, 1
    return {
        "vanilla": ("all", "vanilla", {}),
        "resformer": ("fig7", "ResFormer (V residual, Eq. 7)", RESFORMER),
        "denseformer": ("fig7", "DenseFormer (DWA)", {"dwa": {"enabled": True}}),
        "neutreno": ("fig7", "NeuTRENO mu=0.4", {"neutreno_lambda": 0.4}),
        "resformer_neutreno": ("fig7", "ResFormer + NeuTRENO mu=0.2", {**RESFORMER, "neutreno_lambda": 0.2}),
        "residual_q": ("fig9", "residual on Q", {"residual": {"target": "q"}}),
        "residual_k": ("fig9", "residual on K", {"residual": {"target": "k"}}),
        "identity": ("fig10", "identity mapping (Eq. 6)", {"residual": {"target": "v", "mapping": "identity"}}),
        "cross_attention": ("fig10", "cross-layer attention (Eq. 2)",
                            {"residual": {"target": "v", "mapping": "cross_attention"}}),
        "learnable_scalar": ("learnable", "ResFormer, learnable scalar", {"residual": {"target": "v", "learnable": "scalar"}}),
        "learnable_head": ("learnable", "ResFormer, learnable per head", {"residual": {"target": "v", "learnable": "head"}}),
        "learnable_token": ("learnable", "ResFormer, learnable token gate",
                            {"residual": {"target": "v", "learnable": "token"}}),
        "svformer": ("fig13", "SVFormer", {"share": {"svformer": True}}),
        "gqa_half": ("fig13", f"GQA n_kv_head={half}", {"n_kv_head": half}),
        "mqa": ("extra", f"GQA n_kv_head={single} (MQA)", {"n_kv_head": single}),
        "cla2": ("fig13", "CLA2 (share KV every 2 layers)", {"share": {"every": 2, "what": "kv"}}),
        "cla2_mqa": ("fig13", f"CLA2 + GQA n_kv_head={single}", {"n_kv_head": single, "share": {"every": 2, "what": "kv"}}),
        "svformer_gqa_half": ("extra", f"SVFormer + GQA n_kv_head={half}", {"n_kv_head": half, "share": {"svformer": True}}),
        "svformer_mqa": ("fig13", f"SVFormer + GQA n_kv_head={single}", {"n_kv_head": single, "share": {"svformer": True}}),
    }


def run(settings: Settings) -> Result:
    gpu = settings.cuda and not settings.quick
    preset = GPU_PRESET if gpu else "tiny"
    base = ModelConfig.preset(preset, **(QUICK if settings.quick else {}))
    batch, seq_len = (QUICK_BATCH, QUICK_SEQ_LEN) if settings.quick else (GPU_BATCH, GPU_SEQ_LEN) if gpu \
        else (BATCH, SEQ_LEN)
    tokens = random_batch(base.vocab_size, batch, seq_len, settings.device)
    table = variants(base.n_head)
    if gpu:
        table = {slug: table[slug] for slug in (*GPU_PRIORITY, *(s for s in table if s not in GPU_PRIORITY))}
    configs = {}

    def builder(slug: str):
        def build():
            configs[slug] = base.replace(**table[slug][2])
            torch.manual_seed(0)
            model = Transformer(configs[slug]).to(settings.device).train()
            step = training_step(model, tokens, settings, compile=settings.cuda)
            step()  # compiles on CUDA
            return step

        return build

    steps, left_out = build_within_budget({slug: builder(slug) for slug in table}, settings, KEEP_FOR_TIMING)
    times = interleaved(steps, settings)

    vanilla_kv = kv_cache_bytes(base)
    metrics, rows = [], []
    for slug, (figure, label, _) in table.items():
        if slug not in steps:
            continue
        ratios = paired_ratios(times[slug], times["vanilla"])
        step_ms = Metric(f"{NAME}.{slug}.step_ms", 1e3 * median(times[slug]), "ms")
        ratio = Metric(f"{NAME}.{slug}.ratio", median(ratios), "x vanilla step time",
                       targets.target(f"{NAME}.{slug}", settings.cuda), "lower")
        metrics += [step_ms, ratio]
        kv_fraction = kv_cache_bytes(configs[slug]) / vanilla_kv
        rows.append([figure, label, step_ms.value, ratio.value, spread(ratios), f"{kv_fraction:.3g}",
                     target_mark(ratio)])
    markdown = (
        f"`ModelConfig.preset(\"{preset}\")` ({base.n_layer} layers, {base.n_head} heads, d={base.d_model}, "
        f"vocab {base.vocab_size}), fwd + loss + bwd of batch {batch} x {seq_len} tokens, {settings.precision}.\n\n"
        + markdown_table(["grid", "variant", "step ms", "x vanilla", "spread (IQR)", "KV cache x vanilla", "target"],
                         rows)
        + (f"\n\nLeft out (budget of {settings.budget_s:.0f} s spent): {', '.join(left_out)}." if left_out else "")
    )
    return Result(NAME, metrics, markdown, {"preset": preset, "batch": batch, "seq_len": seq_len,
                                            "left_out": left_out})
