"""`RunCheckpoint`: Lightning's ModelCheckpoint, configured and tidied so that a run's checkpoint folder always holds
what eval, analysis and resuming expect: last.ckpt is the newest checkpoint, at most `save_top_k` step checkpoints,
and no partial files.

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
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_resformer.runs.run_dir import KEPT_PREFIX, kept_checkpoint, step_checkpoints_in
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
