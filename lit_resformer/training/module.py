"""LightningModule: loss, AdamW groups, warmup + cosine schedule, per-step and per-domain logging (paper §4.1.1)."""

from __future__ import annotations

import math
import time

import lightning as L
import torch
import torchmetrics
from lightning.pytorch.callbacks import RichProgressBar, ThroughputMonitor, TQDMProgressBar
from lightning.pytorch.trainer.states import RunningStage, TrainerFn
from lightning.pytorch.utilities import rank_zero_only

from lit_resformer.model import ModelConfig, Transformer
from lit_resformer.training.run_dir import RunDir

# Rates of the throughput monitor span at least this many optimizer steps.
THROUGHPUT_WINDOW_STEPS = 10
# Count models of the training split whose validation loss every run logs as a reference (`<name>_val_losses`
# of the datamodule), from the weakest up.
REFERENCE_MODELS = ("unigram", "bigram")


class TrainingThroughput(ThroughputMonitor):
    """Lightning's ThroughputMonitor, synchronising the device only when logs are written; training logged only.

    The parent synchronises the device after every batch so that its clock is right, which stalls the host once
    per micro-batch. Here batches and tokens are counted on the host (their shapes need no device), and the
    device is synchronised and the clock read only when Lightning writes logs and when validation starts and
    ends, so validation time still stays out of the training rate. Validation rates are not logged: they are
    counted against validation batches, which would interleave with optimizer steps in the step-indexed logs.
    """

    def setup(self, trainer, pl_module, stage: str) -> None:
        self.kwargs["window_size"] = max(2, math.ceil(THROUGHPUT_WINDOW_STEPS / max(trainer.log_every_n_steps, 1)))
        self._unrecorded: dict[RunningStage, int] = {}  # batches counted since the clock was last read
        super().setup(trainer, pl_module, stage)

    def _start(self, trainer) -> None:
        self._unrecorded[trainer.state.stage] = 0
        super()._start(trainer)

    def _update(self, trainer, pl_module, batch, iter_num: int) -> None:
        stage = trainer.state.stage
        self._unrecorded[stage] = self._unrecorded.get(stage, 0) + 1
        self._samples[stage] += self.batch_size_fn(batch)
        self._lengths[stage] += self.length_fn(batch)

    def _record(self, trainer, pl_module, stage: RunningStage) -> None:
        """One device synchronise, then the time and totals of everything counted so far."""
        batches = self._unrecorded.get(stage, 0)
        if not batches:
            return
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()
        self._unrecorded[stage] = 0
        self._batches[stage] += batches
        self._throughputs[stage].update(
            time=time.perf_counter() - self._t0s[stage], batches=self._batches[stage], samples=self._samples[stage],
            lengths=self._lengths[stage], flops=pl_module.flops_per_batch * batches)

    def _compute(self, trainer, iter_num=None) -> None:
        if trainer.state.stage == RunningStage.TRAINING and trainer._logger_connector.should_update_logs:
            self._record(trainer, trainer.lightning_module, RunningStage.TRAINING)
            super()._compute(trainer, iter_num)

    @rank_zero_only
    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking and trainer.state.fn == TrainerFn.FITTING:
            self._record(trainer, pl_module, RunningStage.TRAINING)  # the training time ends here
        super().on_validation_start(trainer, pl_module)

    @rank_zero_only
    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._record(trainer, pl_module, RunningStage.VALIDATING)
        super().on_validation_end(trainer, pl_module)


