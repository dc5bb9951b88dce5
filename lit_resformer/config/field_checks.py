"""The checks of a parsed `fit` config that need neither torch nor Lightning: each field's range, the fields against
each other (sequence length, batch divisibility, schedule), the model config's own checks, and whether the chosen
accelerator exists here. `fit` runs them twice, with the same words: before Lightning is imported, on the recorded
copy of its parser (lit_resformer.config.quick_check), and after its own parser
(lit_resformer.training.config_rules), which the grids' cell checks use too."""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import platform
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lit_resformer.model.config import ModelConfig


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: Any) -> bool:
    return _number(value) and value > 0


# Field -> (what it allows, in words; the test of a value that is not null). The ranges that the classes taking these
# fields refuse when they are built (Lightning's Trainer and ModelCheckpoint, LMDataModule, LitResFormer,
# RunCheckpoint), stated here so that a value out of range is refused before they are imported
# (tests/config/test_quick_check.py holds each range to its class's own check).
FIELD_RANGES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "trainer.max_steps": ("an integer >= -1 (-1: no limit)", lambda v: _integer(v) and v >= -1),
    "trainer.max_epochs": ("an integer >= -1 (-1: no limit) or null", lambda v: _integer(v) and v >= -1),
    "trainer.num_nodes": ("an integer >= 1", lambda v: _integer(v) and v >= 1),
    "trainer.reload_dataloaders_every_n_epochs": ("an integer >= 0", lambda v: _integer(v) and v >= 0),
    "checkpoint.save_top_k": ("an integer >= -1 (-1: every checkpoint)", lambda v: _integer(v) and v >= -1),
    "checkpoint.every_n_train_steps": ("an integer >= 0 or null (0: none)", lambda v: _integer(v) and v >= 0),
    "checkpoint.keep_steps": ("a list of step numbers >= 1 or null",
                              lambda v: isinstance(v, list) and all(_integer(s) and s >= 1 for s in v)),
    "data.seq_len": ("an integer >= 1", lambda v: _integer(v) and v >= 1),
    "data.micro_batch_size": ("an integer >= 1", lambda v: _integer(v) and v >= 1),
    "data.max_hub_tokens": ("an integer >= 1", lambda v: _integer(v) and v >= 1),
    "data.num_workers": ("an integer >= 0", lambda v: _integer(v) and v >= 0),
    "data.val_sequences_per_domain": ("an integer >= 1 or null", lambda v: _integer(v) and v >= 1),
    "data.seed": ("an integer >= 0 or null (the run's seed)", lambda v: _integer(v) and v >= 0),
    "data.holdout_fraction": ("a number in (0, 0.5)", lambda v: _number(v) and 0 < v < 0.5),
    "model.lr": ("a finite number > 0", _positive),
    "model.eps": ("a finite number > 0", _positive),
    "model.mix_lr": ("a finite number > 0 or null", _positive),
    "model.muon_lr_mult": ("a finite number > 0 or null", _positive),
    "model.head_lr_mult": ("a finite number > 0 or null", _positive),
    "model.embed_lr_mult": ("a finite number > 0 or null", _positive),
    "model.value_embed_lr_mult": ("a finite number > 0 or null", _positive),
    "model.muon_momentum": ("a number in [0, 1)", lambda v: _number(v) and 0 <= v < 1),
    "model.warmup_steps": ("an integer >= 0", lambda v: _integer(v) and v >= 0),
    "model.final_lr_ratio": ("a number in [0, 1]", lambda v: _number(v) and 0 <= v <= 1),
}


def value_at(cfg: Any, key: str) -> Any:
    """The value of a dotted key in a parsed config (jsonargparse Namespace or nested dicts); None where absent."""
    node = cfg
    for part in key.split("."):
        node = node.get(part) if hasattr(node, "get") else None
        if node is None:
            return None
    return node


def check_ranges(cfg: Any) -> None:
    """ValueError naming the first field of FIELD_RANGES whose value is out of its range."""
    for key, (allowed, within) in FIELD_RANGES.items():
        value = value_at(cfg, key)
        if value is not None and not within(value):
            raise ValueError(f"{key}={value!r} is out of range: it takes {allowed}")


def model_config(cfg: Any) -> ModelConfig:
    """The run's ModelConfig from a parsed config. vocab_size is linked from the tokenizer when the classes are
    built, so before that any value stands in for it."""
    fields = cfg.model.config
    fields = fields.as_dict() if hasattr(fields, "as_dict") else dict(vars(fields))
    try:
        return ModelConfig(**{**fields, "vocab_size": fields.get("vocab_size") or 1})
    except ValueError as err:
        raise ValueError(f"invalid model config (model.config): {err}") from None


