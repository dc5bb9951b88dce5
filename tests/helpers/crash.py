"""Callbacks that tests inject through `--trainer.callbacks+=` to crash a run at a known point."""

import os
import signal

from lightning.pytorch.callbacks import Callback


class KillAtStep(Callback):
    """SIGKILL the process (no cleanup, like an OOM kill or a preemption) once `step` optimizer steps are done."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, *args, **kwargs):
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class InterruptAtStep(Callback):
    """Ctrl-C (SIGINT to the process) in the middle of a step once `step` optimizer steps are done: before the
    backward pass of the step under way, where a user's Ctrl-C most often lands."""

    def __init__(self, step: int):
        self.step = step

    def on_before_backward(self, trainer, *args, **kwargs):
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGINT)
