"""CPU slots: the grid's training tokens/s with one one-thread run per core, and against one run with every core.

On a CPU-only machine the local executor either trains runs one after another with all cores each
(`--cpu-slots 1`) or N at once with one thread each (`--cpu-slots N --threads-per-run 1`, the Makefile's
default on this project's machine). Which gives more tokens per second for the whole grid depends on how well a
small model's kernels scale over threads, so it is measured, not assumed; and the slotted tokens/s of `tiny` and
`mini` is the figure the grids' CPU budgets are written from.

Each run is a training process of its own (this module's `--worker` mode), started once and kept: it builds its
model (vocabulary of the CPU recipe's BPE, the grids' step of 8 x 256 tokens, fwd + loss + bwd + AdamW, on the
training path's own loss), takes `WARMUP_STEPS` uncounted steps, then on every request from this process
trains the given number of steps and reports their seconds. A slotted contender asks its N processes at once and
adds their throughputs. Rounds interleave the contenders (rotating order); the slots-versus-one-run ratio is
the median of per-round ratios, as in every benchmark here. Target: none; the table says which setting to use.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .harness import ROOT, Metric, Result, Settings, markdown_table, median, paired_ratios, spread

NAME = "cpu_slots"
BATCH, SEQ_LEN, WARMUP_STEPS = 8, 256, 3
# steps per round: 1 to 3 s of each contender, so drifts of the machine's load pair up within a round
STEPS = {"tiny": 3, "mini": 1}
QUICK_BATCH, QUICK_SEQ_LEN, QUICK_WARMUP_STEPS, QUICK_STEPS = 2, 16, 1, 1
VOCAB = 4096  # the CPU recipe's BPE
WORTH_IT = 1.05  # slots are recommended only when they beat one run by more than the machine's usual noise


def worker(preset: str, batch: int, seq_len: int, warmup: int, quick: bool) -> None:
    """One training process: for every step count read from stdin, train that many steps and print their
    seconds (threads from OMP_NUM_THREADS)."""
    import torch

    from lit_resformer.model import ModelConfig, Transformer

    from .harness import random_batch, training_step

    torch.manual_seed(0)
    sizes = dict(d_model=32, ffn_dim=64, max_seq_len=32) if quick else {}
    model = Transformer(ModelConfig.preset(preset, vocab_size=VOCAB, **sizes)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    serve(training_step(model, random_batch(VOCAB, batch, seq_len, torch.device("cpu")), Settings(), optimizer), warmup)


def serve(step, warmup: int, sync=lambda: None) -> None:
    """A worker's side of `Runs`: `warmup` steps, "ready", then for every step count read from stdin that many steps
    and their seconds (`sync` waits for the device before the clock is read)."""
    for _ in range(warmup):
        step()
    sync()
    print("ready", flush=True)
    for line in sys.stdin:
        start = time.perf_counter()
        for _ in range(int(line)):
            step()
        sync()
        print(time.perf_counter() - start, flush=True)


class Runs:
    """`count` worker processes of `preset` with `threads` threads each, trained together on request. A worker is
    `python -m <module> --worker <preset> <args>` (this module's, or another benchmark's with the same protocol:
    "ready" once built, then for every step count read, its seconds); on the CPU unless `gpu`."""

    def __init__(self, preset: str, count: int, threads: int, args: list[str], module: str = "benchmarks.cpu_slots",
                 gpu: bool = False):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               **({} if gpu else {"CUDA_VISIBLE_DEVICES": ""})}
        self.processes = [subprocess.Popen([sys.executable, "-m", module, "--worker", preset, *args],
                                           env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                          for _ in range(count)]

    def _read(self, process: subprocess.Popen) -> str:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"cpu_slots worker exited with {process.wait()}")
        return line.strip()

    def wait_ready(self) -> None:
        for process in self.processes:
            self._read(process)

    def train(self, steps: int, tokens_per_step: int) -> float:
        """All processes train `steps` steps at once; the sum of their tokens/s (`tokens_per_step`: each process's)."""
        for process in self.processes:
            process.stdin.write(f"{steps}\n")
            process.stdin.flush()
        return sum(steps * tokens_per_step / float(self._read(process)) for process in self.processes)

    def close(self) -> None:
        for process in self.processes:
            process.stdin.close()
            process.wait()


def run(settings: Settings) -> Result:
    cores = os.cpu_count() or 1
    batch, seq_len, warmup = ((QUICK_BATCH, QUICK_SEQ_LEN, QUICK_WARMUP_STEPS) if settings.quick
                              else (BATCH, SEQ_LEN, WARMUP_STEPS))
    args = [str(batch), str(seq_len), str(warmup), "1" if settings.quick else "0"]
    # name -> (preset, processes, threads each)
    contenders = {"tiny, one run": ("tiny", 1, cores), "tiny, slots": ("tiny", cores, 1),
                  "mini, slots": ("mini", cores, 1)}
    runs = {name: Runs(preset, count, threads, args) for name, (preset, count, threads) in contenders.items()}
    throughput: dict[str, list[float]] = {name: [] for name in contenders}
    try:
        for group in runs.values():
            group.wait_ready()
        names = list(contenders)
        for round_index in range(settings.warmup + settings.reps):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                preset = contenders[name][0]
                rate = runs[name].train(QUICK_STEPS if settings.quick else STEPS[preset], batch * seq_len)
                if round_index >= settings.warmup:
                    throughput[name].append(rate)
    finally:
        for group in runs.values():
            group.close()

    ratios = paired_ratios(throughput["tiny, slots"], throughput["tiny, one run"])
    ratio = median(ratios)
    one, slotted, mini = (median(throughput[name]) for name in contenders)
    metrics = [
        Metric(f"{NAME}.one_run_tokens_per_s", one, "tokens/s", better="higher"),
        Metric(f"{NAME}.slots_tokens_per_s", slotted, "tokens/s", better="higher"),
        Metric(f"{NAME}.slots_vs_one_run", ratio, "x", better="higher"),
        Metric(f"{NAME}.mini_slots_tokens_per_s", mini, "tokens/s", better="higher"),
    ]
    setting = (f"--cpu-slots {cores} --threads-per-run 1" if ratio > WORTH_IT
               else "--cpu-slots 1 (one run with every core)")
    table = markdown_table(
        ["model", "arrangement", "processes x threads", "grid tokens/s", "spread (IQR)", "vs one run",
         "spread (IQR)"],
        [["tiny", f"one run, {cores} threads", f"1 x {cores}", one, spread(throughput["tiny, one run"]), 1.0, ""],
         ["tiny", f"{cores} runs side by side", f"{cores} x 1", slotted, spread(throughput["tiny, slots"]), ratio,
          spread(ratios)],
         ["mini", f"{cores} runs side by side", f"{cores} x 1", mini, spread(throughput["mini, slots"]), "", ""]],
    )
    steps = ", ".join(f"{preset} {QUICK_STEPS if settings.quick else n}" for preset, n in STEPS.items())
    markdown = (f"Vocabulary {VOCAB}, micro-batch {batch} x {seq_len} tokens, fwd + loss + bwd + AdamW; long-lived "
                f"training processes, {warmup} warm-up steps each, then per round {steps} timed steps per "
                f"process.\n\n{table}\n\n"
                f"Use on this machine: `{setting}` (slots only when they beat one run by more than {WORTH_IT:g}x). "
                "The slotted tokens/s of `tiny` and `mini` are what the grids' CPU budgets are written from.\n")
    return Result(NAME, metrics, markdown, meta={"cores": cores, "recommended": setting, "steps_per_round": STEPS})


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    preset_, batch_, seq_len_, warmup_, quick_ = sys.argv[2:7]
    worker(preset_, int(batch_), int(seq_len_), int(warmup_), quick_ == "1")
