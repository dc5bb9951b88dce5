"""LightningModule: loss, AdamW (or Muon + AdamW) groups, warmup + cosine schedule, per-step and per-domain logging
(paper §4.1.1), validation bits per byte."""

from __future__ import annotations

import functools
import math
import time
from typing import Literal
from unittest import mock

import lightning as L
import torch
import torchmetrics
from lightning.pytorch.callbacks import RichProgressBar, ThroughputMonitor, TQDMProgressBar
from lightning.pytorch.trainer.states import RunningStage, TrainerFn
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn

from lit_resformer.data.tokenizer import token_byte_lengths
from lit_resformer.model import ModelConfig, Transformer
from lit_resformer.model.config import mixing_settings
from lit_resformer.runs.run_dir import RunDir

# Rates of the throughput monitor span at least this many optimizer steps.
THROUGHPUT_WINDOW_STEPS = 10
# Count models of the training split whose validation loss every run logs as a reference (`<name>_val_losses`
# of the datamodule), from the weakest up.
REFERENCE_MODELS = ("unigram", "bigram")

OptimizerName = Literal["adamw", "muon"]
OPTIMIZERS: tuple[str, ...] = OptimizerName.__args__
ScheduleName = Literal["cosine", "wsd"]
# Learning-rate multipliers of the parameter groups under `optimizer: muon`, relative to `lr` (the peak learning rate
# of the AdamW groups), as KellerJordan/modded-nanogpt trains (train_gpt.py at f411b3d, `TrainingManager.__init__`):
# its Adam parameters share adam_defaults lr=0.008 (line 2066), each scaled by its `lr_mul` in `param_table`.
#   muon: NorMuon's lr=0.023 (normuon_defaults, line 2072) / 0.008 = 2.875. (karpathy/nanochat at 92d63d4,
#     scripts/base_train.py: --matrix-lr 0.02 / --unembedding-lr 0.008 = 2.5.)
#   head: "lm_head" has no lr_mul (line 2033): 1. (nanochat: the unembedding lr is the reference, 1.)
#   embed: "embed" has no lr_mul (line 2038): 1. (nanochat: --embedding-lr 0.3 / 0.008 = 37.5, but it normalises
#     the embedding's output, nanochat/gpt.py `x = norm(x)` after `wte`; this model feeds it to the blocks as is.)
#   value_embed: "value_embeds" lr_mul 75. (line 2037). (nanochat/gpt.py `setup_optimizer`, line 441: embedding
#     lr x 0.5 = 0.15 / 0.008 = 18.75.)
#   mix (the model's mixing weights and gates, `Transformer.param_groups`' third group): "scalars" and
#     "resid_lambdas" lr_mul 5.0 (lines 2030, 2036); its value-embedding gates ("ve_gate_bank", line 2032) take 1.
#     (nanochat/gpt.py lines 442-443: resid_lambdas 0.5 x 0.01 / 0.008 = 0.625, x0_lambdas 0.5 / 0.008 = 62.5.)
# Muon's momentum 0.95: modded-nanogpt normuon_defaults (line 2073) and nanochat/gpt.py `setup_optimizer` (line 451);
# both warm it up from 0.85 over the first 300 steps (modded-nanogpt `get_muon_momentum`), which is not reproduced.
MUON_LR_MULTIPLIERS = {"muon": 2.875, "head": 1.0, "embed": 1.0, "value_embed": 75.0, "mix": 5.0}
# The parameter groups with an optional multiplier of their own under AdamW (None there: they stay in the decayed /
# undecayed groups, exactly as before the multipliers existed).
MULTIPLIED_GROUPS = ("head", "embed", "value_embed")


