"""One run's job, executed in a process of its own: what its summary records while it trains, and a post-training
step that fails."""

import json

import pytest

from lit_resformer.execution import jobs as job_module
from lit_resformer.execution.jobs import RunJob, execute
from lit_resformer.runs.run_dir import RunDir


def test_a_running_attempt_writes_its_wall_time_down_as_it_goes(tmp_path, monkeypatch):
    """An attempt killed with its runner (SIGKILL, the machine going away) cannot record its time when it ends: the
    summary carries the time so far while it trains, so the run's compute is known to within a heartbeat."""
    monkeypatch.setattr(job_module, "HEARTBEAT_S", 0.2)
    run = RunDir(tmp_path / "g/vanilla/seed0")
    run.path.mkdir(parents=True)
    run.write_summary({"status": "interrupted", "attempts": 1, "wall_time_sec": 100.0})  # the first attempt's time
    # the stand-in trainer: `sh -c SCRIPT --config FILE --trainer.default_root_dir RUN` ($3 is the run directory)
    trainer = ["sh", "-c", 'sleep 1.5; cp "$3/summary.json" "$3/while_training.json"']
    execute(RunJob("g", "vanilla", 0, run.path, trainer), env={"OMP_NUM_THREADS": "1"})
    seen = json.loads((run.path / "while_training.json").read_text())
    assert seen["status"] == "running" and seen["attempts"] == 2
    final = RunDir(run.path).read_summary()["wall_time_sec"]
    assert 100.4 < seen["wall_time_sec"] < final  # the earlier attempt's time plus this one's so far (beats each 0.5 s)
    assert final >= 101.5


@pytest.mark.slow  # the step's process imports torch and Lightning afresh: ~10 s idle, 40 s on a busy machine
def test_a_post_training_step_runs_in_its_own_process_and_its_failure_is_recorded(tmp_path):
    run = RunDir(tmp_path / "g/vanilla/seed0")
    run.path.mkdir(parents=True)
    run.write_summary({"status": "done"})
    summary = execute(RunJob("g", "vanilla", 0, run.path, ["false"], train=False, post_training=("analyze",)),
                      env={"OMP_NUM_THREADS": "1"})
    assert summary["status"] == "done"  # the run stands; its step failed
    assert summary["analyze"]["status"] == "failed"
    assert summary["analyze"]["error"] == f"ValueError: {run.path} has no checkpoints/last.ckpt to analyse"
    log = (run.logs_dir / "analyze.log").read_text()
    assert "Traceback" in log and "analyze_run_dir" in log  # the step's own output and traceback, in its log
    assert RunDir(run.path).read_summary()["analyze"] == summary["analyze"]