class _TrainingBar:
    """What the project's progress bars change in Lightning's: they count optimizer steps, refresh when the logs are
    written, and show the training loss.

    - Steps: a run bounded by `trainer.max_steps` shows `step/max_steps`. Lightning's bar counts the batches of the
      current epoch against the steps still to train, which disagree after a resume (the batch index goes on from
      the checkpoint: `30/9`) and under gradient accumulation (several batches a step).
    - Refresh: every `interval` training batches (the logging interval), so the bar costs nothing between logs.
    - Loss: not logged with `prog_bar=True`, since Lightning converts such values to Python numbers after every
      batch, a device synchronise each time; the bar reads it instead, once per refresh.
    """

    def __init__(self, interval: int):
        super().__init__()
        self.interval = interval

    def _counts_steps(self) -> bool:
        return self.trainer.max_epochs == -1 and self.trainer.max_steps > 0

    @property
    def total_train_batches(self) -> int | float:
        return self.trainer.max_steps if self._counts_steps() else super().total_train_batches

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if trainer.fit_loop.restarted_mid_epoch:  # Lightning then skips the epoch start, where bars get their total
            self.on_train_epoch_start(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if (batch_idx + 1) % self.interval:
            return
        done = trainer.global_step if self._counts_steps() else batch_idx + 1
        super().on_train_batch_end(trainer, pl_module, outputs, batch, done - 1)  # the bar shows batch_idx + 1

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        loss = trainer.callback_metrics.get("train/loss")
        if loss is not None:
            metrics["train/loss"] = round(loss.item(), 4)
        return metrics


class TQDMBar(_TrainingBar, TQDMProgressBar):
    """Lightning's tqdm bar, counting steps and refreshed at the logging interval."""


class RichBar(_TrainingBar, RichProgressBar):
    """Lightning's Rich bar, counting steps and refreshed at the logging interval."""

    def _get_train_description(self, current_epoch: int) -> str:
        if self._counts_steps():  # Lightning would write the epoch out of max_epochs - 1, "Epoch 0/-2"
            return f"Epoch {current_epoch}".ljust(len(self.validation_description))
        return super()._get_train_description(current_epoch)


def warmup_cosine(step: int, *, peak: float, start: float, warmup: int, total: int, final_ratio: float) -> float:
    """Linear warmup from `start` to `peak`, then cosine decay to `final_ratio * peak` at step `total`."""
    if step < warmup:
        return start + (peak - start) * step / max(warmup, 1)
    progress = min(1.0, (step - warmup) / max(total - warmup, 1))
    final = final_ratio * peak
    return final + 0.5 * (peak - final) * (1.0 + math.cos(math.pi * progress))


class LitResFormer(L.LightningModule):
    """Trains a `Transformer` as a causal LM.

    Args:
        config: the architecture (a preset `size` plus variant fields); `vocab_size` is linked from the data.
        lr: peak learning rate (paper: 6e-4). warmup_start_lr: where the linear warmup starts (1e-7).
        warmup_steps: linear warmup length. final_lr_ratio: cosine ends at this fraction of the peak (0.1).
        weight_decay: AdamW decay on weight matrices and DenseFormer's alphas (never on norms or the residual's
            learnable mixing weights).
        decay_embeddings: whether the input embedding matrix is decayed too.
        mix_lr: peak learning rate of the residual's learnable mixing weights (their own optimizer group, on the
            same warmup + cosine schedule); None = `lr`. modded-nanogpt trains its tied λ at a far larger lr
            than its matrices.
        betas, eps: AdamW moments.
        compile: wrap the model in torch.compile.
    """

    def __init__(self, config: ModelConfig, lr: float = 6e-4, warmup_start_lr: float = 1e-7,
                 warmup_steps: int = 120, final_lr_ratio: float = 0.1, weight_decay: float = 0.1,
                 decay_embeddings: bool = False, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                 compile: bool = False, mix_lr: float | None = None):
        super().__init__()
        if isinstance(config, dict):  # from a checkpoint's hyper-parameters
            config = ModelConfig(**config)
        for name, value in (("lr", lr), ("eps", eps), ("mix_lr", lr if mix_lr is None else mix_lr)):
            if not value > 0:
                raise ValueError(f"model.{name}={value} must be > 0")
        if mix_lr is not None and config.residual.learnable == "none" and not config.value_embed.enabled:
            raise ValueError("model.mix_lr is set but the model has no learnable mixing weights; set "
                             "model.config.residual.learnable to one of ['scalar', 'head', 'token', 'tied'] or "
                             "model.config.value_embed.layers")
        if warmup_steps < 0 or not 0 <= final_lr_ratio <= 1:
            raise ValueError("model.warmup_steps must be >= 0 and model.final_lr_ratio in [0, 1]")
        self.config = config
        self.save_hyperparameters(ignore=["config"])
        self.hparams["config"] = config.to_dict()  # plain data, so checkpoints load without this class
        self.model = Transformer(config)
        self.domains: list[str] = []
        self.val_loss = torch.nn.ModuleList()
        self._loss_sum = 0.0
        self._micro_batches = 0
        self._divergence: _DivergenceWatch | None = None

    # ------------------------------------------------------------------ setup
    def configure_model(self) -> None:
        if self.hparams.compile and not isinstance(self.model, torch._dynamo.eval_frame.OptimizedModule):
            self.model = torch.compile(self.model)

    def setup(self, stage: str) -> None:
        dm = self.trainer.datamodule if self.trainer is not None else None
        self.domains = list(getattr(dm, "domains", None) or ["all"])
        self.val_loss = torch.nn.ModuleList(torchmetrics.MeanMetric() for _ in self.domains)
        if self.trainer is not None and self.trainer.strategy.root_device.type == "cuda":
            torch.set_float32_matmul_precision("high")  # TF32 for what runs in fp32 (bf16-mixed leaves little)

    def configure_callbacks(self):
        # tokens/s and FLOP/s from Lightning's own monitor; items = tokens because length_fn counts them.
        callbacks = [TrainingThroughput(batch_size_fn=lambda b: b["input_ids"].shape[0],
                                        length_fn=lambda b: b["input_ids"].numel())]
        trainer = self.trainer
        interval = max(trainer.log_every_n_steps, 1) * trainer.accumulate_grad_batches
        bar = type(trainer.progress_bar_callback)
        # Lightning's default bars, refreshed when the logs are written (a model callback replaces the trainer's
        # callbacks of its parent type).
        if bar is TQDMProgressBar:
            callbacks.append(TQDMBar(interval))
        elif bar is RichProgressBar:
            callbacks.append(RichBar(interval))
        return callbacks

    @property
    def flops_per_batch(self) -> float:  # read by ThroughputMonitor, per micro-batch
        dm = self.trainer.datamodule
        return self._core.flops_per_token(dm.seq_len) * dm.micro_batch_size * dm.seq_len

    @property
    def _core(self) -> Transformer:
        return getattr(self.model, "_orig_mod", self.model)

    def configure_optimizers(self):
        h = self.hparams
        groups = self._core.param_groups(h.weight_decay, decay_embeddings=h.decay_embeddings, mix_lr=h.mix_lr)
        optimizer = torch.optim.AdamW(groups, lr=h.lr, betas=tuple(h.betas), eps=h.eps, fused=self._fused_adamw())
        total = self.trainer.max_steps if self.trainer.max_steps and self.trainer.max_steps > 0 \
            else self.trainer.estimated_stepping_batches
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(
            step, peak=h.lr, start=h.warmup_start_lr, warmup=h.warmup_steps, total=int(total),
            final_ratio=h.final_lr_ratio) / h.lr)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def _fused_adamw(self) -> bool:
        """Fused AdamW (one kernel for every parameter) on CUDA, except under fp16 loss scaling: the fused step
        unscales gradients itself, so clipping before it would clip scaled gradients."""
        return self.device.type == "cuda" and not str(self.trainer.precision).startswith("16")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        # Lightning's mixed-precision plugin refuses to clip for any optimizer that unscales gradients itself, which
        # guards fp16's GradScaler; bf16 has no scaler (and fp16 never gets the fused optimizer), so the gradients
        # here are the true ones and are clipped directly.
        if getattr(optimizer, "defaults", {}).get("fused") and gradient_clip_val:
            if gradient_clip_algorithm not in (None, "norm"):
                raise ValueError(f"trainer.gradient_clip_algorithm={gradient_clip_algorithm!r} is not supported with "
                                 "the fused AdamW; allowed: ['norm']")
            torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val, foreach=True)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    # ------------------------------------------------------------------ training
    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    # Nothing here reads a device value to the host except on logging steps: the loss, gradient norm and mixing
    # weights are logged as device tensors (Lightning converts them when it writes the logs), host numbers as CPU
    # tensors (a number would be copied to the device, a synchronising copy), and the divergence check keeps
    # its state on the device until a logging step reads it.
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.model(batch["input_ids"], labels=batch["labels"])
        self._divergence.watch(loss.detach())
        # With gradient accumulation, log the mean over the micro-batches of one optimizer step.
        self._loss_sum += loss.detach()
        self._micro_batches += 1
        if self._micro_batches == self.trainer.accumulate_grad_batches:
            tokens_per_step = batch["input_ids"].numel() * self._micro_batches * self.trainer.world_size
            self.log("train/loss", self._loss_sum / self._micro_batches, sync_dist=True)
            self.log("train/tokens_seen", torch.tensor((self.global_step + 1) * tokens_per_step, dtype=torch.float64))
            self.log("train/lr", torch.tensor(self.lr_schedulers().get_last_lr()[0]))
            self._loss_sum, self._micro_batches = 0.0, 0
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        every = self.trainer.log_every_n_steps
        if self._micro_batches == 0 and every and self.global_step % every == 0:
            self._divergence.check()

    def on_train_end(self) -> None:
        self._divergence.check()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self._divergence is not None:
            self._divergence.check()  # a diverged model is never saved

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        rows = next(v.shape[0] for k, v in checkpoint["state_dict"].items() if k.endswith("tok_emb.weight"))
        padded = self.config.padded_vocab_size
        resuming = self._trainer is not None and self._trainer.state.fn == TrainerFn.FITTING
        if resuming and rows != padded:
            raise ValueError(f"this checkpoint's embedding has {rows} rows: it was saved before the embedding and "
                             f"LM head were padded to {padded} rows, so training cannot resume from its optimizer "
                             "state; its weights still load (load_checkpoint, validate, test, eval)")

    def on_before_optimizer_step(self, optimizer) -> None:
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if grads:
            self.log("train/grad_norm", torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))))
        self.log_dict(self.mixing_weights())

    def mixing_weights(self) -> dict[str, torch.Tensor]:
        """Learnable residual weights per layer (heads averaged; a gate's weight norm), value-embedding gate norms
        and λs, and DenseFormer self-weights, on the device."""
        values: dict[str, torch.Tensor] = {}
        for n, block in enumerate(self._core.blocks, start=1):
            ve_mix = block.attn.ve_mix
            if ve_mix is not None:
                values[f"mix/layer{n}/value_embed_gate_norm"] = ve_mix.gate.detach().norm()
                if ve_mix.lam is not None:
                    values[f"mix/layer{n}/value_lambda"] = ve_mix.lam.detach()
            mix = getattr(block.attn, "mix", None)
            if mix is None or mix.kind == "none":
                continue
            if mix.kind == "token":
                # The norm of all the gate's parameters (W, or W_up and W_down, and b).
                gate = torch.cat([p.detach().flatten() for p in mix.gate.parameters()])
                values[f"mix/layer{n}/gate_weight_norm"] = torch.linalg.vector_norm(gate)
            elif mix.kind == "tied":
                values[f"mix/layer{n}/lambda"] = mix.lam.detach()
            else:
                values[f"mix/layer{n}/self"] = mix.mix_self.detach().mean()
                values[f"mix/layer{n}/history"] = mix.mix_history.detach().mean()
        for b, dwa in self._core.dwa.items():
            values[f"dwa/block{b}/self"] = dwa.alpha[-1].detach()
        return values

    # ------------------------------------------------------------------ evaluation
    def on_train_start(self) -> None:
        self._divergence = _DivergenceWatch(self)
        if self.global_step == 0 and self.trainer.val_dataloaders is not None:
            self._log_initial_validation()

    @torch.no_grad()
    def _log_initial_validation(self) -> None:
        """Validation loss of the untrained model, logged at step 0 so curves start where training does."""
        loaders = self.trainer.val_dataloaders
        loaders = loaders if isinstance(loaders, (list, tuple)) else [loaders]
        was_training = self.training
        self.eval()
        metrics = {}
        for domain, loader in zip(self.domains, loaders, strict=True):
            losses = [self._eval_loss(self._to_device(b)) for b in loader]
            metrics[f"val/loss/{domain}"] = torch.stack(losses).mean().item()
        metrics["val/loss"] = sum(metrics.values()) / len(metrics)
        metrics.update(self._reference_losses())
        for logger in self.loggers:
            logger.log_metrics(metrics, step=0)
        self.train(was_training)

    def _reference_losses(self) -> dict[str, float]:
        """The losses of count models of the training split on the same validation tokens, per domain and averaged
        like val/loss: the unigram (context-free: the plateau a model must get well below) and the bigram (the
        previous token only: what a model must beat to show more than pair statistics). Constant, so logged once,
        with the step-0 validation."""
        metrics = {}
        for name in REFERENCE_MODELS:
            reference = getattr(self.trainer.datamodule, f"{name}_val_losses", None)
            if reference is None:  # a datamodule without a training split to count
                continue
            per_domain = {f"val/{name}_loss/{domain}": loss for domain, loss in reference().items()}
            metrics.update(per_domain)
            metrics[f"val/{name}_loss"] = sum(per_domain.values()) / len(per_domain)
        return metrics

    def _to_device(self, batch):
        return {k: v.to(self.device) for k, v in batch.items()}

    def _eval_loss(self, batch) -> torch.Tensor:
        return self.model(batch["input_ids"], labels=batch["labels"])

    def validation_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.val_loss[dataloader_idx].update(self._eval_loss(batch), weight=batch["labels"].numel())

    test_step = validation_step

    def on_validation_epoch_end(self) -> None:
        self._log_domain_losses("val")

    def on_test_epoch_end(self) -> None:
        self._log_domain_losses("test")

    def _log_domain_losses(self, prefix: str) -> None:
        per_domain = {f"{prefix}/loss/{d}": m.compute() for d, m in zip(self.domains, self.val_loss, strict=True)}
        self.log_dict(per_domain)
        self.log(f"{prefix}/loss", torch.stack(list(per_domain.values())).mean(), prog_bar=prefix == "val")
        for metric in self.val_loss:
            metric.reset()


class _DivergenceWatch:
    """The first non-finite training loss, tracked on the device; `check` reads it (one host sync)."""

    def __init__(self, module: LitResFormer):
        self.module, device = module, module.device
        self.start_step = module.global_step
        self.finite = torch.ones((), dtype=torch.bool, device=device)  # every loss so far was finite
        self.finite_micro_steps = torch.zeros((), dtype=torch.long, device=device)  # micro-steps before the first bad one
        self.first_bad = torch.zeros((), device=device)  # its value

    def watch(self, loss: torch.Tensor) -> None:
        finite = torch.isfinite(loss)
        self.first_bad = torch.where(self.finite & ~finite, loss.float(), self.first_bad)
        self.finite &= finite
        self.finite_micro_steps += self.finite

    def check(self) -> None:
        if not self.finite.item():
            step = self.start_step + int(self.finite_micro_steps) // self.module.trainer.accumulate_grad_batches
            # the record tells the grid the run diverged (a result, not a failure)
            RunDir(self.module.trainer.default_root_dir).record_divergence(step, self.first_bad.item())
            raise FloatingPointError(f"diverged: non-finite loss at step {step} ({self.first_bad.item()})")