def newton_schulz_in_float32(grad: torch.Tensor, ns_coefficients: tuple[float, float, float], ns_steps: int,
                             eps: float) -> torch.Tensor:
    """torch.optim.Muon's quintic Newton-Schulz orthogonalisation (torch/optim/_muon.py
    `_zeropower_via_newtonschulz`, the same coefficients, steps and norm) carried out in float32 instead of bfloat16.

    Why: bfloat16 is a GPU speed trick. A CPU without bfloat16 matrix units emulates it: one orthogonalisation of
    a 128 x 128 gradient takes 26 ms in bfloat16 and 1.4 ms in float32 on this project's 2-core machine (one
    thread), which made a Muon step of `tiny` 2.65x as long as AdamW's. float32 rounds less, so the update is the
    iteration's own result, not a cruder one."""
    a, b, c = ns_coefficients
    wide = grad.size(0) <= grad.size(1)
    x = grad.float() if wide else grad.float().T
    x = x / x.norm().clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
    for _ in range(ns_steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x if wide else x.T


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


def bits_per_byte(nats, n_bytes):
    """Bits per UTF-8 byte of text whose tokens' losses sum to `nats`: nats / (ln 2 x bytes). Unlike the loss per
    token, it does not depend on how the tokenizer cuts the text."""
    return nats / (math.log(2) * n_bytes)


def warmup_cosine(step: int, *, peak: float, start: float, warmup: int, total: int, final_ratio: float) -> float:
    """Linear warmup from `start` to `peak`, then cosine decay to `final_ratio * peak` at step `total`."""
    if step < warmup:
        return start + (peak - start) * step / max(warmup, 1)
    progress = min(1.0, (step - warmup) / max(total - warmup, 1))
    final = final_ratio * peak
    return final + 0.5 * (peak - final) * (1.0 + math.cos(math.pi * progress))


def warmup_stable_decay(step: int, *, peak: float, start: float, warmup: int, decay_start: int | None, total: int,
                        final_ratio: float) -> float:
    """Warmup-stable-decay (WSD): linear warmup from `start` to `peak`, the peak held until `decay_start`, then a
    linear decay to `final_ratio * peak` at step `total` (OLMo-core's `WSD` scheduler's shape); `decay_start` None
    holds the peak to the end (a ladder's trunk, from whose checkpoints decays branch off). A closed form of the
    step alone, so a run resumed from another run's checkpoint (a branch from its trunk) follows its own schedule:
    PyTorch's SequentialLR would not (its load_state_dict restores the saved run's milestones)."""
    if step < warmup:
        return start + (peak - start) * step / max(warmup, 1)
    if decay_start is None or step < decay_start:
        return peak
    progress = min(1.0, (step - decay_start) / max(total - decay_start, 1))
    return peak - (1.0 - final_ratio) * peak * progress


def _check_optimizer_settings(config: ModelConfig, *, lr, eps, mix_lr, optimizer, muon_lr_mult, muon_momentum,
                              multipliers: dict) -> None:
    """Every optimizer setting of LitResFormer, refused with the field and what it allows (before any compute)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"model.optimizer={optimizer!r} is not allowed; choose one of {list(OPTIMIZERS)}")
    positive = {"lr": lr, "eps": eps, "mix_lr": mix_lr, "muon_lr_mult": muon_lr_mult,
                **{f"{name}_lr_mult": value for name, value in multipliers.items()}}
    for name, value in positive.items():
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"model.{name}={value} must be a finite number > 0")
    if not 0 <= muon_momentum < 1:
        raise ValueError(f"model.muon_momentum={muon_momentum} must be in [0, 1)")
    if optimizer == "adamw" and muon_lr_mult is not None:
        raise ValueError("model.muon_lr_mult is set but model.optimizer='adamw'; set model.optimizer to 'muon' "
                         "or leave model.muon_lr_mult unset")
    if mix_lr is not None and not config.has_mixing_weights():
        raise ValueError("model.mix_lr is set but the model has no learnable mixing weights; set "
                         f"{mixing_settings('model.config.')}")
    if multipliers.get("value_embed") is not None and not config.value_embed.enabled:
        raise ValueError("model.value_embed_lr_mult is set but the model has no value-embedding tables; set "
                         "model.config.value_embed.layers")


class MuonWithAdamW(torch.optim.Optimizer):
    """torch.optim.Muon on the parameter groups marked `"muon": True`, torch.optim.AdamW on the others, as one
    optimizer: Lightning's automatic optimisation steps exactly one, and the warmup + cosine schedule, gradient
    clipping, checkpoints and DDP all see one list of groups.

    The two inner optimizers hold the very group dicts of `param_groups` and share one `state`, so whatever sets a
    group's lr (the schedule) sets it for the optimizer that steps it, and `state_dict` / `load_state_dict` are the
    standard ones (re-linked after a load, which replaces the group dicts). Muon is per process: under DDP the
    gradients are all-reduced before the step, so every rank orthogonalises the same matrices. On a CPU the
    orthogonalisation runs in float32 (`newton_schulz_in_float32`: the same iteration, 19x faster there).
    """

    def __init__(self, groups: list[dict], *, lr: float, betas: tuple[float, float], eps: float, momentum: float,
                 fused: bool | None = None):
        muon = [g for g in groups if g.get("muon")]
        adamw = [g for g in groups if not g.get("muon")]
        if not muon or not adamw:
            raise ValueError("MuonWithAdamW needs Muon groups and AdamW groups")
        if [g for g in groups if g.get("muon")] != groups[:len(muon)]:
            raise ValueError("MuonWithAdamW: the Muon groups come first")
        self._muon = torch.optim.Muon(muon, lr=lr, momentum=momentum, nesterov=True)
        self._adamw = torch.optim.AdamW(adamw, lr=lr, betas=betas, eps=eps, fused=fused)
        super().__init__(self._muon.param_groups + self._adamw.param_groups, {})
        self._link()

    def _link(self) -> None:
        n = len(self._muon.param_groups)
        self._muon.param_groups, self._adamw.param_groups = self.param_groups[:n], self.param_groups[n:]
        self._muon.state = self._adamw.state = self.state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._link()
        # AdamW's own load fills in group defaults and keeps its `step` counters as tensors; nothing to add for
        # state saved by this class.

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if all(p.device.type == "cpu" for g in self._muon.param_groups for p in g["params"]):
            with mock.patch("torch.optim._muon._zeropower_via_newtonschulz", newton_schulz_in_float32):
                self._muon.step()
        else:
            self._muon.step()
        self._adamw.step()
        return loss


class LitResFormer(L.LightningModule):
    """Trains a `Transformer` as a causal LM.

    Args:
        config: the architecture (a preset `size` plus variant fields); `vocab_size` is linked from the data.
        lr: peak learning rate (paper: 6e-4). warmup_start_lr: where the linear warmup starts (1e-7).
        warmup_steps: linear warmup length. final_lr_ratio: the schedule ends at this fraction of the peak (0.1).
        schedule: `cosine` (the paper's: warmup, then cosine decay to the end) or `wsd` (warmup-stable-decay,
            `warmup_stable_decay`: the peak held until `decay_start`, then a linear decay to the end).
        decay_start: under `wsd`, the step its decay begins (None: the peak is held to the end).
        weight_decay: AdamW decay on weight matrices and DenseFormer's alphas (never on norms or the residual's
            learnable mixing weights).
        decay_embeddings: whether the input embedding matrix is decayed too.
        mix_lr: peak learning rate of the model's learnable mixing weights and gates (their own optimizer group, on
            the same warmup + cosine schedule); None = `lr` under AdamW, `lr` x MUON_LR_MULTIPLIERS["mix"] under
            Muon. modded-nanogpt trains its tied λ at a far larger lr than its matrices.
        betas, eps: AdamW moments (of every AdamW group, Muon's neighbours included).
        compile: wrap the model in torch.compile.
        optimizer: `adamw` (the paper's: every parameter under AdamW) or `muon`: torch.optim.Muon on the blocks'
            2-D hidden matrices (attention and MLP projections), AdamW on the LM head, the embedding, the
            value-embedding tables, the mixing weights and gates, norms and DenseFormer's alphas. `lr` is the AdamW
            groups' peak learning rate in both; the other groups' peaks are multiples of it.
        muon_lr_mult: Muon's peak learning rate / `lr` (muon only; None = MUON_LR_MULTIPLIERS["muon"]).
        muon_momentum: Muon's (Nesterov) momentum (muon only).
        head_lr_mult, embed_lr_mult, value_embed_lr_mult: the LM head's, the input embedding's and the
            value-embedding tables' peak learning rate / `lr`, each group weight-decayed as under AdamW. None: under
            AdamW the parameters stay in the decayed / undecayed groups at `lr` (the paper's training, unchanged),
            under Muon MUON_LR_MULTIPLIERS (from modded-nanogpt; its value-embedding tables take 75x).
    """

    def __init__(self, config: ModelConfig, lr: float = 6e-4, warmup_start_lr: float = 1e-7,
                 warmup_steps: int = 120, final_lr_ratio: float = 0.1, weight_decay: float = 0.1,
                 decay_embeddings: bool = False, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                 compile: bool = False, mix_lr: float | None = None, optimizer: OptimizerName = "adamw",
                 muon_lr_mult: float | None = None, muon_momentum: float = 0.95, head_lr_mult: float | None = None,
                 embed_lr_mult: float | None = None, value_embed_lr_mult: float | None = None,
                 schedule: ScheduleName = "cosine", decay_start: int | None = None):
        super().__init__()
        if isinstance(config, dict):  # from a checkpoint's hyper-parameters
            config = ModelConfig(**config)
        _check_optimizer_settings(config, lr=lr, eps=eps, mix_lr=mix_lr, optimizer=optimizer,
                                  muon_lr_mult=muon_lr_mult, muon_momentum=muon_momentum,
                                  multipliers={"head": head_lr_mult, "embed": embed_lr_mult,
                                               "value_embed": value_embed_lr_mult})
        if warmup_steps < 0 or not 0 <= final_lr_ratio <= 1:
            raise ValueError("model.warmup_steps must be >= 0 and model.final_lr_ratio in [0, 1]")
        if decay_start is not None and (schedule != "wsd" or decay_start < warmup_steps):
            raise ValueError(f"model.decay_start={decay_start} needs model.schedule: wsd and a start at or after the "
                             f"warmup (model.warmup_steps={warmup_steps}); schedule is {schedule!r}")
        self.config = config
        self.save_hyperparameters(ignore=["config"])
        self.hparams["config"] = config.to_dict()  # plain data, so checkpoints load without this class
        self.model = Transformer(config)
        self.domains: list[str] = []
        self.val_loss = torch.nn.ModuleList()
        # Bits per byte: per domain, the validation tokens' summed loss (nats) and their UTF-8 bytes, and the bytes
        # of every token id (`token_byte_lengths`, set up from the data's tokenizer; None without one).
        self.val_nats = torch.nn.ModuleList()
        self.val_bytes = torch.nn.ModuleList()
        self.register_buffer("token_bytes", None, persistent=False)
        self.group_names: list[str] = []  # the optimizer's parameter groups, in order (`lr/<name>` in the logs)
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
        self.val_nats = torch.nn.ModuleList(torchmetrics.SumMetric() for _ in self.domains)
        self.val_bytes = torch.nn.ModuleList(torchmetrics.SumMetric() for _ in self.domains)
        self.token_bytes = self._token_byte_table(dm)
        if self.trainer is not None and self.trainer.strategy.root_device.type == "cuda":
            torch.set_float32_matmul_precision("high")  # TF32 for what runs in fp32 (bf16-mixed leaves little)

    def _token_byte_table(self, dm) -> torch.Tensor | None:
        """UTF-8 bytes of every token id of the data's tokenizer (`token_byte_lengths`), on this module's device;
        None (no bits per byte logged) without a tokenizer or for one that is not byte-level."""
        tokenizer = getattr(dm, "tokenizer", None) if dm is not None else None
        if tokenizer is None:
            return None
        try:
            table = token_byte_lengths(tokenizer)
        except ValueError as err:
            rank_zero_warn(f"val/bpb is not logged: {err}")
            return None
        return torch.as_tensor(table, dtype=torch.long, device=self.device)

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

    def parameter_groups(self) -> tuple[list[str], list[dict]]:
        """The optimizer's parameter groups and their names. Under AdamW: `Transformer.param_groups` (decay,
        no_decay, mix), then a group of its own for each of head / embed / value_embed whose multiplier is set. Under
        Muon: muon (the blocks' 2-D hidden matrices), head, embed, value_embed, mix, decay (DenseFormer's alphas),
        no_decay (norms); empty groups left out. Muon groups carry `"muon": True`."""
        h = self.hparams
        core = self._core
        base = core.param_groups(h.weight_decay, decay_embeddings=h.decay_embeddings, mix_lr=h.mix_lr)
        multipliers = {name: h.get(f"{name}_lr_mult") for name in MULTIPLIED_GROUPS}
        members = {"head": lambda n: n == "lm_head.weight", "embed": lambda n: n == "tok_emb.weight",
                   "value_embed": lambda n: n.startswith("value_embeds.")}
        if h.get("optimizer", "adamw") == "adamw":
            names = ["decay", "no_decay", "mix"][:len(base)]
            named = dict(core.named_parameters())
            for group_name in MULTIPLIED_GROUPS:
                if multipliers[group_name] is None:
                    continue
                picked = {id(p) for n, p in named.items() if members[group_name](n)}
                source = next(g for g in base if any(id(p) in picked for p in g["params"]))
                source["params"] = [p for p in source["params"] if id(p) not in picked]
                base.append({"params": [p for p in named.values() if id(p) in picked],
                             "weight_decay": source["weight_decay"], "lr": h.lr * multipliers[group_name]})
                names.append(group_name)
            return names, base
        mixing = {id(p) for p in base[2]["params"]} if len(base) == 3 else set()
        embed_decay = h.weight_decay if h.decay_embeddings else 0.0
        mult = {name: MUON_LR_MULTIPLIERS[name] if value is None else value for name, value in multipliers.items()}
        specs = {  # name -> (weight decay, peak lr)
            "muon": (h.weight_decay, h.lr * (MUON_LR_MULTIPLIERS["muon"] if h.muon_lr_mult is None
                                             else h.muon_lr_mult)),
            "head": (h.weight_decay, h.lr * mult["head"]),
            "embed": (embed_decay, h.lr * mult["embed"]),
            "value_embed": (embed_decay, h.lr * mult["value_embed"]),
            "mix": (0.0, h.lr * MUON_LR_MULTIPLIERS["mix"] if h.mix_lr is None else h.mix_lr),
            "decay": (h.weight_decay, h.lr),
            "no_decay": (0.0, h.lr),
        }
        params: dict[str, list] = {name: [] for name in specs}
        for n, p in core.named_parameters():
            if id(p) in mixing:
                params["mix"].append(p)
            elif group := next((g for g in MULTIPLIED_GROUPS if members[g](n)), None):
                params[group].append(p)
            elif p.ndim == 2 and n.startswith("blocks."):
                params["muon"].append(p)  # attention (wq, wk, wv, wo) and MLP (w_gate, w_up, w_down) matrices
            elif n.startswith("dwa.") or p.ndim >= 2:
                params["decay"].append(p)  # DenseFormer's alphas are decayed, as under AdamW
            else:
                params["no_decay"].append(p)
        names = [name for name in specs if params[name]]
        groups = [{"params": params[name], "weight_decay": specs[name][0], "lr": specs[name][1],
                   **({"muon": True} if name == "muon" else {})} for name in names]
        return names, groups

    def configure_optimizers(self):
        h = self.hparams
        self.group_names, groups = self.parameter_groups()
        if h.get("optimizer", "adamw") == "muon":
            optimizer = MuonWithAdamW(groups, lr=h.lr, betas=tuple(h.betas), eps=h.eps,
                                      momentum=h.muon_momentum, fused=self._fused_adamw())
        else:
            optimizer = torch.optim.AdamW(groups, lr=h.lr, betas=tuple(h.betas), eps=h.eps, fused=self._fused_adamw())
        total = self.trainer.max_steps if self.trainer.max_steps and self.trainer.max_steps > 0 \
            else self.trainer.estimated_stepping_batches
        # One factor for every group: each group's peak (its initial lr) is scaled by the same schedule.
        shape = dict(peak=h.lr, start=h.warmup_start_lr, warmup=h.warmup_steps, total=int(total),
                     final_ratio=h.final_lr_ratio)
        if h.get("schedule", "cosine") == "wsd":
            factor = functools.partial(warmup_stable_decay, decay_start=h.decay_start, **shape)
        else:
            factor = functools.partial(warmup_cosine, **shape)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: factor(step) / h.lr)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def _fused_adamw(self) -> bool:
        """Fused AdamW (one kernel for every parameter) on CUDA, except under fp16 loss scaling: the fused step
        unscales gradients itself, so clipping before it would clip scaled gradients."""
        return self.device.type == "cuda" and not str(self.trainer.precision).startswith("16")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        # Lightning's mixed-precision plugin refuses to clip for any optimizer that unscales gradients itself, which
        # guards fp16's GradScaler; bf16 has no scaler (and fp16 never gets the fused optimizer), so the gradients
        # here are the true ones and are clipped directly.
        if any(group.get("fused") for group in getattr(optimizer, "param_groups", ())) and gradient_clip_val:
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
            self.log_dict(self.step_metrics(tokens_per_step))
            self._loss_sum, self._micro_batches = 0.0, 0
        return loss

    def step_metrics(self, tokens_per_step: int) -> dict[str, torch.Tensor]:
        """What an optimizer step logs beside its loss: the tokens seen once it is done and the learning rates it
        uses (overall and per parameter group), as CPU tensors (a number would be copied to the device)."""
        rates = self.lr_schedulers().get_last_lr()
        metrics = {"train/tokens_seen": torch.tensor((self.global_step + 1) * tokens_per_step, dtype=torch.float64),
                   "train/lr": torch.as_tensor(rates[0])}
        metrics.update({f"lr/{name}": torch.as_tensor(rate) for name, rate in zip(self.group_names, rates, strict=True)})
        return metrics

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
        saved = (checkpoint.get("hyper_parameters") or {}).get("optimizer", "adamw")
        if self._trainer is not None and self._trainer.state.fn == TrainerFn.FITTING \
                and saved != self.hparams.optimizer:
            raise ValueError(f"this checkpoint was trained with model.optimizer={saved!r}: training resumes only "
                             f"under the same optimizer, not {self.hparams.optimizer!r} (its state would not fit)")
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
        """The model's learnable mixing weights and gates as it logs them (`Transformer.mixing_weights`), on the
        device."""
        return self._core.mixing_weights()

    # ------------------------------------------------------------------ evaluation
    def on_train_start(self) -> None:
        self._divergence = _DivergenceWatch(self)
        self.record_corpus()
        if self.global_step == 0 and self.trainer.val_dataloaders is not None:
            self._log_initial_validation()

    @rank_zero_only
    def record_corpus(self) -> None:
        """The corpus's content hash into the run directory, so that no claim pairs runs of different corpora. The
        data module has scanned its corpus by now (the hash is that scan's), so this costs no pass over it."""
        data = getattr(self.trainer, "datamodule", None)
        if data is not None and hasattr(data, "corpus_hash"):
            RunDir(self.trainer.default_root_dir).record_corpus(data.source, data.corpus_hash)

    @torch.no_grad()
    def _log_initial_validation(self) -> None:
        """Validation loss of the untrained model, logged at step 0 so curves start where training does."""
        loaders = self.trainer.val_dataloaders
        loaders = loaders if isinstance(loaders, (list, tuple)) else [loaders]
        was_training = self.training
        self.eval()
        losses: dict[str, list[torch.Tensor]] = {}
        counts: dict[str, list[torch.Tensor]] = {}
        for domain, loader in zip(self.domains, loaders, strict=True):
            for batch in loader:
                batch = self._to_device(batch)
                losses.setdefault(domain, []).append(self._eval_loss(batch))
                counts.setdefault(domain, []).append(self.tokens_and_bytes(batch["labels"]))
        for logger in self.loggers:
            logger.log_metrics(self.initial_validation_metrics(losses, counts), step=0)
        self.train(was_training)

    def initial_validation_metrics(self, losses: dict[str, list[torch.Tensor]],
                                   counts: dict[str, list[torch.Tensor | None]]) -> dict[str, float]:
        """The step-0 validation's metrics from the loss of every batch of every domain and its `tokens_and_bytes`:
        the mean loss per domain and overall, bits per byte, and the reference losses."""
        metrics, bpb, tokens, n_bytes = {}, {}, {}, {}
        for domain in self.domains:
            metrics[f"val/loss/{domain}"] = torch.stack(losses[domain]).mean().item()
            if self.token_bytes is not None:  # bits per byte: every token's loss summed (mean loss x tokens a batch)
                scored = torch.stack(counts[domain])
                tokens[domain], n_bytes[domain] = (int(n) for n in scored.sum(0))
                nats = (torch.stack(losses[domain]).double() * scored[:, 0]).sum().item()
                bpb[f"val/bpb/{domain}"] = bits_per_byte(nats, n_bytes[domain])
        metrics["val/loss"] = sum(metrics.values()) / len(metrics)
        if bpb:
            metrics.update(bpb)
            metrics["val/bpb"] = sum(bpb.values()) / len(bpb)
        metrics.update(self._reference_losses(tokens, n_bytes))
        return metrics

    def _reference_losses(self, tokens: dict[str, int] | None = None,
                          n_bytes: dict[str, int] | None = None) -> dict[str, float]:
        """The losses of count models of the training split on the same validation tokens, per domain and averaged
        like val/loss: the unigram (context-free: the plateau a model must get well below) and the bigram (the
        previous token only: what a model must beat to show more than pair statistics). Constant, so logged once,
        with the step-0 validation. With the validation tokens' count and bytes per domain, also in bits per byte
        (`val/<name>_bpb`): the reference's mean loss x tokens / (ln 2 x bytes), averaged over domains."""
        metrics = {}
        for name in REFERENCE_MODELS:
            reference = getattr(self.trainer.datamodule, f"{name}_val_losses", None)
            if reference is None:  # a datamodule without a training split to count
                continue
            losses = reference()
            per_domain = {f"val/{name}_loss/{domain}": loss for domain, loss in losses.items()}
            metrics.update(per_domain)
            metrics[f"val/{name}_loss"] = sum(per_domain.values()) / len(per_domain)
            if tokens and n_bytes and set(losses) <= set(n_bytes):
                bpb = {f"val/{name}_bpb/{d}": bits_per_byte(loss * tokens[d], n_bytes[d]) for d, loss in losses.items()}
                metrics.update(bpb)
                metrics[f"val/{name}_bpb"] = sum(bpb.values()) / len(bpb)
        return metrics

    def tokens_and_bytes(self, labels: torch.Tensor) -> torch.Tensor | None:
        """[how many tokens of `labels` are scored (not -100), their UTF-8 bytes (`token_bytes`)], on the device;
        None without a byte table."""
        if self.token_bytes is None:
            return None
        scored = labels != -100
        return torch.stack([scored.sum(), (self.token_bytes[labels.clamp_min(0)] * scored).sum()])

    def _to_device(self, batch):
        return {k: v.to(self.device) for k, v in batch.items()}

    def _eval_loss(self, batch) -> torch.Tensor:
        return self.model(batch["input_ids"], labels=batch["labels"])

    def validation_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.update_eval_metrics(self._eval_loss(batch), batch, dataloader_idx)

    test_step = validation_step

    def update_eval_metrics(self, loss: torch.Tensor, batch, dataloader_idx: int) -> None:
        """Count one evaluation batch of domain `dataloader_idx` whose mean loss is `loss`."""
        self.val_loss[dataloader_idx].update(loss, weight=batch["labels"].numel())
        if self.token_bytes is not None:
            tokens, n_bytes = self.tokens_and_bytes(batch["labels"])
            self.val_nats[dataloader_idx].update(loss.float() * tokens)  # the mean loss x tokens: their summed nats
            self.val_bytes[dataloader_idx].update(n_bytes)

    def on_validation_epoch_end(self) -> None:
        self._log_domain_losses("val")

    def on_test_epoch_end(self) -> None:
        self._log_domain_losses("test")

    def _log_domain_losses(self, prefix: str) -> None:
        metrics = self.domain_metrics(prefix)
        self.log_dict({k: v for k, v in metrics.items() if k != f"{prefix}/loss"})
        self.log(f"{prefix}/loss", metrics[f"{prefix}/loss"], prog_bar=prefix == "val")

    def domain_metrics(self, prefix: str) -> dict[str, torch.Tensor]:
        """The evaluation's metrics from the batches counted since the last call (which are then forgotten): the loss
        per domain and their mean, and bits per byte likewise."""
        metrics = {f"{prefix}/loss/{d}": m.compute() for d, m in zip(self.domains, self.val_loss, strict=True)}
        metrics[f"{prefix}/loss"] = torch.stack(list(metrics.values())).mean()
        if self.token_bytes is not None:
            # bits per byte per domain; overall, the mean over domains, as val/loss is
            bpb = {f"{prefix}/bpb/{d}": bits_per_byte(nats.compute(), n_bytes.compute())
                   for d, nats, n_bytes in zip(self.domains, self.val_nats, self.val_bytes, strict=True)}
            metrics.update(bpb)
            metrics[f"{prefix}/bpb"] = torch.stack(list(bpb.values())).mean()
        for metric in (*self.val_loss, *self.val_nats, *self.val_bytes):
            metric.reset()
        return metrics


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
