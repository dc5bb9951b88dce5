"""LightningModule: loss, AdamW groups, warmup + cosine schedule, per-step and per-domain logging (paper §4.1.1)."""

from __future__ import annotations

import math

import lightning as L
import torch
import torchmetrics
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.trainer.states import RunningStage

from .model import ModelConfig, Transformer, causal_lm_loss
from .run_dir import RunDir


class TrainingThroughput(ThroughputMonitor):
    """Lightning's ThroughputMonitor, logging the training stage only.

    Its validation metrics are logged against validation-batch counts, which would interleave with optimizer
    steps in the step-indexed logs. Validation is still timed, so training tokens/s exclude it.
    """

    def _compute(self, trainer, iter_num=None) -> None:
        if trainer.state.stage == RunningStage.TRAINING:
            super()._compute(trainer, iter_num)


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
        if mix_lr is not None and config.residual.learnable == "none":
            raise ValueError("model.mix_lr is set but the model has no learnable mixing weights; set "
                             "model.config.residual.learnable to one of ['scalar', 'head', 'token', 'tied']")
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

    # ------------------------------------------------------------------ setup
    def configure_model(self) -> None:
        if self.hparams.compile and not isinstance(self.model, torch._dynamo.eval_frame.OptimizedModule):
            self.model = torch.compile(self.model)

    def setup(self, stage: str) -> None:
        dm = self.trainer.datamodule if self.trainer is not None else None
        self.domains = list(getattr(dm, "domains", None) or ["all"])
        self.val_loss = torch.nn.ModuleList(torchmetrics.MeanMetric() for _ in self.domains)

    def configure_callbacks(self):
        # tokens/s and FLOP/s from Lightning's own monitor; items = tokens because length_fn counts them.
        return [TrainingThroughput(batch_size_fn=lambda b: b["input_ids"].shape[0],
                                  length_fn=lambda b: b["input_ids"].numel(), window_size=10)]

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
        optimizer = torch.optim.AdamW(groups, lr=h.lr, betas=tuple(h.betas), eps=h.eps)
        total = self.trainer.max_steps if self.trainer.max_steps and self.trainer.max_steps > 0 \
            else self.trainer.estimated_stepping_batches
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(
            step, peak=h.lr, start=h.warmup_start_lr, warmup=h.warmup_steps, total=int(total),
            final_ratio=h.final_lr_ratio) / h.lr)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    # ------------------------------------------------------------------ training
    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = causal_lm_loss(self.model(batch["input_ids"]), batch["labels"])
        if not torch.isfinite(loss):  # the record tells the grid the run diverged (a result, not a failure)
            RunDir(self.trainer.default_root_dir).record_divergence(self.global_step, loss.item())
            raise FloatingPointError(f"diverged: non-finite loss at step {self.global_step} ({loss.item()})")
        # With gradient accumulation, log the mean over the micro-batches of one optimizer step.
        self._loss_sum += loss.detach()
        self._micro_batches += 1
        if self._micro_batches == self.trainer.accumulate_grad_batches:
            tokens_per_step = batch["input_ids"].numel() * self._micro_batches * self.trainer.world_size
            self.log("train/loss", self._loss_sum / self._micro_batches, prog_bar=True, sync_dist=True)
            self.log("train/tokens_seen", float((self.global_step + 1) * tokens_per_step))
            self.log("train/lr", self.lr_schedulers().get_last_lr()[0])
            self._loss_sum, self._micro_batches = 0.0, 0
        return loss

    def on_before_optimizer_step(self, optimizer) -> None:
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        self.log("train/grad_norm", torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        self.log_dict(self.mixing_weights())

    def mixing_weights(self) -> dict[str, float]:
        """Learnable residual weights per layer (heads averaged) and DenseFormer self-weights."""
        values: dict[str, float] = {}
        for n, block in enumerate(self._core.blocks, start=1):
            mix = getattr(block.attn, "mix", None)
            if mix is None or mix.kind == "none":
                continue
            if mix.kind == "token":
                values[f"mix/layer{n}/gate_weight_norm"] = mix.gate.weight.detach().norm().item()
            elif mix.kind == "tied":
                values[f"mix/layer{n}/lambda"] = mix.lam.detach().item()
            else:
                values[f"mix/layer{n}/self"] = mix.mix_self.detach().mean().item()
                values[f"mix/layer{n}/history"] = mix.mix_history.detach().mean().item()
        for b, dwa in self._core.dwa.items():
            values[f"dwa/block{b}/self"] = dwa.alpha[-1].item()
        return values

    # ------------------------------------------------------------------ evaluation
    def on_train_start(self) -> None:
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
        metrics.update(self._unigram_reference())
        for logger in self.loggers:
            logger.log_metrics(metrics, step=0)
        self.train(was_training)

    def _unigram_reference(self) -> dict[str, float]:
        """The loss of a context-free (unigram) model on the same validation tokens, per domain and averaged like
        val/loss: the plateau a model must get well below. Constant, so logged once, with the step-0 validation."""
        reference = getattr(self.trainer.datamodule, "unigram_val_losses", None)
        if reference is None:  # a datamodule without a training split to count
            return {}
        per_domain = {f"val/unigram_loss/{domain}": loss for domain, loss in reference().items()}
        return {**per_domain, "val/unigram_loss": sum(per_domain.values()) / len(per_domain)}

    def _to_device(self, batch):
        return {k: v.to(self.device) for k, v in batch.items()}

    def _eval_loss(self, batch) -> torch.Tensor:
        return causal_lm_loss(self.model(batch["input_ids"]), batch["labels"])

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
