"""What `lit-resformer fit|validate|test` shows and leaves behind around a resume, with real training of a tiny model:
the progress bar counts optimizer steps (no `30/9` after a resume or under gradient accumulation), a resume does not
warn that its checkpoint folder is not empty, and validate/test leave the run's config.yaml alone."""

import warnings

import pytest
import yaml

from lit_resformer.data import LMDataModule
from lit_resformer.training.lightning_cli import CLI_SETTINGS, PARSER_SETTINGS, ResFormerCLI
from lit_resformer.training.module import LitResFormer, RichBar, TQDMBar
from tests.helpers.experiments import tiny_experiment


def cli(args: list[str]) -> ResFormerCLI:
    return ResFormerCLI(LitResFormer, LMDataModule, args=args, **CLI_SETTINGS, parser_kwargs=PARSER_SETTINGS)


@pytest.fixture
def experiment(tmp_path, tiny_corpus, data_cache):
    # 4 sequences of 16 tokens a micro-batch, 128 tokens a step: 2 micro-batches per optimizer step
    return tiny_experiment(tmp_path / "experiment.yaml", tiny_corpus, data_cache, global_batch_tokens=128,
                           trainer={"enable_progress_bar": True, "max_steps": 4, "val_check_interval": 4})


@pytest.mark.integration
def test_progress_bar_counts_steps_across_resumes_and_accumulation(tmp_path, experiment, monkeypatch):
    run = tmp_path / "run"
    common = ["--config", str(experiment), "--trainer.default_root_dir", str(run)]
    first = cli(["fit", *common, "--trainer.callbacks+", "TQDMProgressBar"])
    assert first.trainer.accumulate_grad_batches == 2
    bar = first.trainer.progress_bar_callback
    assert isinstance(bar, TQDMBar) and (bar.train_progress_bar.n, bar.train_progress_bar.total) == (4, 4)

    # Resumed mid-epoch, the batch index goes on from the checkpoint (8 micro-batches done): Lightning's own bar
    # would count batches up to 8 + 12 = 20 against the 6 steps still to train.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = cli(["fit", *common, "--trainer.max_steps", "10", "--ckpt_path", "last",
                       "--trainer.callbacks+", "TQDMProgressBar"])
    bar = resumed.trainer.progress_bar_callback
    assert (bar.train_progress_bar.n, bar.train_progress_bar.total) == (10, 10)
    assert not [w for w in caught if "exists and is not empty" in str(w.message)]
    assert resumed.trainer.global_step == 10

    # The Rich bar (Lightning's default where rich is installed) the same way; it is gone after training, so its
    # last state is read when training ends.
    seen = []
    on_train_end = RichBar.on_train_end

    def record(self, trainer, pl_module):
        task = self.progress.tasks[self.train_progress_bar_id]
        seen.append((task.completed, task.total, task.description.strip()))
        on_train_end(self, trainer, pl_module)

    monkeypatch.setattr(RichBar, "on_train_end", record)
    cli(["fit", *common, "--trainer.max_steps", "14", "--ckpt_path", "last", "--trainer.callbacks+", "RichProgressBar"])
    assert seen == [(14, 14, "Epoch 0")]  # not Lightning's "Epoch 0/-2" for a run bounded by steps


@pytest.mark.integration
def test_a_fresh_run_into_a_used_checkpoint_folder_still_warns(tmp_path, experiment):
    """Only a resume silences the warning: a new run pointed at another run's checkpoints should hear of it."""
    used = tmp_path / "used"
    used.mkdir()
    (used / "old.ckpt").write_bytes(b"")
    with pytest.warns(UserWarning, match="exists and is not empty"):
        cli(["fit", "--config", str(experiment), "--trainer.default_root_dir", str(tmp_path / "run"),
             "--checkpoint.dirpath", str(used), "--trainer.max_steps", "1", "--trainer.enable_progress_bar", "false"])


@pytest.mark.integration
def test_validate_and_test_leave_the_runs_config_alone(tmp_path, experiment):
    run = tmp_path / "run"
    cli(["fit", "--config", str(experiment), "--trainer.default_root_dir", str(run), "--trainer.max_steps", "2",
         "--trainer.enable_progress_bar", "false"])
    written = (run / "config.yaml").read_bytes()
    assert yaml.safe_load(written)["trainer"]["max_steps"] == 2
    for subcommand in ("validate", "test"):
        evaluated = cli([subcommand, "--config", str(experiment), "--trainer.default_root_dir", str(run),
                         "--ckpt_path", str(run / "checkpoints/last.ckpt"), "--trainer.enable_progress_bar", "false"])
        assert f"{subcommand.replace('validate', 'val')}/loss" in evaluated.trainer.callback_metrics
        assert (run / "config.yaml").read_bytes() == written, subcommand
