"""The environment lock (requirements.lock, scripts/lock.py): it pins what pyproject allows, and the check that
`make install` runs catches an environment that drifted from it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11, where the lock is resolved

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"


@pytest.fixture(scope="module")
def lock_script():
    spec = importlib.util.spec_from_file_location("lock_script", ROOT / "scripts" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in project["dependencies"] + extras["dev"] + extras["slurm"]]


def test_lock_pins_every_dependency_within_pyprojects_range(lock_script):
    pins = lock_script.read_lock(LOCK)
    for requirement in _pyproject_requirements():
        name = lock_script.canonical(requirement.name)
        if lock_script.UNLOCKED.match(name):
            assert name not in pins, f"{name} is chosen by TORCH, not by the lock"
            continue
        assert name in pins, f"requirements.lock does not pin {name}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, outside pyproject's {requirement}")


def test_check_accepts_the_locked_environment_and_names_each_drift(lock_script, tmp_path, monkeypatch, capsys):
    lock = tmp_path / "requirements.lock"
    monkeypatch.setattr(lock_script, "installed", lambda: {"alpha": "1.0", "beta-pkg": "2.0"})
    lock_script.write(lock)
    assert lock_script.read_lock(lock) == {"alpha": "1.0", "beta-pkg": "2.0"}
    assert lock_script.check(lock) == 0

    monkeypatch.setattr(lock_script, "installed", lambda: {"alpha": "1.1", "gamma": "3.0"})
    assert lock_script.check(lock) == 1
    err = capsys.readouterr().err
    assert "version differs: alpha 1.1 (locked 1.0)" in err
    assert "not installed: beta-pkg==2.0" in err
    assert "installed but not locked (tolerated): gamma" in err


def test_torch_its_build_and_the_installer_are_not_locked(lock_script):
    for name in ("torch", "triton", "nvidia-cublas-cu12", "pip", "setuptools", "lit-resformer"):
        assert lock_script.UNLOCKED.match(name), name
    for name in ("transformers", "lightning", "torchdata", "torchmetrics"):
        assert not lock_script.UNLOCKED.match(name), name
    assert lock_script.canonical("Typeshed_Client") == "typeshed-client"


def test_a_malformed_lock_line_is_refused_with_its_line_number(lock_script, tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("# header\nalpha==1.0\nbeta>=2\n")
    with pytest.raises(SystemExit, match=r"requirements.lock:3: expected NAME==VERSION"):
        lock_script.read_lock(lock)
