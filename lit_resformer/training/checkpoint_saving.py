"""`RunCheckpoint`: Lightning's ModelCheckpoint, configured and tidied so that a run's checkpoint folder always holds
what eval, analysis and resuming expect: last.ckpt is the newest checkpoint, at most `save_top_k` step checkpoints,
and no partial files. `InterruptCheckpoint`: a Lightning checkpoint callback saving what a run has trained when it
stops on Ctrl-C or an error, as exactly as a step checkpoint.

Lightning alone leaves three kinds of debris, each fixed here:
- a file of the same name already there (a run folder moved or copied, a changed checkpoint interval) makes it write
  `last-v1.ckpt` beside a stale `last.ckpt`: versioned names are off (`enable_version_counter: false`, a default of
  the CLI), so a save replaces the file of its name;
- the checkpoint a run resumed from, and those of a folder it was moved from, are never deleted, so step checkpoints
  pile up beyond `save_top_k`: the folder is pruned at the start of training and after every save;
- its writes stage the whole file in the system's temporary folder (fsspec's transaction), where a process killed
  mid-write leaves it for good: checkpoints are written through a temporary file beside the target
  (`AtomicCheckpointIO`), and the ones a killed write left are removed at the start of training.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info

from lit_resformer.runs.run_dir import (
    INTERRUPT_CHECKPOINT,
    KEPT_PREFIX,
    RunDir,
    kept_checkpoint,
    step_checkpoints_in,
)
from lit_resformer.writing import TEMPORARY_SUFFIX, atomic_open


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save into a temporary file in the checkpoint's own folder, renamed over the target when complete."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        # not synced to disk: a killed process loses nothing either way, and Lightning's own write does not sync
        with atomic_open(path, sync=False) as f:
            torch.save(checkpoint, f)


class RunCheckpoint(ModelCheckpoint):
    """ModelCheckpoint whose folder holds last.ckpt (the newest checkpoint), at most `save_top_k` step checkpoints
    when nothing is monitored, and no temporary files of killed writes; and, at each of `keep_steps`, a checkpoint
    that is never pruned (`kept_checkpoint`): where a ladder's decay branches start from its trunk."""

    def __init__(self, *args, keep_steps: list[int] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if any(isinstance(step, bool) or not isinstance(step, int) or step < 1 for step in keep_steps or ()):
            raise ValueError(f"checkpoint.keep_steps must be positive step numbers, got {keep_steps!r}")
        self.keep_steps = frozenset(keep_steps or ())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        step = trainer.global_step
        # the first batch end that sees the step is the one right after its optimizer step (with gradient
        # accumulation the next micro-batches see it too: the file is there by then)
        if step in self.keep_steps and self.dirpath is not None and not kept_checkpoint(self.dirpath, step).is_file():
            trainer.save_checkpoint(kept_checkpoint(self.dirpath, step))

    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # a plugin the user chose is kept
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if trainer.is_global_zero and self.dirpath is not None:
            for leftover in Path(self.dirpath).glob(f".*{TEMPORARY_SUFFIX}"):
                leftover.unlink(missing_ok=True)
        # the checkpoint just resumed from stays until a newer one is saved
        self._prune(trainer, keep=trainer.ckpt_path)

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        self._prune(trainer)

    def _prune(self, trainer, keep: str | Path | None = None) -> None:
        """Delete step checkpoints beyond the newest `save_top_k` (only when no metric decides which to keep)."""
        if not trainer.is_global_zero or self.dirpath is None or self.monitor is not None or self.save_top_k < 1:
            return
        protected = Path(keep).resolve() if keep else None
        pruned = [p for p in step_checkpoints_in(self.dirpath) if not p.name.startswith(KEPT_PREFIX)]
        for stale in pruned[self.save_top_k:]:
            if stale.resolve() != protected:
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()


class InterruptCheckpoint(Checkpoint):
    """A checkpoint saved when training stops on an exception (Ctrl-C, SIGTERM, an error), in the `on_exception` hook
    Lightning calls then, to INTERRUPT_CHECKPOINT in the checkpoints folder, where `--ckpt_path last` takes it when it
    is the newest (RunDir.resume_point); resuming from it continues exactly as the uninterrupted run: the same
    weights, optimizer and schedule, the same data order.

    An exception can stop training anywhere in a step, but the weights change only in the optimizer's update: before
    that update begins, they are those of the last step done, and only the loops' progress and the data loader's
    position (both in the checkpoint's `loops`) have moved on, into the step under way. So the loops' state is kept
    at the end of every optimizer step, as a step checkpoint saves it, and the interrupt's checkpoint carries that
    state: resumed, the run trains the interrupted step again from its first micro-batch. Nothing is saved when the
    update itself was under way (the weights may be half-updated: the run resumes from its last checkpoint), when
    nothing was trained since the run started or resumed, when the run diverged (a diverged model is never saved),
    or with several processes (their saves would wait on each other). A run that ends normally removes the file: its
    last.ckpt is newer.

    This is Lightning's OnExceptionCheckpoint (save in `on_exception`, remove in `teardown`) with the loops kept at a
    step's end; not a subclass of it, because Lightning turns every `fit` with an OnExceptionCheckpoint and no
    checkpoint into a `fit(ckpt_path="last")` (Trainer._checkpoint_connector._select_ckpt_path): a fresh run would
    resume whatever its checkpoint folder holds, with two warnings, one the "save_last=True" hint."""

    def __init__(self, dirpath: str | Path):
        self.ckpt_path = Path(dirpath) / INTERRUPT_CHECKPOINT
        self._start_step: int | None = None
        self._done: tuple[int, dict] | None = None  # (step, the fit loop's state) at the end of the last step done
        self._updating_from: int | None = None  # the step whose optimizer update began and has not ended
        self._saving: dict | None = None  # the loops' state the checkpoint being saved carries

    def on_train_start(self, trainer, pl_module) -> None:
        self._start_step = trainer.global_step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self._updating_from = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # the first batch end that sees a step is the one right after its update (as RunCheckpoint's keep_steps)
        if trainer.global_step != (self._done[0] if self._done else self._start_step):
            self._done = (trainer.global_step, copy.deepcopy(trainer.fit_loop.state_dict()))

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        step = trainer.global_step
        if self._done is None or self._start_step is None or step == self._start_step or trainer.world_size > 1:
            return
        if RunDir(trainer.default_root_dir).divergence_file.is_file():
            return
        if self._done[0] != step or self._updating_from == step:
            rank_zero_info(f"{type(exception).__name__} during the optimizer update of step {step + 1}: no "
                           f"checkpoint saved (its weights may be half-updated); --ckpt_path last resumes from the "
                           f"run's last checkpoint")
            return
        self._saving = self._done[1]
        try:
            trainer.save_checkpoint(self.ckpt_path)
        finally:
            self._saving = None
        if trainer.is_global_zero:
            print(f"stopped by {type(exception).__name__} at step {step}: checkpoint saved to {self.ckpt_path}; "
                  f"resume the run ({trainer.default_root_dir}) with --ckpt_path last", flush=True)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        if self._saving is not None:
            checkpoint["loops"]["fit_loop"] = self._saving

    def teardown(self, trainer, pl_module, stage: str) -> None:
        trainer.strategy.remove_checkpoint(self.ckpt_path)  # the run ended: its last.ckpt is newer
