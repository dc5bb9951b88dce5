"""Which runs may train in one stack, and what a run needs to train in one at all.

Runs share a stack when their resolved configs (`ConfigChecker.resolved`, or a run's config.yaml) are equal but for
the fields of PER_RUN. Those are the settings a stack keeps per run:
- what makes runs of one cell different runs: the seed (initialisation and data order) and `data.seed`;
- the optimizer and its schedule (every run steps its own optimizer and scheduler) and the gradient-clipping norm
  (clipped per run);
- numbers of the model that only initialise it (`init_std`) or that the forward pass reads as numbers or buffers
  (RoPE's theta, the residual's fixed mixing weights, NeuTRENO's μ, the value embeddings' gate scale), which the
  stack hands every run as its own. Under bf16-mixed such a number is multiplied in bf16, so it may differ
  between the runs of a stack only where bf16 holds it exactly (0.5 yes, 0.2 no): otherwise the stacked run would
  train with a rounded λ. NeuTRENO's μ must be set in all runs of a stack or in none (the term exists where set).
Everything else (model shape and variant, data, batch, steps, precision, validation and checkpoint schedule) is the
stack's and must be equal. `stack_key` says which runs stack together; `check_stack` refuses others by name.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from lit_resformer.config.diff import changed_fields

# Fields that may differ between the runs of one stack -> why each run keeps its own.
PER_RUN = {
    "seed_everything": "each run's initialisation and data order",
    "data.seed": "each run's data order",
    **{f"model.{name}": "each run steps its own optimizer on its own schedule"
       for name in ("lr", "warmup_start_lr", "warmup_steps", "final_lr_ratio", "weight_decay", "decay_embeddings",
                    "betas", "eps", "mix_lr", "optimizer", "muon_lr_mult", "muon_momentum", "head_lr_mult",
                    "embed_lr_mult", "value_embed_lr_mult")},
    "trainer.gradient_clip_val": "each run's gradients are clipped by their own norm",
    "model.config.init_std": "each run is initialised alone",
    "model.config.rope_theta": "RoPE's tables are buffers, stacked per run",
}
# Numbers the forward pass reads (the stack hands each run its own): exact in the compute dtype or equal.
MODEL_NUMBERS = ("model.config.residual.lam", "model.config.residual.self_weight", "model.config.neutreno_lambda",
                 "model.config.value_embed.gate_scale")
# Where a run writes, at any depth: its own in every run.
OUTPUT_LOCATIONS = frozenset({"default_root_dir", "dirpath", "save_dir"})
PRECISIONS = (None, 32, "32", "32-true", "bf16-mixed")

# Trainer settings a stack supports: field -> the values it allows (a field not listed may take any value: it is
# shared by the stack and changes nothing the stacked loop does differently).
TRAINER_SUPPORTED: dict[str, tuple] = {
    "strategy": ("auto",), "num_nodes": (1,), "precision": PRECISIONS, "logger": (None, True), "callbacks": (None, []),
    "fast_dev_run": (False, 0), "max_epochs": (None, -1), "min_epochs": (None,), "min_steps": (None,),
    "max_time": (None,), "limit_train_batches": (None, 1.0), "limit_val_batches": (None, 1.0),
    "overfit_batches": (0, 0.0), "check_val_every_n_epoch": (None,), "accumulate_grad_batches": (1,),
    "gradient_clip_algorithm": (None, "norm"), "detect_anomaly": (False,), "barebones": (False,), "plugins": (None,),
    "profiler": (None,), "sync_batchnorm": (False,), "reload_dataloaders_every_n_epochs": (0,),
    "enable_checkpointing": (None, True), "model_registry": (None,),
}
CHECKPOINT_SUPPORTED: dict[str, tuple] = {
    "monitor": (None,), "every_n_epochs": (None, 0), "train_time_interval": (None,), "save_on_train_epoch_end": (None,),
    "save_weights_only": (False,), "save_last": (None, True, False), "save_on_exception": (False,),
}


PER_RUN_VALUE = "<per run>"  # what the part of a config that a stack shares holds for a field each run keeps


class StackError(ValueError):
    """Runs that cannot train in one stack, or a run that cannot train in any; the message names the fields."""


def _get(config: Mapping, dotted: str) -> Any:
    for key in dotted.split("."):
        config = config.get(key) if isinstance(config, Mapping) else None
    return config


def _set(config: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        config = config.setdefault(key, {})
    config[last] = value


def _without_outputs(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_outputs(v) for k, v in value.items() if k not in OUTPUT_LOCATIONS}
    if isinstance(value, list):
        return [_without_outputs(v) for v in value]
    return value


def _exact_in(dtype: torch.dtype, value: Any) -> bool:
    """Whether `value` (a number; anything else counts as exact) is the same in `dtype` as in fp32, the precision the
    solo run's forward pass multiplies a Python number in."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    single = torch.tensor(float(value), dtype=torch.float32)
    return bool(single.to(dtype).float() == single)


