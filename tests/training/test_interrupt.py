"""Nothing trained is lost to Ctrl-C: the interrupt's checkpoint (InterruptCheckpoint, Lightning's
OnExceptionCheckpoint) is what `--ckpt_path last` resumes from, and the resumed run is the uninterrupted one, loss for
loss; `fit` says where its run directory and checkpoint are."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest

from lit_resformer.cli import main
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.training.checkpoint_saving import InterruptCheckpoint
from tests.helpers.experiments import experiment, fit, fit_crashing, read_metrics


def train_steps(path) -> list[int]:
    with open(path, newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]


@pytest.mark.integration
def test_ctrl_c_mid_step_resumes_where_it_stopped_as_if_never_stopped(tmp_path, tiny_corpus, data_cache, capsys,
                                                                      recwarn):
    """Ctrl-C during step 11 of a run that saves a checkpoint every 50 steps: the checkpoint of the 10 steps done is
    saved, `--ckpt_path last` resumes from it at step 10, and the run ends with the uninterrupted run's losses."""
    config = experiment(tmp_path, tiny_corpus, data_cache, trainer={"max_steps": 14},
                        checkpoint={"every_n_train_steps": 50})
    straight, stopped = tmp_path / "straight", RunDir(tmp_path / "stopped")
    fit(config, straight)
    done = fit_crashing(config, stopped.path, "InterruptAtStep", 10)
    assert done.returncode == 1, done.stderr[-2000:]  # Lightning's graceful shutdown
    assert (f"stopped by KeyboardInterrupt at step 10: checkpoint saved to {stopped.interrupt_checkpoint}; resume "
            f"the run ({stopped.path}) with --ckpt_path last") in done.stdout
    assert stopped.interrupt_checkpoint.is_file() and not stopped.last_checkpoint.exists()
    assert stopped.resume_point().path == stopped.interrupt_checkpoint

    capsys.readouterr()
    fit(config, stopped.path, "--ckpt_path", "last")
    out = capsys.readouterr().out
    assert f"run directory: {stopped.path} (resuming from {stopped.interrupt_checkpoint})" in out
    assert not [w for w in recwarn if "save_last" in str(w.message)], [str(w.message) for w in recwarn]
    first, resumed = stopped.metric_files()
    assert train_steps(resumed)[0] == 10  # from the interrupt's checkpoint, not from step 0
    assert read_metrics(stopped.path)["train/loss"] == read_metrics(straight)["train/loss"]
    assert read_metrics(stopped.path)["val/loss"] == read_metrics(straight)["val/loss"]
    # a run that ends normally has a newer last.ckpt: the interrupt's checkpoint goes
    assert stopped.last_checkpoint.is_file() and not stopped.interrupt_checkpoint.exists()


def test_ckpt_path_last_without_a_checkpoint_starts_at_step_0_and_says_so(tmp_path, tiny_corpus, data_cache, capsys,
                                                                         recwarn):
    config = experiment(tmp_path, tiny_corpus, data_cache, trainer={"max_steps": 2})
    run = RunDir(tmp_path / "run")
    fit(config, run.path, "--ckpt_path", "last")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"run directory: {run.path} (no checkpoint yet, starting at step 0)"
    assert lines[-1] == f"run directory: {run.path} (trained to step 2); checkpoint: {run.last_checkpoint}"
    assert not [w for w in recwarn if "save_last" in str(w.message)]  # Lightning's hint at a misconfiguration

    empty = tmp_path / "empty"
    with pytest.raises(SystemExit) as refused:
        main(["validate", "--config", str(config), "--trainer.default_root_dir", str(empty), "--ckpt_path", "last"])
    assert refused.value.code == 2
    assert f"--ckpt_path last: {empty / 'checkpoints'} holds no checkpoint to validate" in capsys.readouterr().err


class _Trainer(SimpleNamespace):
    def save_checkpoint(self, path):
        self.saved = path


@pytest.mark.parametrize("step,updating_from,start,saved", [
    (10, 9, 0, True),  # mid-step, before the update: the weights are step 10's
    (10, 10, 0, False),  # during the update of step 11: the weights may be half-updated
    (11, 10, 0, False),  # the update of step 11 done, its batch not yet ended: the loops' state is step 10's
    (3, 2, 3, False),  # nothing trained since the run (re)started
])
def test_an_interrupt_is_saved_only_where_resuming_is_exact(tmp_path, step, updating_from, start, saved):
    callback = InterruptCheckpoint(tmp_path)
    callback._start_step, callback._done, callback._updating_from = start, (min(step, 10), {}), updating_from
    trainer = _Trainer(global_step=step, world_size=1, default_root_dir=str(tmp_path), is_global_zero=True, saved=None)
    callback.on_exception(trainer, None, KeyboardInterrupt())
    assert (trainer.saved == callback.ckpt_path) == saved
