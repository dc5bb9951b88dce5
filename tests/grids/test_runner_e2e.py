"""End to end with the real `lit-resformer fit`: a micro grid SIGKILLed mid-run and restarted ends
exactly like an uninterrupted grid; a diverging cell is recorded and the other cells finish."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from lit_resformer.runs.curves import read_metrics

pytestmark = pytest.mark.slow

CELLS = {
    "vanilla": {},
    "resformer": {"model.config.residual.target": "v"},
    "svformer": {"model.config.share.svformer": True},
    "boom": {"model.lr": 1.0e6, "model.warmup_steps": 0},  # diverges within a few steps
}


def micro_grid(tmp_path: Path, corpus: Path, cache: Path) -> Path:
    base = {
        "seed_everything": 0,
        "global_batch_tokens": None,
        "trainer": {
            "accelerator": "cpu", "devices": 1, "precision": "32-true", "max_steps": 60, "val_check_interval": 20,
            "check_val_every_n_epoch": None, "num_sanity_val_steps": 0, "log_every_n_steps": 1,
            "enable_model_summary": False, "gradient_clip_val": 1.0,
        },
        "checkpoint": {"every_n_train_steps": 20},
        "model": {"config": {"size": "tiny"}, "lr": 2.0e-3, "warmup_steps": 2},
        "data": {
            "source": "local", "path": str(corpus), "bpe_vocab_size": 300, "seq_len": 32, "micro_batch_size": 4,
            "val_sequences_per_domain": 4, "cache_dir": str(cache),
        },
    }
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    grid = tmp_path / "micro.yaml"
    grid.write_text(yaml.safe_dump({"name": "micro", "base": "base.yaml", "baseline": "vanilla", "seeds": [0], "cells": CELLS}, sort_keys=False))
    return grid


def start_grid(grid: Path, runs: Path) -> subprocess.Popen:
    # its own session, so the whole process group (runner and trainer) can be killed like a crashed machine
    return subprocess.Popen([sys.executable, "-m", "lit_resformer.cli", "grid", str(grid), "--runs-dir", str(runs)],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def checkpoint_step(path: Path) -> int | None:
    """The step of a complete checkpoint file, None while it is missing or still being written."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)["global_step"]
    except Exception:
        return None


def attempts(run_dir: Path) -> list[str]:
    return [line for line in (run_dir / "logs/stdout.log").read_text().splitlines() if line.startswith("===== attempt")]


def test_killed_grid_resumes_to_the_same_result(tmp_path, tiny_corpus, data_cache):
    grid = micro_grid(tmp_path, tiny_corpus, data_cache)
    runs = tmp_path / "runs"
    interrupted = runs / "micro/resformer/seed0"

    process = start_grid(grid, runs)
    deadline = time.time() + 600
    # Kill everything (like a crashed machine) once resformer, the second cell, has completely written
    # its first checkpoint (step 20 of 60) and trains on.
    while not checkpoint_step(interrupted / "checkpoints/last.ckpt"):
        assert process.poll() is None, "the grid ended before it could be interrupted"
        assert time.time() < deadline, "resformer never saved a checkpoint"
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert json.loads((interrupted / "summary.json").read_text())["status"] == "running"
    assert json.loads((runs / "micro/vanilla/seed0/summary.json").read_text())["status"] == "done"

    assert start_grid(grid, runs).wait(timeout=900) == 0
    for cell, expected in (("vanilla", 1), ("resformer", 2), ("svformer", 1), ("boom", 1)):
        assert len(attempts(runs / f"micro/{cell}/seed0")) == expected, cell
    assert "(resuming)" in attempts(interrupted)[1] and attempts(interrupted)[1].endswith("--ckpt_path last")
    summaries = {c: json.loads((runs / f"micro/{c}/seed0/summary.json").read_text()) for c in CELLS}
    assert summaries["resformer"]["status"] == "done" and summaries["resformer"]["resumed"]
    assert summaries["boom"]["status"] == "diverged" and summaries["boom"]["diverged_step"] is not None
    assert all(summaries[c]["status"] == "done" for c in ("vanilla", "resformer", "svformer"))
    assert summaries["svformer"]["kv_cache_bytes_per_token"] < summaries["vanilla"]["kv_cache_bytes_per_token"]
    report = (runs / "micro/report.md").read_text()
    assert f"diverged at step {summaries['boom']['diverged_step']}" in report

    clean = tmp_path / "clean"
    assert start_grid(grid, clean).wait(timeout=900) == 0
    for cell in ("vanilla", "resformer", "svformer"):
        resumed = read_metrics(runs / f"micro/{cell}/seed0")
        uninterrupted = read_metrics(clean / f"micro/{cell}/seed0")
        assert list(resumed.index) == list(uninterrupted.index)
        assert resumed["train/loss"].equals(uninterrupted["train/loss"]), cell
        val = [c for c in uninterrupted.columns if c.startswith("val/loss")]
        logged = resumed["val/loss"].notna()
        assert resumed.loc[logged, val].equals(uninterrupted.loc[logged, val]), cell
        # Known gap: Lightning saves the step-20 checkpoint before that step's validation (logged at
        # step 19) and does not repeat the validation on resume, so a kill between the two loses it.
        missing = set(uninterrupted.index[uninterrupted["val/loss"].notna() & ~logged])
        assert missing <= ({19} if cell == "resformer" else set()), (cell, missing)
        clean_summary = json.loads((clean / f"micro/{cell}/seed0/summary.json").read_text())
        for key in ("final_train_loss", "best_train_loss", "final_val_loss", "final_val_loss_by_domain", "steps"):
            assert summaries[cell][key] == clean_summary[key], (cell, key)


def test_eval_and_analysis_hooks_feed_the_report(tmp_path, tiny_corpus, data_cache, monkeypatch):
    """`--eval --analyze`: every finished run is scored with lm-eval (the project's tiny offline task)
    and analysed; the report gains the zero-shot and attention sections."""
    from lit_resformer.grids import GridOptions, load_grid, run_grid
    from lit_resformer.reports import write_report

    grid = micro_grid(tmp_path, tiny_corpus, data_cache)
    spec = yaml.safe_load(grid.read_text())
    spec["cells"] = {"vanilla": {}, "resformer": CELLS["resformer"]}
    spec["overrides"] = {
        "trainer.max_steps": 8, "trainer.val_check_interval": 8, "checkpoint.every_n_train_steps": 8,
        # the analysis samples 16 validation sequences
        "data.holdout_fraction": 0.3, "data.val_sequences_per_domain": 10,
    }
    grid.write_text(yaml.safe_dump(spec, sort_keys=False))
    monkeypatch.setenv("LIT_RESFORMER_EVAL_TASKS", "lrf_tiny_mc")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    outcome = run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", post_training=("eval", "analyze",),
                                                    report=write_report), progress=False)
    assert outcome.failed == []
    for cell in ("vanilla", "resformer"):
        run = tmp_path / f"runs/micro/{cell}/seed0"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["eval"]["status"] == "done" and summary["analyze"]["status"] == "done", summary
        assert (run / "eval/results.json").is_file() and (run / "analysis/analysis.json").is_file()
    report = (tmp_path / "runs/micro/report.md").read_text()
    assert "## Zero-shot accuracy" in report and "lrf_tiny_mc" in report
    assert "## Attention concentration" in report
