"""Stacked runs on the CPU: the training tokens/s of two runs stacked into one process (lit_resformer.stacking, the
process given both cores) against the same two runs as two processes side by side (one core each: the grid's CPU
default, one run per core slot).

A CPU gains nothing from stacking (no kernel-launch cost to save, and one core per run already keeps both busy); the
table shows what stacking costs there, which should be nothing: target >= 1.0. Each contender is long-lived worker
processes (cpu_slots.Runs, with this module's `--worker`), each step what the trainer takes: fwd + loss + bwd, the
gradients clipped (per run) and AdamW, on the `tiny` preset at the grids' step of 8 x 256 tokens. Rounds interleave
the contenders (rotating order); the ratio is the median of per-round ratios, its spread their IQR. The same worker
serves the GPU benchmark `grid_throughput` (stacked, and stacked as one CUDA graph).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

from . import targets
from .cpu_slots import Runs, serve
from .harness import Metric, Result, Settings, markdown_table, median, paired_ratios, spread, target_mark

NAME = "stacked"
BATCH, SEQ_LEN, WARMUP_STEPS, STEPS = 8, 256, 2, 2
QUICK_BATCH, QUICK_SEQ_LEN, QUICK_WARMUP_STEPS, QUICK_STEPS = 2, 16, 1, 1
QUICK_SIZES = dict(d_model=32, ffn_dim=64, max_seq_len=32)
VOCAB = 4096  # the CPU recipe's BPE
CLIP = 1.0  # the recipes' gradient clipping
MODES = ("solo", "stack", "graph")


def build_step(mode: str, preset: str, runs: int, batch: int, seq_len: int, device: str,
               quick: bool) -> Callable[[], object]:
    """The training step a worker times. `solo`: one run alone as `fit` takes it (fwd + loss + bwd, clip_grad_norm_,
    AdamW; bf16 autocast and fused AdamW on CUDA). `stack`: `runs` runs stacked, `RunStack.train_step` as the
    stacked trainer takes it. `graph`: the same captured as one CUDA graph (capturable AdamW)."""
    import torch

    from lit_resformer.model import ModelConfig, Transformer
    from lit_resformer.stacking.engine import GraphedStep, RunStack

    from .harness import random_batch

    if mode not in MODES:
        raise ValueError(f"mode {mode!r}; allowed: {list(MODES)}")
    torch.manual_seed(0)
    cuda = device == "cuda"
    dtype = torch.bfloat16 if cuda else None
    config = ModelConfig.preset(preset, vocab_size=VOCAB, **(QUICK_SIZES if quick else {}))
    models = [Transformer(config).to(device).train() for _ in range(runs)]
    tokens = torch.stack([random_batch(VOCAB, batch, seq_len, torch.device(device), seed=i) for i in range(runs)])
    inputs, labels = tokens[..., :-1], tokens[..., 1:]

    def adamw(model, graph=False):
        return torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-4, device=device) if graph else 1e-4,
                                 betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=cuda, capturable=graph)

    if mode == "solo":
        model, optimizer = models[0], adamw(models[0])

        def solo() -> None:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
                loss = model(inputs[0], labels=labels[0])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()

        return solo
    stack = RunStack(models)
    step = functools.partial(stack.train_step, max_norms=torch.full((runs,), CLIP, device=device),
                             optimizers=[adamw(m, mode == "graph") for m in models], autocast_dtype=dtype)
    if mode == "graph":
        step = GraphedStep(step)
    return lambda: step(inputs, labels)


def worker(preset: str, mode: str, runs: int, batch: int, seq_len: int, warmup: int, quick: bool, device: str) -> None:
    """One training process: for every step count read from stdin, train that many steps and print their seconds."""
    import torch

    serve(build_step(mode, preset, runs, batch, seq_len, device, quick), warmup,
          torch.cuda.synchronize if device == "cuda" else (lambda: None))


def workers(preset: str, mode: str, processes: int, runs: int, threads: int, settings: Settings, batch: int,
            seq_len: int, warmup: int) -> Runs:
    """`processes` workers of `runs` runs each (`mode`), `threads` threads each, on the benchmark's device."""
    args = [mode, str(runs), str(batch), str(seq_len), str(warmup), "1" if settings.quick else "0",
            settings.device.type]
    return Runs(preset, processes, threads, args, module="benchmarks.stacked", gpu=settings.cuda)


def timed_rounds(groups: dict[str, tuple[Runs, int]], settings: Settings, steps: int) -> dict[str, list[float]]:
    """Tokens/s of every group (its processes together) per round, rounds interleaved with a rotating order;
    `groups`: name -> (workers, tokens a process trains a step)."""
    for runs, _ in groups.values():
        runs.wait_ready()
    names = list(groups)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(settings.warmup + settings.reps):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            runs, tokens = groups[name]
            rate = runs.train(steps, tokens)
            if round_index >= settings.warmup:
                rates[name].append(rate)
    return rates


def run(settings: Settings) -> Result:
    cores = os.cpu_count() or 1
    batch, seq_len, warmup, steps = ((QUICK_BATCH, QUICK_SEQ_LEN, QUICK_WARMUP_STEPS, QUICK_STEPS) if settings.quick
                                     else (BATCH, SEQ_LEN, WARMUP_STEPS, STEPS))
    per_run = batch * seq_len
    threads = max(1, cores // 2)
    groups = {"two processes": (workers("tiny", "solo", 2, 1, threads, settings, batch, seq_len, warmup), per_run),
              "2-stack": (workers("tiny", "stack", 1, 2, 2 * threads, settings, batch, seq_len, warmup), 2 * per_run)}
    try:
        rates = timed_rounds(groups, settings, steps)
    finally:
        for runs, _ in groups.values():
            runs.close()
    ratios = paired_ratios(rates["2-stack"], rates["two processes"])
    ratio = median(ratios)
    key = f"{NAME}.vs_processes"
    metrics = [
        Metric(f"{NAME}.processes_tokens_per_s", median(rates["two processes"]), "tokens/s", better="higher"),
        Metric(f"{NAME}.stack_tokens_per_s", median(rates["2-stack"]), "tokens/s", better="higher"),
        Metric(key, ratio, "x", target=targets.target(key, False), better="higher"),
    ]
    table = markdown_table(
        ["arrangement", "processes x runs x threads", "tokens/s (both runs)", "spread (IQR)", "vs two processes",
         "spread (IQR)", "target"],
        [["two processes side by side", f"2 x 1 x {threads}", metrics[0].value, spread(rates["two processes"]), 1.0,
          "", ""],
         ["2-stack, one process", f"1 x 2 x {2 * threads}", metrics[1].value, spread(rates["2-stack"]), ratio,
          spread(ratios), target_mark(metrics[2])]],
    )
    markdown = (f"`tiny`, vocabulary {VOCAB}, {batch} x {seq_len} tokens a run a step, fwd + loss + bwd + per-run "
                f"clipping + AdamW; long-lived processes, {warmup} warm-up steps each, then {steps} timed steps a "
                f"round.\n\n{table}\n\nOn a CPU the grid keeps one run per core slot (`--stack 1`, the default): "
                "stacking is for GPUs (`--stack auto`), where it saves the host's per-kernel cost.\n")
    return Result(NAME, metrics, markdown, meta={"cores": cores, "steps_per_round": steps})


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    preset_, mode_, runs_, batch_, seq_len_, warmup_, quick_, device_ = sys.argv[2:10]
    worker(preset_, mode_, int(runs_), int(batch_), int(seq_len_), int(warmup_), quick_ == "1", device_)
