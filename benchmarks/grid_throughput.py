"""Grid throughput per card: the training tokens/s a GPU gives a grid of small runs, packed three ways, and its
model FLOP utilisation against the datasheet and the measured peak (lit_resformer.provenance).

- one run per process: `PROCESSES` training processes side by side on the card (`--runs-per-gpu`, how the transfer
  slices ran: 0.47M tokens/s for ten `tiny` runs on an H200);
- stacked: `STACK` runs in one process (lit_resformer.stacking, `--stack N`), one batched step for all;
- stacked and graphed: the same step captured as one CUDA graph (what `fit-stacked` does on CUDA).

Each process trains as the trainer does (bf16 autocast, fused or capturable AdamW, per-run clipping) on random
tokens (`benchmarks.stacked`'s workers); a round asks every process of an arrangement to train `STEPS` steps at
once and sums their tokens/s; rounds interleave the arrangements, the ratios are medians of per-round ratios. MFU =
tokens/s x the model's training FLOPs per token / peak. Goal (issue: many runs per process): `tiny` >= 5M tokens/s
per card, 10x the one-run-per-process packing; `small` >= 30% of the datasheet peak. On a CPU (`--device cpu`) it
dry-runs the plumbing at tiny sizes (no CUDA graph; no MFU without a GPU's peaks).
"""

from __future__ import annotations

import os

import torch

from lit_resformer.model import ModelConfig, Transformer
from lit_resformer.provenance import MEASURED_PEAK_ENV, measure_peak_flops, spec_peak_flops

from . import targets
from .harness import Metric, Result, Settings, markdown_table, median, paired_ratios, spread, target_mark
from .stacked import QUICK_SIZES, VOCAB, timed_rounds, workers

NAME = "grid_throughput"
SEQ_LEN = 256  # the CPU tiers' sequence, the grids' step of 8 x 256 tokens a run
BATCH = {"tiny": 8, "small": 32}  # the transfer tiers' micro-batches
PROCESSES = {"tiny": 8, "small": 4}  # one run per process: how many side by side
STACK = {"tiny": 32, "small": 8}  # runs a stacked process trains
STEPS, WARMUP_STEPS = 10, 5  # the graph is captured on the 4th step
QUICK_BATCH, QUICK_SEQ_LEN, QUICK_STEPS, QUICK_WARMUP_STEPS, QUICK_RUNS = 2, 16, 1, 1, 2


def arrangements(settings: Settings, preset: str) -> dict[str, tuple[str, int, int]]:
    """name -> (worker mode, processes, runs a process); the graph only on CUDA."""
    processes, stack = (QUICK_RUNS, QUICK_RUNS) if settings.quick else (PROCESSES[preset], STACK[preset])
    found = {"one run per process": ("solo", processes, 1), "stacked": ("stack", 1, stack)}
    if settings.cuda:
        found["stacked + graphed"] = ("graph", 1, stack)
    return found


def peaks(settings: Settings) -> dict[str, float]:
    """The peaks MFU is stated against: the datasheet's and the measured one (from the session that started this,
    else measured here), on a GPU; none on a CPU."""
    if not settings.cuda:
        return {}
    measured = float(os.environ.get(MEASURED_PEAK_ENV) or measure_peak_flops(str(settings.device)))
    spec = spec_peak_flops(torch.cuda.get_device_name(settings.device))
    return {"datasheet": spec, "measured": measured} if spec else {"measured": measured}


def run(settings: Settings) -> Result:
    presets = ("tiny",) if settings.quick or not settings.cuda else ("tiny", "small")
    steps, warmup = (QUICK_STEPS, QUICK_WARMUP_STEPS) if settings.quick else (STEPS, WARMUP_STEPS)
    seq_len = QUICK_SEQ_LEN if settings.quick else SEQ_LEN
    threads = 1 if settings.cuda else max(1, (os.cpu_count() or 1) // QUICK_RUNS)
    peak = peaks(settings)
    metrics, rows = [], []
    for preset in presets:
        batch = QUICK_BATCH if settings.quick else BATCH[preset]
        with torch.device("meta"):
            config = ModelConfig.preset(preset, vocab_size=VOCAB, **(QUICK_SIZES if settings.quick else {}))
            flops = Transformer(config).flops_per_token(seq_len)
        found = arrangements(settings, preset)
        groups = {name: (workers(preset, mode, processes, runs, threads if mode == "solo" else threads * processes,
                                 settings, batch, seq_len, warmup), runs * batch * seq_len)
                  for name, (mode, processes, runs) in found.items()}
        try:
            rates = timed_rounds(groups, settings, steps)
        finally:
            for group, _ in groups.values():
                group.close()
        baseline = rates["one run per process"]
        for name, (mode, processes, runs) in found.items():
            key = f"{NAME}.{preset}.{mode}"
            tokens = median(rates[name])
            ratios = paired_ratios(rates[name], baseline)
            metrics.append(Metric(f"{key}_tokens_per_s", tokens, "tokens/s",
                                  target=targets.target(f"{key}_tokens_per_s", settings.cuda), better="higher"))
            mfu = {kind: tokens * flops / value for kind, value in peak.items()}
            metrics += [Metric(f"{key}_mfu_{kind}", value, "fraction",
                               target=targets.target(f"{key}_mfu_{kind}", settings.cuda), better="higher")
                        for kind, value in mfu.items()]
            if mode != "solo":
                metrics.append(Metric(f"{key}_vs_one_run_per_process", median(ratios), "x", better="higher"))
            marks = ", ".join(mark for m in metrics if m.metric.startswith(key) and (mark := target_mark(m)))
            rows.append([preset, name, f"{processes} x {runs}", tokens, spread(rates[name]),
                         median(ratios), spread(ratios), *[mfu.get(kind, "") for kind in ("datasheet", "measured")],
                         marks])
    table = markdown_table(["model", "packing", "processes x runs", "tokens/s per card", "spread (IQR)",
                            "vs one run per process", "spread (IQR)", "MFU (datasheet)", "MFU (measured)", "target"],
                           rows)
    peak_note = ", ".join(f"{kind} {value / 1e12:.0f} TFLOP/s" for kind, value in peak.items()) or "none (no GPU)"
    markdown = (f"Random tokens, {seq_len} a sequence, micro-batches of the transfer tiers; bf16 autocast on CUDA; "
                f"{warmup} warm-up steps a process, {steps} timed steps a round. Peaks: {peak_note}.\n\n{table}\n")
    return Result(NAME, metrics, markdown, meta={"peaks": peak, "steps_per_round": steps})
