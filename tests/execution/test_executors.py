"""The pools that run jobs: the devices and threads each slot of the local pool gives its run, and the progress bar
over a grid's jobs, in the steps their runs train."""

import time

import pytest

from lit_resformer.execution.executors import LocalExecutor, StepProgress, run_with_progress
from lit_resformer.execution.jobs import RunJob
from lit_resformer.runs.run_dir import RunDir


def test_local_pool_slots():
    assert [s["CUDA_VISIBLE_DEVICES"] for s in LocalExecutor(devices=["4", "5", "6", "7", "8"], gpus_per_run=2).slots] == ["4,5", "6,7"]
    cpu = LocalExecutor(devices=[], cpu_slots=2).slots
    assert len(cpu) == 2 and all(s["CUDA_VISIBLE_DEVICES"] == "" for s in cpu)
    with pytest.raises(ValueError, match="gpus_per_run=4"):
        LocalExecutor(devices=["0", "1"], gpus_per_run=4)


def job_at(tmp_path, name: str, max_steps, logged: int, train: bool = True) -> RunJob:
    """A grid job whose run states max_steps and has logged `logged` steps (a run resumed from a checkpoint)."""
    run = RunDir(tmp_path / name)
    run.write_experiment({"trainer": {"max_steps": max_steps}} if max_steps is not None else {"trainer": {}})
    log_steps(run, 0, logged)
    return RunJob("g", name, 0, run.path, ["fit"], train=train)


def log_steps(run: RunDir, version: int, steps: int, first: int = 0) -> None:
    path = run.csv_dir / f"version_{version}" / "metrics.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("step,train/loss\n" + "".join(f"{s},1.0\n" for s in range(first, steps)))


def test_step_progress_counts_what_each_run_has_trained_and_what_it_will(tmp_path):
    resumed, fresh = job_at(tmp_path, "resumed", 60, logged=40), job_at(tmp_path, "fresh", 40, logged=0)
    post_only = job_at(tmp_path, "post", 30, logged=30, train=False)  # trained: only its analysis is left
    steps = StepProgress.of([resumed, fresh, post_only])
    assert (steps.total, steps.done()) == (100, 40)
    log_steps(RunDir(fresh.run_dir), 0, 25)
    assert steps.done() == 65
    log_steps(RunDir(resumed.run_dir), 1, 38, first=30)  # resumed at step 30: it logs steps 30-37 again
    assert steps.done() == 65  # the bar does not step back
    steps.finish(fresh)  # done or failed, none of its steps are still to come
    assert steps.done() == 80
    assert StepProgress.of([resumed, job_at(tmp_path, "epochs", None, logged=0)]) is None  # a bar then counts runs
    assert StepProgress.of([post_only]) is None


class TrainingPool:
    """Trains each job to its max_steps in two halves, then reports it done."""

    def run(self, jobs, on_done):
        for job in jobs:
            run = RunDir(job.run_dir)
            total, logged = run.read_experiment()["trainer"]["max_steps"], run.steps_logged()
            log_steps(run, 1, logged + (total - logged) // 2, first=logged)
            time.sleep(0.05)  # the poll sees the half
            log_steps(run, 1, total, first=logged)
            on_done(job, {"status": "done"}, None)


def test_the_grid_bar_counts_steps_from_those_a_resumed_run_already_has(tmp_path, capsys):
    jobs = [job_at(tmp_path, "resumed", 60, logged=40), job_at(tmp_path, "fresh", 40, logged=0)]
    run_with_progress(TrainingPool(), jobs, lambda job, summary, error: ("done", None), "grid g", True, poll_s=0.01)
    shown = capsys.readouterr().err.replace("\r", "\n")
    assert "grid g:  40%" in shown and " 40/100 " in shown  # the bar starts where the runs are
    assert " 100/100 " in shown and "runs=2/2, done=2" in shown
