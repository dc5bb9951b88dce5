"""Callbacks the Slurm tests inject with `--trainer.callbacks+=slurm_probe.<Name>` (PYTHONPATH=tests/helpers)."""

import json
import os
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback


class RecordRank(Callback):
    """Writes `<run>/ranks/rank<global rank>.json`: how this process sees the cluster (Lightning's cluster
    environment, its rank and world size, the Slurm task it runs as) and the token ids of its first batch."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step != 0:
            return
        environment = getattr(trainer.strategy, "cluster_environment", None)  # None: a single-device run
        record = {
            "cluster_environment": type(environment).__name__ if environment is not None else None,
            "global_rank": trainer.global_rank,
            "local_rank": trainer.local_rank,
            "world_size": trainer.world_size,
            "slurm_procid": os.environ.get("SLURM_PROCID"),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "first_batch": batch["input_ids"].tolist(),
        }
        path = Path(trainer.default_root_dir) / "ranks" / f"rank{trainer.global_rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))


class HoldForRequeue(Callback):
    """Stands in for a job that is preempted mid-run. In the first run of a Slurm job only
    (SLURM_RESTART_COUNT unset): before optimizer step `step` starts, write `<run>/held` and wait until
    Lightning has received SIGTERM (what Slurm sends on requeue or preemption), then let Lightning stop.
    The requeued run (SLURM_RESTART_COUNT=1) trains straight through."""

    def __init__(self, step: int, timeout_s: float = 300.0):
        self.step = step
        self.timeout_s = timeout_s
        self.held = False

    def on_train_batch_start(self, trainer, *args, **kwargs):
        first_run = "SLURM_JOB_ID" in os.environ and os.environ.get("SLURM_RESTART_COUNT", "0") == "0"
        if self.held or not first_run or trainer.global_step < self.step:
            return
        self.held = True
        (Path(trainer.default_root_dir) / "held").write_text(f"{trainer.global_step}\n")
        deadline = time.monotonic() + self.timeout_s
        while not trainer.received_sigterm and time.monotonic() < deadline:
            time.sleep(0.1)
