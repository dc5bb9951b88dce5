"""Training-loop overhead: a Lightning `Trainer` fitting `LitResFormer` against a bare PyTorch loop.

Both train the same model (`tiny`, same initial weights) on the same data (`LMDataModule` train loaders of
the CPU recipe's embedded corpus), with the same optimiser maths: AdamW groups of `param_groups`, warmup +
cosine schedule, gradient clipping at 1.0. The Trainer is set up as `lit-resformer fit` sets it up for the
CPU recipe (CSV + TensorBoard loggers, logging every step, `LitResFormer`'s own callbacks such as the
ThroughputMonitor), minus checkpoint writing, validation and the progress bar, which are not loop overhead.

Interleaving inside one `fit`: a callback lets Lightning run `STEPS_PER_ROUND` steps, then runs the same
number of bare-loop steps from `on_train_batch_end`, and so on. Each Lightning segment is timed from the
end of the bare segment before it to its own last `on_train_batch_end`, so it includes everything Lightning
does per step (data fetch, hooks, logging, clipping, optimizer, scheduler). Target (`targets.py`): Lightning
>= 0.97x the bare loop's tokens/s (CPU), >= 0.95x on CUDA.

On CUDA both run the paper's 82M at 2,048 tokens on a synthetic corpus with a BPE of 8,192 (harness), compiled,
bf16 (Lightning's `bf16-mixed`, autocast in the bare loop), fused AdamW, and Lightning logs every
`GPU_LOG_EVERY` steps (a GPU run's setting: each logging step reads values to the host).
"""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path

import torch

from lit_resformer.model import ModelConfig, Transformer

from . import targets
from .harness import (
    Metric,
    Result,
    Settings,
    lm_datamodule,
    markdown_table,
    median,
    paired_ratios,
    spread,
    target_mark,
)

NAME = "loop_overhead"
BATCH, SEQ_LEN, STEPS_PER_ROUND = 16, 256, 5
QUICK = dict(d_model=32, ffn_dim=64, max_seq_len=32)
QUICK_BATCH, QUICK_SEQ_LEN, QUICK_STEPS_PER_ROUND = 2, 16, 2
GPU_PRESET, GPU_BATCH, GPU_SEQ_LEN, GPU_STEPS_PER_ROUND, GPU_LOG_EVERY = "82M", 16, 2048, 10, 10
# configs/recipes/cpu.yaml's optimiser settings
OPTIMIZER = dict(lr=2.0e-3, warmup_start_lr=1.0e-7, warmup_steps=40, final_lr_ratio=0.1, weight_decay=0.1,
                 betas=(0.9, 0.95), eps=1.0e-8)


class BareLoop:
    """The hand-written loop: same model copy, same optimiser maths, batches from its own loader."""

    def __init__(self, model: Transformer, loader, total_steps: int, settings: Settings):
        from lit_resformer.training.module import warmup_cosine

        o = OPTIMIZER
        self.model, self.loader, self.settings = model.train(), loader, settings
        self.forward = torch.compile(model) if settings.cuda else model
        self.batches = iter(loader)
        self.optimizer = torch.optim.AdamW(model.param_groups(o["weight_decay"]), lr=o["lr"], betas=o["betas"],
                                           eps=o["eps"], fused=settings.cuda)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: warmup_cosine(
            step, peak=o["lr"], start=o["warmup_start_lr"], warmup=o["warmup_steps"], total=total_steps,
            final_ratio=o["final_lr_ratio"]) / o["lr"])

    def next_batch(self) -> dict[str, torch.Tensor]:
        try:
            batch = next(self.batches)
        except StopIteration:  # a new epoch, as Lightning would start
            self.batches = iter(self.loader)
            batch = next(self.batches)
        return {k: v.to(self.settings.device, non_blocking=True) for k, v in batch.items()}

    def run(self, steps: int) -> float:
        """Seconds for `steps` training steps."""
        self.settings.sync()
        start = time.perf_counter()
        for _ in range(steps):
            batch = self.next_batch()
            self.optimizer.zero_grad(set_to_none=True)
            with self.settings.autocast():
                loss = self.forward(batch["input_ids"], labels=batch["labels"])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.schedule.step()
        self.settings.sync()
        return time.perf_counter() - start


