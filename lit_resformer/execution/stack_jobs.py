"""The grid runner's side of stacking: which runs of a grid call train together, and one stack as one job.

`pack` turns the runs a call trains into stacks: runs whose resolved configs have equal stack keys
(lit_resformer.stacking.rules) and whose checkpoints are at the same step, at most `size` to a stack. A run the stacked
loop does not support (rules.stack_problem), one alone in its group and one with only post-training steps left stay
jobs of their own, trained by `fit` as before. The size is the grid's `--stack` setting: an integer, or `auto`: one
run a process on a CPU (one run per core slot, as without stacking), and on a GPU as many as its memory holds
(`auto_size`, from `run_memory_bytes`).

A `StackJob` trains its runs with one `lit-resformer fit-stacked` process (execution.jobs.train_in_one_process, as a
solo run is trained), each run locked, summarised and given its post-training steps as a solo run is; each run's
summary notes that it trained stacked and with which runs.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lit_resformer.execution.jobs import (
    BUSY,
    RunJob,
    execute,
    lock_with_wait,
    post_train,
    train_in_one_process,
)
from lit_resformer.provenance import RUNS_SHARING_ENV
from lit_resformer.runs.checkpoint_reading import read_checkpoint
from lit_resformer.runs.run_dir import FINISHED, RunBusy, RunDir
from lit_resformer.stacking.rules import stack_key, stack_problem

STACKED_COMMAND = "fit-stacked"
# `--stack auto` on a GPU: the share of the card's memory the stacked runs may plan to fill (the rest: the CUDA
# context, the allocator's fragmentation, the error of run_memory_bytes), and the most runs one stack takes (an
# untested guess, to be measured on the first lent GPU: beyond it the runs' kernels are large already).
MEMORY_SHARE = 0.7
MAX_AUTO_STACK = 64


class StackSettingError(ValueError):
    """A `--stack` setting the runs cannot train with; the grid runner reports it as the grid's error."""


@dataclass
class StackJob:
    """Runs of one grid trained together by one `lit-resformer fit-stacked` process."""

    members: list[RunJob]
    command: list[str]  # the stacked training command, before its `--run CONFIG RUN_DIR` pairs

    @property
    def name(self) -> str:
        return f"stack of {len(self.members)}: " + ", ".join(member.name for member in self.members)


def stacked_command(train_command: Sequence[str]) -> list[str]:
    """The stacked training command of a grid's training command (`... fit` -> `... fit-stacked`)."""
    if not train_command or train_command[-1] != "fit":
        raise StackSettingError(f"--stack needs a training command that ends in `fit` (lit-resformer fit), not "
                                f"{' '.join(train_command)!r}")
    return [*train_command[:-1], STACKED_COMMAND]


def run_memory_bytes(resolved: dict) -> float:
    """What one run holds on its device while it trains, estimated from its resolved config: 16 bytes a parameter
    (fp32 weights and gradients, AdamW's two moments), the activations a backward pass keeps (per token and layer the
    block's inputs, projections and MLP hidden states, 12 d_model + 4 ffn_dim values, in the autocast dtype) and the
    head's logits (three fp32 copies: logits, log-probabilities, their gradient; the vocabulary is the BPE's or, for a
    fixed tokenizer, 50,304)."""
    import torch

    from lit_resformer.model import ModelConfig, Transformer

    data = resolved.get("data") or {}
    vocab = data.get("bpe_vocab_size") if data.get("tokenizer") == "bpe" else 50_304
    config = ModelConfig(**{**resolved["model"]["config"], "vocab_size": vocab})
    with torch.device("meta"):
        params = sum(p.numel() for p in Transformer(config).parameters())
    tokens = data["micro_batch_size"] * data["seq_len"]
    width = 2 if str((resolved.get("trainer") or {}).get("precision")) == "bf16-mixed" else 4
    activations = config.n_layer * tokens * (12 * config.d_model + 4 * config.ffn_dim) * width
    return 16.0 * params + activations + 3 * 4.0 * tokens * config.padded_vocab_size


