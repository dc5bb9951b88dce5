"""What `fit` prints: plain progress lines where its output is a log (a grid run's logs/stdout.log), no bar redrawn
with escape codes; and none of the tips and deprecation notices third parties print into every run."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from lit_resformer.execution.jobs import RunJob, execute
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.training.lightning_cli import THIRD_PARTY_INFO, quiet_third_parties
from tests.helpers.experiments import tiny_experiment

REPO = Path(__file__).resolve().parents[2]
RANK_ZERO = logging.getLogger("lightning.pytorch.utilities.rank_zero")  # where Lightning's info lines are logged


@pytest.fixture(autouse=True)
def _lightnings_log_as_it_was():
    """quiet_third_parties filters Lightning's log for the process: each test starts from Lightning's log unfiltered
    (a fit run in this process before, by another test module, has filtered it) and leaves its filters as they were."""
    filters, level = list(RANK_ZERO.filters), RANK_ZERO.level
    RANK_ZERO.filters[:] = []
    yield
    RANK_ZERO.filters[:] = filters
    RANK_ZERO.setLevel(level)


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


# Each: a call that makes a third party print its notice.
def _srun_hint(tmp_path: Path, monkeypatch) -> None:
    from lightning.fabric.plugins.environments import SLURMEnvironment

    (tmp_path / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    SLURMEnvironment._validate_srun_used()


def _few_workers(tmp_path: Path, monkeypatch) -> None:
    from types import SimpleNamespace

    from lightning.pytorch.trainer.connectors import data_connector
    from torch.utils.data import DataLoader

    monkeypatch.setattr(data_connector, "suggested_max_num_workers", lambda devices: 4)  # a machine of 5+ cores
    data_connector._worker_check(SimpleNamespace(num_devices=1, reload_dataloaders_every_n_epochs=0),
                                 DataLoader(range(4)), "train_dataloader")


def _leaf_spec(tmp_path: Path, monkeypatch) -> None:
    from lightning.pytorch.utilities._pytree import _tree_flatten

    _tree_flatten(1)


def _set_vital(tmp_path: Path, monkeypatch) -> None:
    import torch

    torch.set_vital("Dataloader", "enabled", "True")


NOTICES = {"srun": _srun_hint, "num_workers": _few_workers, "LeafSpec": _leaf_spec, "set_vital": _set_vital}


@pytest.mark.parametrize("notice", NOTICES)
def test_each_third_party_warning_is_silenced_by_itself(tmp_path, monkeypatch, notice):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        NOTICES[notice](tmp_path, monkeypatch)
        assert len(shown) == 1, [str(w.message) for w in shown]  # the third party does print it here
        quiet_third_parties()
        NOTICES[notice](tmp_path, monkeypatch)
        assert len(shown) == 1, [str(w.message) for w in shown]
        warnings.warn("a warning of the run's own", UserWarning, stacklevel=1)
        assert str(shown[-1].message) == "a warning of the run's own"  # no blanket filter


def test_the_srun_hint_stays_inside_a_slurm_job(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_third_parties()
        _srun_hint(tmp_path, monkeypatch)
    assert [w for w in shown if "srun" in str(w.message)]


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_lightnings_cloud_logger_tip_is_silenced_and_its_other_info_kept(tmp_path):
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.trainer.connectors.logger_connector.logger_connector import _LoggerConnector

    kept = _Kept()
    RANK_ZERO.addHandler(kept)
    RANK_ZERO.setLevel(logging.INFO)
    try:
        connector = _LoggerConnector(trainer=type("Trainer", (), {})())
        connector.configure_logger(CSVLogger(tmp_path))
        assert [m for m in kept.messages if m.startswith(THIRD_PARTY_INFO)]  # Lightning does print it
        kept.messages.clear()
        quiet_third_parties()
        connector.configure_logger(CSVLogger(tmp_path))
        RANK_ZERO.info("Seed set to 0")
        assert kept.messages == ["Seed set to 0"]
    finally:
        RANK_ZERO.removeHandler(kept)


@pytest.mark.integration
def test_a_tiny_fit_prints_no_third_party_notice(tmp_path, tiny_corpus, data_cache):
    """`srun` on the PATH, as on a Slurm login node: its hint, Lightning's tip and the dependencies' deprecations do
    not reach the run's stderr."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/srun").write_text("#!/bin/sh\n")
    (tmp_path / "bin/srun").chmod(0o755)
    config = tiny_experiment(tmp_path / "experiment.yaml", tiny_corpus, data_cache, trainer={"max_steps": 2})
    done = subprocess.run([sys.executable, "-m", "lit_resformer.cli", "fit", "--config", str(config),
                           "--trainer.default_root_dir", str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(REPO),
                                            "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr[-2000:]
    for words in ("litlogger", "srun", "does not have many workers", "deprecated", "Warning"):
        assert words not in done.stderr, done.stderr