def compute_dtype(resolved: Mapping) -> torch.dtype:
    """The dtype the forward pass multiplies activations in."""
    return torch.bfloat16 if str(_get(resolved, "trainer.precision")) == "bf16-mixed" else torch.float32


def shared_part(resolved: Mapping) -> dict:
    """The part of a resolved config that every run of its stack shares: all but PER_RUN and where it writes, with
    the model numbers kept where the compute dtype cannot hold them exactly, and whether NeuTRENO is on."""
    shared = _without_outputs(copy.deepcopy(dict(resolved)))
    dtype = compute_dtype(resolved)
    for field in PER_RUN:
        _set(shared, field, PER_RUN_VALUE)
    for field in MODEL_NUMBERS:
        if _exact_in(dtype, _get(resolved, field)):
            _set(shared, field, PER_RUN_VALUE)
    _set(shared, "model.config.neutreno_on", bool(_get(resolved, "model.config.neutreno_lambda")))
    return shared


def stack_key(resolved: Mapping) -> str:
    """Runs with equal keys may train in one stack."""
    return json.dumps(shared_part(resolved), sort_keys=True, default=str)


def stack_problem(resolved: Mapping) -> str | None:
    """Why a run cannot train in any stack (a setting the stacked loop does not support), or None."""
    trainer = resolved.get("trainer") or {}
    problems = [f"trainer.{name}={trainer.get(name)!r} (allowed: {list(allowed)})"
                for name, allowed in TRAINER_SUPPORTED.items() if trainer.get(name) not in allowed]
    checkpoint = resolved.get("checkpoint") or {}
    problems += [f"checkpoint.{name}={checkpoint.get(name)!r} (allowed: {list(allowed)})"
                 for name, allowed in CHECKPOINT_SUPPORTED.items() if checkpoint.get(name) not in allowed]
    devices = trainer.get("devices")
    if devices not in (1, "1") and not (devices == "auto" and trainer.get("accelerator") == "cpu"):
        problems.append(f"trainer.devices={devices!r} (allowed: 1; a stack trains on one device)")
    for name in ("max_steps", "val_check_interval"):
        value = trainer.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"trainer.{name}={value!r} (allowed: an integer >= 1, optimizer steps)")
    data = resolved.get("data") or {}
    tokens = resolved.get("global_batch_tokens")
    if tokens is not None and tokens != (data.get("micro_batch_size") or 0) * (data.get("seq_len") or 0):
        problems.append(f"global_batch_tokens={tokens!r} (allowed: null or one micro-batch's tokens; a stack does not "
                        "accumulate gradients)")
    if problems:
        return "a stacked run needs " + "; ".join(problems)
    return None


def check_stack(configs: Sequence[Mapping], names: Sequence[str]) -> None:
    """Refuse (StackError) runs that cannot train together, naming each run's unsupported settings and every field
    in which a run differs from the first beyond PER_RUN."""
    problems = [f"{name}: {problem}" for name, config in zip(names, configs, strict=True)
                if (problem := stack_problem(config))]
    first = shared_part(configs[0])
    for name, config in zip(names[1:], configs[1:], strict=True):
        differences = changed_fields(first, shared_part(config))
        if differences:
            # the runs' own values, where the shared part holds a field as per run in one of them
            own = {key: (_get(configs[0], key), _get(config, key)) if PER_RUN_VALUE in (a, b) else (a, b)
                   for key, (a, b) in differences.items()}
            fields = "; ".join(f"{key}: {a!r} -> {b!r}" for key, (a, b) in own.items())
            problems.append(f"{name} differs from {names[0]} in {fields}")
    if problems:
        numbers = ", ".join(MODEL_NUMBERS)
        raise StackError("these runs cannot train in one stack: " + "; ".join(problems) + ". Runs of a stack may "
                         f"differ only in {', '.join(PER_RUN)} and, where the compute dtype holds them exactly, "
                         f"{numbers} (model.config.neutreno_lambda set in all or none)")