def auto_size(resolved: dict, gpu_memory: float | None) -> int:
    """`--stack auto`: on a CPU (no GPU memory) one run a stack; on a GPU as many runs as MEMORY_SHARE of its memory
    holds, at most MAX_AUTO_STACK."""
    if gpu_memory is None:
        return 1
    return max(1, min(MAX_AUTO_STACK, int(MEMORY_SHARE * gpu_memory // run_memory_bytes(resolved))))


def check_stack_setting(stack: int | str) -> None:
    if stack != "auto" and (isinstance(stack, bool) or not isinstance(stack, int) or stack < 1):
        raise StackSettingError(f"--stack {stack!r} is not allowed: an integer >= 1 (runs a process) or 'auto'")


def gpu_memory_per_process(pool) -> float | None:
    """The device memory one of the local pool's processes may use: a GPU's, shared by the runs of its slots; None on
    a CPU pool."""
    if not pool.slots[0].get("CUDA_VISIBLE_DEVICES"):
        return None
    import torch

    sharing = int(pool.slots[0].get(RUNS_SHARING_ENV, 1))
    return torch.cuda.get_device_properties(0).total_memory / sharing


def pack(jobs: list[RunJob], resolve: Callable[[RunJob], dict | None], stack: int | str, executor: str,
         pool) -> list[RunJob | StackJob]:
    """The jobs with those that may train together grouped into StackJobs (see the module); unchanged for `--stack 1`
    and for `--stack auto` on a CPU."""
    check_stack_setting(stack)
    if stack == 1:
        return jobs
    if executor != "local":
        raise StackSettingError(f"--stack {stack} needs the local executor (a Slurm job trains one run)")
    gpu_memory = gpu_memory_per_process(pool)
    if stack == "auto" and gpu_memory is None:
        return jobs
    groups: dict[tuple[str, int], list[tuple[RunJob, dict]]] = {}
    packed: list[RunJob | StackJob] = []
    for job in jobs:
        resolved = resolve(job) if job.train else None
        if resolved is None or stack_problem(resolved) is not None:
            packed.append(job)
            continue
        groups.setdefault((stack_key(resolved), _checkpoint_step(RunDir(job.run_dir))), []).append((job, resolved))
    for members in groups.values():
        size = auto_size(members[0][1], gpu_memory) if stack == "auto" else stack
        for start in range(0, len(members), size):
            chunk = [job for job, _ in members[start:start + size]]
            packed.append(chunk[0] if len(chunk) == 1 else StackJob(chunk, stacked_command(chunk[0].command)))
    return packed


def describe(jobs: Sequence[RunJob | StackJob]) -> str:
    """How the jobs are packed, for the runner's listing ("" when nothing is stacked)."""
    stacks = [job for job in jobs if isinstance(job, StackJob)]
    if not stacks:
        return ""
    sizes = "/".join(str(len(s.members)) for s in stacks)
    return f"; stacked: {sum(len(s.members) for s in stacks)} run(s) in {len(stacks)} stack(s) of {sizes}"


def _checkpoint_step(run: RunDir) -> int:
    """The optimizer step a run resumes from (0 for one that starts; -1 for one whose checkpoints cannot be read:
    `fit` alone says why)."""
    try:
        point = run.resume_point()
        return int(read_checkpoint(point.path, mmap=True)["global_step"]) if point else 0
    except (ValueError, KeyError):
        return -1


def execute_stack(job: StackJob, env: dict[str, str] | None = None, lock_wait_s: float = 60.0,
                  stop: threading.Event | None = None) -> list[tuple[RunJob, dict]]:
    """Train the stack's runs in one process and return each run's summary (also in its summary.json), after the
    post-training steps of those done. A run another process works in is left to it (status busy), as `execute`
    leaves it; the others train."""
    env = {**os.environ, **(env or {})}
    outcomes: dict[str, dict] = {}
    with contextlib.ExitStack() as locks:
        members = []
        for member in job.members:
            run = RunDir(member.run_dir)
            try:
                fd = locks.enter_context(lock_with_wait(run, lock_wait_s))
            except RunBusy as busy:
                outcomes[member.name] = {"status": BUSY, "error": str(busy)}
                continue
            members.append((member, run, run.read_summary() or {}, fd))
        training = [(member, run, summary) for member, run, summary, _ in members
                    if summary.get("status") not in FINISHED]
        if training:
            command = list(job.command)
            for _, run, _ in training:
                command += ["--run", str(run.experiment_file), str(run.path)]
            if any(run.has_checkpoint() or run.has_training_output() for _, run, _ in training):
                command += ["--ckpt_path", "last"]
            if env.get("CUDA_VISIBLE_DEVICES"):  # every run of the stack shares the GPU: its MFU is a share of the card's
                env[RUNS_SHARING_ENV] = str(len(training) * int(env.get(RUNS_SHARING_ENV, 1)))  # (reports/budget.py)
            note = {"stacked": {"runs": len(training), "with": [member.name for member, _, _ in training]}}
            summaries = train_in_one_process(training, command, env, tuple(fd for *_, fd in members), stop, note)
            outcomes.update((member.name, summary) for (member, _, _), summary in zip(training, summaries, strict=True))
        for member, run, summary, _ in members:
            summary = outcomes.get(member.name, summary)
            if summary.get("status") == "done":
                for kind in member.post_training:
                    summary = post_train(kind, run, summary, env)
            outcomes[member.name] = summary
    return [(member, outcomes[member.name]) for member in job.members]


def execute_job(job: RunJob | StackJob, env: dict[str, str] | None = None,
                stop: threading.Event | None = None) -> list[tuple[RunJob, dict]]:
    """Run a job of either kind; every run it trained with its summary."""
    return execute_stack(job, env, stop=stop) if isinstance(job, StackJob) else [(job, execute(job, env, stop=stop))]


def stacked_runs(job: RunJob | StackJob) -> list[RunJob]:
    """The runs a job trains."""
    return job.members if isinstance(job, StackJob) else [job]
