"""What `fit` prints: plain progress lines where its output is a log (a grid run's logs/stdout.log), no bar redrawn
with escape codes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from lit_resformer.execution.jobs import RunJob, execute
from lit_resformer.training.run_dir import RunDir
from tests.helpers.experiments import tiny_experiment

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_a_grid_runs_log_has_plain_progress_lines_not_a_redrawn_bar(tmp_path, tiny_corpus, data_cache):
    run = RunDir(tmp_path / "g/vanilla/seed0")
    run.path.mkdir(parents=True)
    config = tiny_experiment(tmp_path / "experiment.yaml", tiny_corpus, data_cache,
                             trainer={"max_steps": 20, "enable_progress_bar": True})
    run.write_experiment(yaml.safe_load(config.read_text()))
    summary = execute(RunJob("g", "vanilla", 0, run.path, [sys.executable, "-m", "lit_resformer.cli", "fit"]),
                      env={"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert summary["status"] == "done", summary
    log = run.stdout_log.read_text()
    assert "\r" not in log and "\x1b" not in log, repr(log[-500:])
    progress = [line for line in log.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in progress] == [f"{step}/20" for step in range(1, 21)]
    assert all(" train/loss " in line and line.endswith(" steps/s") for line in progress)
    assert len(log) < 10_000  # ~200 KB of escape codes before
