"""A grid's `ladder:` block: OLMo-core's model ladder on one trunk per (arm, seed). The trunk warms up and holds the
peak learning rate (model.schedule: wsd, no decay), keeping a checkpoint at each rung's decay start; each rung is a
decay branch that resumes from its trunk's checkpoint there (model weights, optimizer, data order: the trunk's
StatefulDataLoader state) and decays linearly to its own budget, so that one trunk yields every budget, each
measured at the end of its own decay, and a rung at budget B has seen exactly B steps of data.

    ladder:
      budgets: [1500, 2500, 4000, 6000, 9000]   # trainer.max_steps of each rung (the grid's one matrix key)
      decay_fraction: 0.2                       # each rung decays over its last 20% of steps

A rung's config is the trunk's with trainer.max_steps = B and model.decay_start = B - round(decay_fraction x B): the
same config as a straight WSD run to B, which it equals step for step (the trunk's first decay_start steps are
that run's). So its run identity is a straight run's (the trunk is how it is computed, not what it is), it differs
by budget, and a grid that trains the same rung another way shares it. The runner trains the trunks first and
starts a rung once its trunk's checkpoint at the rung's decay start exists (`seed_branch`): it copies that
checkpoint as the rung's last.ckpt and the trunk's metrics before that step as the rung's first log, and resumes
(`--ckpt_path last`), exactly as a run killed at that step resumes; a rung killed later resumes from its own
checkpoints. branch.json in the rung's folder names its trunk and step.
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lit_resformer.training.checkpoint_reading import kept_checkpoint
from lit_resformer.training.run_dir import METRICS, RunDir, open_metrics
from lit_resformer.writing import atomic_write_json

LADDER_FIELDS = {"budgets", "decay_fraction"}
OVER = "trainer.max_steps"
TRUNK = "trunk"  # a trunk cell's name: <family>,trunk
BRANCH_FILE = "branch.json"


class LadderError(ValueError):
    """A `ladder:` block that cannot be used; the message names the field."""


@dataclass(frozen=True)
class Ladder:
    budgets: tuple[int, ...]  # ascending
    decay_fraction: float

    def decay_start(self, budget: int) -> int:
        return budget - round(self.decay_fraction * budget)

    @property
    def starts(self) -> list[int]:
        """The trunk's kept steps: each rung's decay start."""
        return [self.decay_start(b) for b in self.budgets]

    def matrix(self) -> dict:
        """The grid's matrix: each budget with its decay start."""
        return {OVER: {b: {"model.schedule": "wsd", "model.decay_start": self.decay_start(b)} for b in self.budgets}}

    def trunk_overrides(self) -> dict[str, Any]:
        """What a trunk cell sets over its family's overrides: no decay, to the last rung's start, kept there."""
        return {OVER: max(self.starts), "model.schedule": "wsd", "model.decay_start": None,
                "checkpoint.keep_steps": self.starts}

    def to_dict(self) -> dict:
        return {"budgets": list(self.budgets), "decay_fraction": self.decay_fraction, "decay_starts": self.starts}


def parse_ladder(raw: Any, where: str) -> Ladder | None:
    """Check a grid's `ladder:` block; LadderError names the problem."""
    if raw is None:
        return None
    where = f"{where}: ladder"
    if not isinstance(raw, dict) or set(raw) != LADDER_FIELDS:
        raise LadderError(f"{where} must be a mapping with fields {sorted(LADDER_FIELDS)}, got {raw!r}")
    budgets, fraction = raw["budgets"], raw["decay_fraction"]
    if (not isinstance(budgets, list) or len(budgets) < 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in budgets)
            or budgets != sorted(set(budgets))):
        raise LadderError(f"{where}.budgets must be at least two ascending, distinct step counts, got {budgets!r}")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise LadderError(f"{where}.decay_fraction must be a fraction in (0, 1), got {fraction!r}")
    ladder = Ladder(tuple(budgets), float(fraction))
    starts = ladder.starts
    if starts != sorted(set(starts)) or starts[0] < 1:
        raise LadderError(f"{where}: the rungs' decay starts {starts} must be distinct and positive")
    return ladder


@dataclass(frozen=True)
class BranchPoint:
    trunk: str  # the trunk cell
    step: int  # the rung's decay start: where it leaves the trunk


def trunk_cell(family: str) -> str:
    return f"{family},{TRUNK}"


def seed_branch(branch: RunDir, trunk: RunDir, step: int, trunk_name: str) -> bool:
    """Start a rung from its trunk: the trunk's checkpoint kept at `step` becomes the rung's last.ckpt and the
    trunk's logged metrics before `step` its first csv versions (those after it are the rung's own: a resumed run's
    later version wins from its first training step), so that the rung's folder reads as a run resumed at `step`.
    False (nothing written) when the trunk has not kept that checkpoint yet."""
    kept = kept_checkpoint(trunk.checkpoints_dir, step)
    if not kept.is_file():
        return False
    for index, source in enumerate(trunk.metric_files()):
        _copy_rows_before(source, branch.csv_dir / f"version_{index}" / METRICS, step)
    branch.checkpoints_dir.mkdir(parents=True, exist_ok=True)
    staged = branch.checkpoints_dir / f".{kept.name}.partial"
    shutil.copyfile(kept, staged)
    staged.replace(branch.last_checkpoint)
    atomic_write_json(branch.path / BRANCH_FILE, {"trunk": trunk_name, "step": step, "checkpoint": str(kept)})
    return True


def _copy_rows_before(source, target, step: int) -> None:
    """The rows of a metrics file logged before `step` (a step's row is logged at its index: the first `step`
    optimizer steps are rows 0 .. step - 1)."""
    with open_metrics(source) as f:
        reader = csv.DictReader(f)
        rows = [row for row in reader if row.get("step") not in (None, "") and int(float(row["step"])) < step]
        fields: Sequence[str] = reader.fieldnames or ["step"]
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