def world_size(trainer: Mapping[str, Any], gpus: int | None) -> int | None:
    """The processes a run trains in: devices per node x nodes. `gpus`: how many GPUs this machine has, which
    `devices: auto` or -1 uses (else one CPU process); None when that is needed but `gpus` is not known."""
    devices, nodes = trainer.get("devices", "auto"), int(trainer.get("num_nodes") or 1)
    if isinstance(devices, (list, tuple)):
        return len(devices) * nodes
    if str(devices).lstrip("-").isdigit() and int(devices) > 0:
        return int(devices) * nodes
    if trainer.get("accelerator", "auto") not in ("auto", "gpu", "cuda"):
        return nodes
    return None if gpus is None else (gpus or 1) * nodes


def check_experiment(cfg: Any, gpus: int | None) -> None:
    """Every check of a parsed config that needs no torch: ranges, the model config, and the checks across fields
    that the parser cannot express; derives trainer.accumulate_grad_batches from global_batch_tokens. `gpus`: the
    GPUs this machine has (None: not known, and the batch divisibility is left to the check that knows them)."""
    check_ranges(cfg)
    preview = model_config(cfg)
    seq_len = cfg.data.seq_len
    if seq_len > preview.max_seq_len:
        raise ValueError(f"data.seq_len={seq_len} exceeds model.config.max_seq_len={preview.max_seq_len}; "
                         f"lower data.seq_len or raise model.config.max_seq_len")
    tokens = cfg.global_batch_tokens
    processes = world_size(dict(vars(cfg.trainer)), gpus)
    if tokens is not None and processes is not None:
        per_step = cfg.data.micro_batch_size * seq_len * processes
        if tokens % per_step:
            raise ValueError(f"global_batch_tokens={tokens} is not divisible by data.micro_batch_size x "
                             f"data.seq_len x devices = {per_step}")
        cfg.trainer.accumulate_grad_batches = tokens // per_step
    decay_start, max_steps = cfg.model.get("decay_start"), cfg.trainer.max_steps
    if decay_start is not None and max_steps is not None and max_steps > 0 and decay_start >= max_steps:
        raise ValueError(f"model.decay_start={decay_start} is not before trainer.max_steps={max_steps}: the decay "
                         f"would never run; leave it null to hold the peak to the end")


# --------------------------------------------------------------------------------------------- the accelerator
def torch_build() -> dict[str, str | None] | None:
    """The installed torch's version and the CUDA / HIP versions it was built for (None: built without), read from
    its version file without importing it (importing torch takes seconds); None when torch is not found."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    version_file = Path(spec.origin).with_name("version.py")
    if not version_file.is_file():
        return None
    values: dict[str, str | None] = {}
    for node in ast.parse(version_file.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value
    return {"version": values.get("__version__"), "cuda": values.get("cuda"), "hip": values.get("hip")}


def visible_gpus() -> int | None:
    """0 when this process certainly sees no CUDA GPU (torch built without CUDA or HIP, CUDA_VISIBLE_DEVICES
    hiding them all, or on Linux no GPU device file); None when only torch itself could tell how many."""
    build = torch_build()
    if build is not None and build["cuda"] is None and build["hip"] is None:
        return 0
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return 0
    if sys.platform.startswith("linux") and not any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")):
        return 0
    return None


def accelerator_problem(accelerator: Any) -> str | None:
    """Why `trainer.accelerator` cannot run on this machine, in one line naming the field and what can; None when it
    can or only Lightning can tell (an accelerator object, a GPU that may be there)."""
    name = accelerator.lower() if isinstance(accelerator, str) else None
    alternatives = "use trainer.accelerator: cpu (or auto, which takes a GPU where there is one)"
    if name == "mps" or (name == "gpu" and sys.platform == "darwin"):
        if sys.platform == "darwin" and platform.machine() == "arm64":
            return None
        return f"trainer.accelerator={accelerator!r}: Apple's GPU (mps) needs an Apple-silicon Mac; {alternatives}"
    if name not in ("gpu", "cuda") or visible_gpus() != 0:
        return None
    build = torch_build()
    if build is not None and build["cuda"] is None and build["hip"] is None:
        why = f"this torch ({build['version']}) is built without CUDA"
    elif os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        why = f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU"
    else:
        why = "this machine has no GPU device (/dev/nvidiactl)"
    return f"trainer.accelerator={accelerator!r}: no GPU can be used here ({why}); {alternatives}"
