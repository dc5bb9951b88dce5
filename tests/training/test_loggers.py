"""Any Lightning logger chosen in YAML (`trainer.logger`), beside the run's CSV metrics: W&B in offline mode and
MLflow with a local SQLite store (both optional extras; each test is skipped where its package is not installed).
What the logger received is read back through its own API and compared with the run's CSV."""

import importlib.util

import pytest
import yaml

from lit_resformer.data import LMDataModule
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.training.lightning_cli import CLI_SETTINGS, PARSER_SETTINGS, ResFormerCLI, run_loggers
from lit_resformer.training.module import LitResFormer
from tests.helpers.experiments import tiny_experiment


def fit(tmp_path, corpus, cache, loggers: list[dict]) -> tuple[ResFormerCLI, RunDir]:
    experiment = tiny_experiment(tmp_path / "experiment.yaml", corpus, cache, trainer={"max_steps": 4})
    chosen = tmp_path / "loggers.yaml"
    chosen.write_text(yaml.safe_dump({"trainer": {"logger": loggers}}))
    run = RunDir(tmp_path / "run")
    args = ["fit", "--config", str(experiment), "--config", str(chosen), "--trainer.default_root_dir", str(run.path)]
    return ResFormerCLI(LitResFormer, LMDataModule, args=args, **CLI_SETTINGS, parser_kwargs=PARSER_SETTINGS), run


def csv_train_loss(run: RunDir) -> list[tuple[int, float]]:
    return run.read_metrics()["train/loss"]


def test_chosen_loggers_replace_tensorboard_and_keep_the_runs_csv(tmp_path):
    run = RunDir(tmp_path)
    default = run_loggers(None, run)
    assert [entry["class_path"].rsplit(".", 1)[-1] for entry in default] == ["CSVLogger", "TensorBoardLogger"]
    wandb = {"class_path": "lightning.pytorch.loggers.WandbLogger", "init_args": {"offline": True}}
    assert run_loggers([wandb], run) == [default[0], wandb]
    assert run_loggers(wandb, run) == [default[0], wandb]
    # a resolved config.yaml lists the run's CSV logger already: it is not added twice
    assert run_loggers(default, run) == default
    assert run_loggers(False, run) is False


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed (extra [wandb])")
def test_wandb_offline(tmp_path, tiny_corpus, data_cache, monkeypatch):
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": tmp_path / "wandb-dir",
                        "WANDB_CONFIG_DIR": tmp_path / "wandb-config", "WANDB_CACHE_DIR": tmp_path / "wandb-cache"}.items():
        monkeypatch.setenv(name, str(value))
    cli, run = fit(tmp_path, tiny_corpus, data_cache, [
        {"class_path": "lightning.pytorch.loggers.WandbLogger",
         "init_args": {"project": "lit-resformer-test", "save_dir": str(tmp_path / "wandb"), "offline": True}}])
    csv_logger, wandb_logger = cli.trainer.loggers
    assert type(csv_logger).__name__ == "CSVLogger" and type(wandb_logger).__name__ == "WandbLogger"
    try:
        summary = dict(wandb_logger.experiment.summary)
        assert summary["trainer/global_step"] == 3
        assert summary["train/loss"] == pytest.approx(csv_train_loss(run)[-1][1], rel=1e-6)
        assert set(run.read_metrics()) <= set(summary)  # every metric of the run, per domain included
    finally:
        wandb_logger.experiment.finish()
    assert list((tmp_path / "wandb/wandb").glob("offline-run-*/run-*.wandb"))  # kept for `wandb sync`


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("sqlalchemy") is None,
                    reason="mlflow is not installed (extra [mlflow])")
@pytest.mark.integration
def test_mlflow_local_sqlite_store(tmp_path, tiny_corpus, data_cache):
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cli, run = fit(tmp_path, tiny_corpus, data_cache, [
        {"class_path": "lightning.pytorch.loggers.MLFlowLogger",
         "init_args": {"experiment_name": "lit-resformer-test", "tracking_uri": store}}])
    run_id = cli.trainer.loggers[1].run_id
    client = MlflowClient(tracking_uri=store)  # a new client: what the store holds, not what the logger kept
    history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "train/loss"))
    assert [step for step, _ in history] == [step for step, _ in csv_train_loss(run)] == [0, 1, 2, 3]
    assert [value for _, value in history] == pytest.approx([value for _, value in csv_train_loss(run)], rel=1e-6)
    assert {"val/loss", "val/loss/alpha", "val/loss/beta"} <= set(run.read_metrics())
    assert set(run.read_metrics()) <= set(client.get_run(run_id).data.metrics)  # every metric, per domain included
