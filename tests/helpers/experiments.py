"""A complete experiment YAML for a very small model on the tiny two-domain test corpus, and `lit-resformer fit` (or
`fit-stacked`) on it: in-process, killed mid-run in a process of its own, or refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lit_resformer.cli import main
from lit_resformer.runs.run_dir import RunDir

HELPERS = Path(__file__).parent


def tiny_experiment(path: Path, corpus: Path, cache: Path, **sections) -> Path:
    """Write the experiment to `path`; each keyword replaces or updates one top-level section."""
    config = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": 1, "max_steps": 10, "val_check_interval": 5,
                    "check_val_every_n_epoch": None, "num_sanity_val_steps": 0, "gradient_clip_val": 1.0,
                    "enable_progress_bar": False, "enable_model_summary": False},
        "checkpoint": {"every_n_train_steps": 2},
        "model": {"config": {"n_layer": 2, "n_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64,
                             "residual": {"target": "v"}},
                  "lr": 3e-3, "warmup_steps": 3},
        "data": {"source": "local", "path": str(corpus), "bpe_vocab_size": 300, "seq_len": 16,
                 "micro_batch_size": 4, "holdout_fraction": 0.05, "cache_dir": str(cache)},
    }
    for section, values in sections.items():
        if isinstance(values, dict) and isinstance(config.get(section), dict):
            config[section] = {**config[section], **values}
        else:
            config[section] = values
    path.write_text(yaml.safe_dump(config))
    return path


def read_metrics(run: Path) -> dict:
    return RunDir(run).read_metrics()


def fit_killed_at_step_5(config: Path, run: Path) -> None:
    """`lit-resformer fit` in a process of its own, SIGKILLed at step 5 (tests/helpers/crash.py): a crash mid-run."""
    fit_killed_at(config, run, 5)


def fit_killed_at(config: Path, run: Path, step: int, *extra: str) -> None:
    """`lit-resformer fit ... *extra` in a process of its own, SIGKILLed once `step` optimizer steps are done."""
    proc = fit_crashing(config, run, "KillAtStep", step, *extra)
    assert proc.returncode == -9, proc.stderr[-2000:]


def fit_crashing(config: Path, run: Path, crash: str, step: int, *extra: str) -> subprocess.CompletedProcess:
    """`lit-resformer fit ... *extra` in a process of its own, with the callback `crash` of tests/helpers/crash.py
    acting once `step` optimizer steps are done."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "lit_resformer.cli", "fit", "--config", str(config), "--trainer.default_root_dir",
         str(run), "--allow-any-class", f"--trainer.callbacks+=crash.{crash}", f"--trainer.callbacks.step={step}",
         *extra],
        env=env, capture_output=True, text=True, timeout=600,
    )


def experiment(tmp_path: Path, corpus: Path, cache: Path, **sections) -> Path:
    return tiny_experiment(tmp_path / "experiment.yaml", corpus, cache, **sections)


def fit(config: Path, run_dir: Path, *extra: str) -> None:
    main(["fit", "--config", str(config), "--trainer.default_root_dir", str(run_dir), *extra])


def refused(capsys, config, run, *extra) -> str:
    with pytest.raises(SystemExit) as exit_info:
        fit(config, run, *extra)
    assert exit_info.value.code == 2
    assert not run.exists(), "a refused run must not leave a run directory behind"
    return capsys.readouterr().err


def fit_stacked(runs: list[tuple[Path, Path]], *extra: str) -> None:
    """`lit-resformer fit-stacked` on (config, run directory) pairs, in-process."""
    main(["fit-stacked", *[arg for config, run in runs for arg in ("--run", str(config), str(run))], *extra])


def fit_stacked_killed_at_step(runs: list[tuple[Path, Path]], step: int) -> None:
    """`lit-resformer fit-stacked` in a process of its own, SIGKILLed once its runs took `step` optimizer steps
    (tests/helpers/stacked_crash.py)."""
    proc = subprocess.run(
        [sys.executable, str(HELPERS / "stacked_crash.py"), str(step),
         *[arg for config, run in runs for arg in ("--run", str(config), str(run))]],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS.parent.parent), os.environ.get("PYTHONPATH", "")])},
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
