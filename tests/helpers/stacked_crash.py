"""`lit-resformer fit-stacked` SIGKILLed once its runs have taken a given number of optimizer steps (no cleanup, like
an OOM kill or a preemption): `python stacked_crash.py STEP <fit-stacked arguments>`."""

import os
import signal
import sys

from lit_resformer.stacking import trainer

STEP = int(sys.argv[1])
completed = trainer.StackedRun.batch_completed


def batch_completed(self) -> None:
    completed(self)
    if self.trainer.global_step >= STEP:
        os.kill(os.getpid(), signal.SIGKILL)


trainer.StackedRun.batch_completed = batch_completed
trainer.main(sys.argv[2:])
