"""CPU slots: one run with every core's thread against one one-thread run per core, side by side.

On a CPU-only machine the local executor either trains runs one after another with all cores each
(`--cpu-slots 1`, the default) or N at once with one thread each (`--cpu-slots N --threads-per-run 1`).
Which gives more tokens per second for the whole grid depends on how well a small model's kernels scale over
threads, so it is measured, not assumed. Each contender is a set of fresh training processes (this module's
`--worker` mode): `tiny` with the CPU recipe's step (micro-batch 8 x 256 tokens, fwd + bwd + AdamW), a few
warm-up steps, then `STEPS` timed steps; the slotted contender starts its N processes together and adds their
throughputs. Rounds interleave the two contenders (rotating order) and the ratio is the median of per-round
ratios, as in every benchmark here. Target: none; the table says which setting to use on this machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .harness import ROOT, Metric, Result, Settings, markdown_table, median, paired_ratios, spread

NAME = "cpu_slots"
BATCH, SEQ_LEN, WARMUP_STEPS, STEPS = 8, 256, 3, 20
QUICK_BATCH, QUICK_SEQ_LEN, QUICK_WARMUP_STEPS, QUICK_STEPS = 2, 16, 1, 2
VOCAB = 4096  # the CPU recipe's BPE
WORTH_IT = 1.05  # slots are recommended only when they beat one run by more than the machine's usual noise


def worker(batch: int, seq_len: int, warmup: int, steps: int, quick: bool) -> None:
    """One training process: print the seconds its `steps` timed steps took (threads from OMP_NUM_THREADS)."""
    import torch

    from lit_resformer.model import ModelConfig, Transformer

    from .harness import random_batch, training_step

    torch.manual_seed(0)
    sizes = dict(d_model=32, ffn_dim=64, max_seq_len=32) if quick else {}
    model = Transformer(ModelConfig.preset("tiny", vocab_size=VOCAB, **sizes)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    step = training_step(model, random_batch(VOCAB, batch, seq_len, torch.device("cpu")), Settings(), optimizer)
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    print(time.perf_counter() - start, flush=True)


def _processes(count: int, threads: int, args: list[str]) -> list[float]:
    """Start `count` workers at once with `threads` threads each; the timed seconds of each."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": ""}
    workers = [subprocess.Popen([sys.executable, "-m", "benchmarks.cpu_slots", "--worker", *args], env=env,
                                cwd=ROOT, stdout=subprocess.PIPE, text=True) for _ in range(count)]
    seconds = []
    for process in workers:
        out, _ = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"cpu_slots worker exited with {process.returncode}")
        seconds.append(float(out.strip().splitlines()[-1]))
    return seconds


def run(settings: Settings) -> Result:
    cores = os.cpu_count() or 1
    batch, seq_len, warmup, steps = ((QUICK_BATCH, QUICK_SEQ_LEN, QUICK_WARMUP_STEPS, QUICK_STEPS) if settings.quick
                                     else (BATCH, SEQ_LEN, WARMUP_STEPS, STEPS))
    args = [str(batch), str(seq_len), str(warmup), str(steps), "1" if settings.quick else "0"]
    tokens = steps * batch * seq_len
    contenders = {"one run": (1, cores), "slots": (cores, 1)}  # (processes, threads each)
    throughput: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_index in range(settings.warmup + settings.reps):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            count, threads = contenders[name]
            rate = sum(tokens / s for s in _processes(count, threads, args))
            if round_index >= settings.warmup:
                throughput[name].append(rate)

    ratios = paired_ratios(throughput["slots"], throughput["one run"])
    ratio = median(ratios)
    one, slotted = median(throughput["one run"]), median(throughput["slots"])
    metrics = [
        Metric(f"{NAME}.one_run_tokens_per_s", one, "tokens/s", better="higher"),
        Metric(f"{NAME}.slots_tokens_per_s", slotted, "tokens/s", better="higher"),
        Metric(f"{NAME}.slots_vs_one_run", ratio, "x", better="higher"),
    ]
    setting = (f"--cpu-slots {cores} --threads-per-run 1" if ratio > WORTH_IT
               else "--cpu-slots 1 (the default: one run with every core)")
    table = markdown_table(
        ["arrangement", "processes x threads", "grid tokens/s", "vs one run", "spread (IQR)"],
        [[f"one run, {cores} threads", f"1 x {cores}", one, 1.0, ""],
         [f"{cores} runs side by side", f"{cores} x 1", slotted, ratio, spread(ratios)]],
    )
    markdown = (f"`tiny`, micro-batch {batch} x {seq_len} tokens, fwd + bwd + AdamW, {steps} timed steps per process "
                f"after {warmup} warm-up steps, fresh processes every round.\n\n{table}\n\n"
                f"Use on this machine: `{setting}` (slots only when they beat one run by more than {WORTH_IT:g}x).\n")
    return Result(NAME, metrics, markdown, meta={"cores": cores, "recommended": setting})


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    batch_, seq_len_, warmup_, steps_, quick_ = sys.argv[2:7]
    worker(int(batch_), int(seq_len_), int(warmup_), int(steps_), quick_ == "1")