def lightning_run(config: ModelConfig, datamodule, bare: BareLoop, steps_per_round: int, warmup: int, rounds: int,
                  settings: Settings, workdir: Path) -> dict[str, object]:
    """Fit `LitResFormer` with the bare loop interleaved; the only part that needs the lead's module."""
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from lit_resformer.training.module import LitResFormer

    class Interleave(L.Callback):
        def __init__(self):
            self.lightning_s: list[float] = []
            self.bare_s: list[float] = []
            self.batches_done = 0
            self.segment_start = 0.0
            self.fit_start = 0.0
            self.startup_s = 0.0

        def on_fit_start(self, trainer, pl_module):
            self.fit_start = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.batches_done += 1
            if self.batches_done == 1:
                self.startup_s = time.perf_counter() - self.fit_start
            counted = self.batches_done - warmup
            if counted < 0 or counted % steps_per_round:
                return
            settings.sync()
            if counted == 0:
                bare.run(warmup)  # the bare loop's warm-up, not counted
            else:
                self.lightning_s.append(time.perf_counter() - self.segment_start)
                self.bare_s.append(bare.run(steps_per_round))
            self.segment_start = time.perf_counter()

    lit = LitResFormer(config, **OPTIMIZER, compile=settings.cuda)
    bare.model.load_state_dict(lit.model.state_dict())  # the same starting weights
    interleave = Interleave()
    trainer = L.Trainer(
        accelerator=settings.device.type, devices=1, precision="bf16-mixed" if settings.cuda else "32-true",
        max_steps=warmup + rounds * steps_per_round, gradient_clip_val=1.0,
        log_every_n_steps=GPU_LOG_EVERY if settings.cuda else 1,
        logger=[CSVLogger(workdir, name="csv"), TensorBoardLogger(workdir, name="tb")],
        callbacks=[interleave], use_distributed_sampler=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
        default_root_dir=workdir,
    )
    trainer.fit(lit, datamodule=datamodule)
    return {"lightning_s": interleave.lightning_s, "bare_s": interleave.bare_s, "startup_s": interleave.startup_s}


def run(settings: Settings) -> Result:
    gpu = settings.cuda and not settings.quick
    batch, seq_len, steps_per_round = (QUICK_BATCH, QUICK_SEQ_LEN, QUICK_STEPS_PER_ROUND) if settings.quick \
        else (GPU_BATCH, GPU_SEQ_LEN, GPU_STEPS_PER_ROUND) if gpu else (BATCH, SEQ_LEN, STEPS_PER_ROUND)
    preset = GPU_PRESET if gpu else "tiny"
    warmup = max(settings.warmup, 1)
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp:
        workdir = Path(tmp)
        datamodule = lm_datamodule(settings, workdir, seq_len, batch)
        bare_data = lm_datamodule(settings, workdir, seq_len, batch)  # the same corpus and cache, its own loader
        bare_data.setup("fit")
        config = ModelConfig.preset(preset, vocab_size=bare_data.vocab_size, **(QUICK if settings.quick else {}))
        total_steps = warmup + settings.reps * steps_per_round
        bare = BareLoop(copy.deepcopy(Transformer(config)).to(settings.device), bare_data.train_dataloader(),
                        total_steps, settings)
        timings = lightning_run(config, datamodule, bare, steps_per_round, warmup, settings.reps, settings,
                                workdir)

    tokens = steps_per_round * batch * seq_len
    lightning_s, bare_s = timings["lightning_s"], timings["bare_s"]
    ratios = paired_ratios(bare_s, lightning_s)  # = Lightning tokens/s over bare tokens/s
    lightning_tps = Metric(f"{NAME}.lightning_tokens_per_s", tokens / median(lightning_s), "tokens/s", better="higher")
    bare_tps = Metric(f"{NAME}.bare_loop_tokens_per_s", tokens / median(bare_s), "tokens/s", better="higher")
    ratio = Metric(f"{NAME}.ratio", median(ratios), "x bare-loop tokens/s",
                   targets.target(f"{NAME}.ratio", settings.cuda), "higher")
    startup = Metric(f"{NAME}.fit_startup_s", timings["startup_s"], "s")
    per_step_ms = 1e3 * (median(lightning_s) - median(bare_s)) / steps_per_round
    markdown = (
        f"`ModelConfig.preset(\"{preset}\")`, vocab {config.vocab_size} (the data's tokenizer), batch {batch} x "
        f"{seq_len} tokens, {settings.precision}, "
        f"{'synthetic corpus' if settings.quick or settings.cuda else 'embedded corpus'}; {settings.reps} rounds of "
        f"{steps_per_round} Lightning steps then {steps_per_round} bare steps, inside one `Trainer.fit`.\n\n"
        + markdown_table(
            ["loop", "tokens/s", "x bare loop", "spread (IQR)", "target"],
            [["bare PyTorch loop", bare_tps.value, 1.0, "", ""],
             ["Lightning Trainer + LitResFormer", lightning_tps.value, ratio.value, spread(ratios),
              target_mark(ratio)]])
        + f"\n\nLightning's extra time per step: {per_step_ms:.2f} ms (difference of median segment times). "
        f"`Trainer.fit` start-up until the first step ends: {startup.value:.2f} s (not in the ratio)."
    )
    return Result(NAME, [lightning_tps, bare_tps, ratio, startup], markdown,
                  {"preset": preset, "batch": batch, "seq_len": seq_len, "steps_per_round": steps_per_round})
