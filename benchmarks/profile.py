"""Where the time of a training step goes: torch.profiler over vanilla, ResFormer and SVFormer (`tiny`).

After warm-up, the variants take turns (rotating order), one profiled fwd + bwd step each per round, for
`PROFILE_ROUNDS` rounds; an operator's time is the median over rounds of its self time in one step, which
keeps a burst of load on a shared machine out of the table. Profiler overhead inflates cheap operators, so
read it for where time goes and what a variant adds, not for absolute step times (variant_overhead has
those).
"""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from lit_resformer.model import ModelConfig, Transformer

from .harness import Metric, Result, Settings, markdown_table, median, random_batch, training_step

NAME = "profile"
VARIANTS = {"vanilla": {}, "resformer": {"residual": {"target": "v"}}, "svformer": {"share": {"svformer": True}}}
BATCH, SEQ_LEN, PROFILE_ROUNDS, TOP = 16, 256, 7, 15
QUICK = dict(d_model=32, ffn_dim=64, vocab_size=128, max_seq_len=32)
QUICK_BATCH, QUICK_SEQ_LEN, QUICK_PROFILE_ROUNDS = 2, 16, 1


def self_ms(settings: Settings, step) -> dict[str, float]:
    """Self time (ms) of every operator in one profiled call of `step`."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if settings.cuda else [])
    with profile(activities=activities) as prof:
        step()
        settings.sync()
    return {e.key: (e.self_device_time_total if settings.cuda else e.self_cpu_time_total) / 1e3
            for e in prof.key_averages()}


def run(settings: Settings) -> Result:
    base = ModelConfig.preset("tiny", **(QUICK if settings.quick else {}))
    batch, seq_len, steps = (QUICK_BATCH, QUICK_SEQ_LEN, QUICK_PROFILE_ROUNDS) if settings.quick \
        else (BATCH, SEQ_LEN, PROFILE_ROUNDS)
    tokens = random_batch(base.vocab_size, batch, seq_len, settings.device)
    training_steps = {}
    for slug, overrides in VARIANTS.items():
        torch.manual_seed(0)
        model = Transformer(base.replace(**overrides)).to(settings.device).train()
        training_steps[slug] = training_step(model, tokens, settings)
        for _ in range(settings.warmup):
            training_steps[slug]()
    samples: dict[str, list[dict[str, float]]] = {slug: [] for slug in VARIANTS}
    names = list(VARIANTS)
    for round_index in range(steps):
        shift = round_index % len(names)
        for slug in names[shift:] + names[:shift]:
            samples[slug].append(self_ms(settings, training_steps[slug]))
    per_variant = {
        slug: {op: median([s.get(op, 0.0) for s in runs]) for op in {op for s in runs for op in s}}
        for slug, runs in samples.items()
    }

    totals = {slug: median([sum(s.values()) for s in runs]) for slug, runs in samples.items()}
    ranked = sorted({op for ops in per_variant.values() for op in ops},
                    key=lambda op: -max(ops.get(op, 0.0) for ops in per_variant.values()))[:TOP]
    metrics = [Metric(f"{NAME}.{slug}.profiled_step_ms", totals[slug], "ms") for slug in VARIANTS]
    rows = []
    for op in ranked:
        cells = [per_variant[slug].get(op, 0.0) for slug in VARIANTS]
        metrics += [Metric(f"{NAME}.{slug}.{op}", ms, "ms/step (self)") for slug, ms in zip(VARIANTS, cells, strict=True)]
        rows.append([f"`{op}`", *(f"{ms:.2f}" for ms in cells),
                     *(f"{ms - cells[0]:+.2f}" for ms in cells[1:])])
    rows.append(["**all operators**", *(f"{totals[s]:.1f}" for s in VARIANTS),
                 *(f"{totals[s] - totals['vanilla']:+.1f}" for s in list(VARIANTS)[1:])])
    unit = "device" if settings.cuda else "CPU"
    markdown = (
        f"`tiny` fwd + bwd, batch {batch} x {seq_len}, {steps} profiled rounds after {settings.warmup} warm-up; "
        f"median self {unit} ms per step of the {TOP} costliest operators.\n\n"
        + markdown_table(["operator", *VARIANTS, *(f"{s} - vanilla" for s in list(VARIANTS)[1:])], rows)
    )
    return Result(NAME, metrics, markdown, {"preset": "tiny", "batch": batch, "seq_len": seq_len,
                                            "profiled_rounds": steps})
