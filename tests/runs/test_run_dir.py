"""The run directory: which checkpoint a run resumes from, merged metrics, the divergence record."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
import torch
import yaml

from lit_resformer.runs.checkpoint_reading import checkpoint_problem
from lit_resformer.runs.run_dir import ResumePoint, RunDir, read_yaml


def save_training_checkpoint(path: Path, step: int, mtime: float) -> Path:
    """The keys Lightning writes into a training checkpoint, with a recognisable step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {"w": torch.full((4,), float(step))}, "global_step": step, "loops": {}}, path)
    os.utime(path, (mtime, mtime))
    return path


def truncate(path: Path) -> None:
    """Cut the file in half (a process killed while writing it), keeping its modification time."""
    stat = path.stat()
    path.write_bytes(path.read_bytes()[: stat.st_size // 2])
    os.utime(path, (stat.st_atime, stat.st_mtime))


def test_resume_point_is_last_then_the_newest_intact_step_checkpoint(tmp_path):
    run = RunDir(tmp_path / "run")
    assert run.resume_point() is None and not run.has_checkpoint()
    older = save_training_checkpoint(run.checkpoints_dir / "step000002.ckpt", 2, mtime=1_000)
    newer = save_training_checkpoint(run.checkpoints_dir / "step000004.ckpt", 4, mtime=2_000)
    save_training_checkpoint(run.last_checkpoint, 4, mtime=2_001)
    assert run.step_checkpoints() == [newer, older]
    assert run.resume_point().path == run.last_checkpoint and run.resume_point().fallback_reason is None

    truncate(run.last_checkpoint)
    point = run.resume_point()
    assert point.path == newer
    assert "last.ckpt: not a readable checkpoint" in point.fallback_reason

    truncate(newer)
    assert run.resume_point().path == older
    truncate(older)
    with pytest.raises(ValueError, match="no intact checkpoint.*last.ckpt.*step000004.ckpt.*step000002.ckpt"):
        run.resume_point()


def test_resume_point_is_the_newer_of_last_and_the_interrupts_checkpoint(tmp_path):
    """A run stopped by Ctrl-C after its last step checkpoint resumes from the interrupt's checkpoint; one that saved
    step checkpoints since it resumed from it, from those; the interrupt's checkpoint is never a pruned step."""
    run = RunDir(tmp_path / "run")
    save_training_checkpoint(run.last_checkpoint, 4, mtime=1_000)
    save_training_checkpoint(run.interrupt_checkpoint, 7, mtime=2_000)
    assert run.has_checkpoint() and run.step_checkpoints() == []
    assert run.resume_point() == ResumePoint(run.interrupt_checkpoint)
    os.utime(run.last_checkpoint, (3_000, 3_000))
    assert run.resume_point() == ResumePoint(run.last_checkpoint)
    truncate(run.last_checkpoint)
    assert run.resume_point().path == run.interrupt_checkpoint


def test_checkpoint_problem_names_what_is_wrong(tmp_path):
    good = save_training_checkpoint(tmp_path / "good.ckpt", 1, mtime=1_000)
    assert checkpoint_problem(good) is None
    weights_only = tmp_path / "weights.ckpt"
    torch.save({"state_dict": {}}, weights_only)
    assert checkpoint_problem(weights_only) == "not a Lightning training checkpoint (missing ['global_step', 'loops'])"
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"not a checkpoint")
    assert checkpoint_problem(junk).startswith("not a readable checkpoint")


def test_run_of_a_checkpoint(tmp_path):
    assert RunDir.from_checkpoint(tmp_path / "runs/a/checkpoints/last.ckpt") == RunDir(tmp_path / "runs/a")
    assert RunDir.from_checkpoint(tmp_path / "exported/model.ckpt") is None


def write_version(run: RunDir, version: int, rows: list[dict]) -> None:
    path = run.csv_dir / f"version_{version}" / "metrics.csv"
    path.parent.mkdir(parents=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "train/loss", "val/loss"])
        writer.writeheader()
        writer.writerows(rows)


def test_restarts_are_merged_as_the_uninterrupted_run(tmp_path):
    run = RunDir(tmp_path / "run")
    # killed after logging step 5, resumed from the step-3 checkpoint: steps 4 and 5 are trained again
    write_version(run, 0, [{"step": s, "train/loss": 10 - s} for s in range(6)] + [{"step": 3, "val/loss": 7.5}])
    write_version(run, 1, [{"step": s, "train/loss": 20 - s} for s in range(4, 8)])
    metrics = run.read_metrics()
    assert metrics["train/loss"] == [(0, 10), (1, 9), (2, 8), (3, 7), (4, 16), (5, 15), (6, 14), (7, 13)]
    assert metrics["val/loss"] == [(3, 7.5)]


def test_steps_logged_reads_the_newest_files_last_whole_row(tmp_path):
    run = RunDir(tmp_path / "run")
    assert run.steps_logged() == 0  # nothing logged yet
    write_version(run, 0, [{"step": s, "train/loss": 10.0} for s in range(6)])
    assert run.steps_logged() == 6  # rows 0..5: six optimizer steps
    # resumed: the newest version counts, and it is longer than the tail the method reads
    write_version(run, 1, [{"step": s, "train/loss": 1.0 / (s + 1)} for s in range(4, 3000)] + [{"step": 2999,
                                                                                                   "val/loss": 4.5}])
    assert run.steps_logged() == 3000
    newest = run.csv_dir / "version_1" / "metrics.csv"
    with open(newest, "a") as f:
        f.write("3000,0.0")  # a row still being written: one column short
    assert run.steps_logged() == 3000
    header_only = run.csv_dir / "version_2" / "metrics.csv"
    header_only.parent.mkdir()
    header_only.write_text("step,train/loss,val/loss\n")
    assert run.steps_logged() == 3000  # resumed again, nothing flushed yet: the version before still counts
    assert RunDir(tmp_path / "fresh").steps_logged() == 0


def test_divergence_record_and_its_fallback(tmp_path):
    run = RunDir(tmp_path / "run")
    assert run.diverged_step() is None
    write_version(run, 0, [{"step": 0, "train/loss": 5.0}, {"step": 1, "train/loss": float("nan")}])
    assert run.diverged_step() == 1  # a trainer that logged the non-finite loss before stopping
    run.record_divergence(7, float("inf"))
    assert run.diverged_step() == 7


def test_a_run_file_reads_as_pyyamls_safe_loader_reads_it(tmp_path):
    """read_yaml (libyaml's parser where PyYAML has it) gives what yaml.safe_load gives, on one committed run
    config of every grid (what the board reads) and on the scalars a safe schema resolves."""
    results = Path(__file__).resolve().parents[2] / "docs" / "results"
    configs = [next(grid.glob("*/seed*/config.yaml"), None) for grid in sorted(results.iterdir()) if grid.is_dir()]
    configs = [c for c in configs if c is not None]
    assert len(configs) > 20
    tricky = tmp_path / "tricky.yaml"
    tricky.write_text("a: 1e-3\nb: 2.0e-3\nc: .inf\nd: null\ne: ~\nf: yes\ng: '007'\nh: 0x1f\ni: [1, {j: k}]\n")
    for path in [*configs, tricky]:
        assert read_yaml(path) == yaml.safe_load(path.read_text()), path
