"""What a run ran on: the code's version, the libraries' versions, the device and the precision.

A run's summary.json and a grid's manifest record it, so that a result says what produced it and two runs compared
with each other can be checked for a difference that is not the one under study.
"""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Distributions whose version changes what a run computes or how it is evaluated, by the name the record uses.
LIBRARIES = {"lightning": "lightning", "transformers": "transformers", "lm_eval": "lm_eval", "datasets": "datasets",
             "tokenizers": "tokenizers"}
FIELDS = ("git_commit", "git_dirty", "python", "torch", "cuda", *LIBRARIES, "device", "precision", "threads")


def collect(precision: str, accelerator: str = "auto", cuda_device: int = 0, threads: str | None = None) -> dict:
    """The record, every field of FIELDS: None where a thing is not there (no git checkout, a library not installed,
    a CPU build of torch). `cuda_device` is the index, as this process sees the GPUs, of the one the run trains on;
    the device is that GPU's name when the run trains on a GPU (`accelerator` not cpu and one is visible), else the
    CPU's. `threads`: the run's OMP_NUM_THREADS (None: torch's default, every core). A CPU run's floating-point
    sums depend on it, and early training amplifies a difference in the 7th digit to 0.04 nats by the end
    (docs/rederivation/2026-11-27-fig7-evidence.md), so a run is reproduced to the last digit only at its own
    thread count."""
    import torch

    commit, dirty = git_state()
    on_gpu = accelerator != "cpu" and torch.cuda.is_available()
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        **{name: _version(distribution) for name, distribution in LIBRARIES.items()},
        "device": _gpu_name(cuda_device) if on_gpu else _cpu_name(),
        "precision": str(precision),
        "threads": threads,
    }


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_state() -> tuple[str | None, bool | None]:
    """(commit, whether tracked files differ from it) of the checkout this package runs from; (None, None) when
    it is installed from a wheel or git is missing."""
    if not (REPO_ROOT / ".git").exists():  # an installed package: a repository around it would be someone else's
        return None, None
    try:
        commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def _gpu_name(index: int) -> str:
    """The GPU's name; a device that cannot be asked (an index this process does not see) is named as such rather
    than stopping the run that records it."""
    import torch

    try:
        return torch.cuda.get_device_name(index)
    except (RuntimeError, AssertionError, ValueError) as err:
        return f"GPU {index} (name not read: {type(err).__name__})"


def _cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform says."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return f"CPU: {line.split(':', 1)[1].strip()}"
    return f"CPU: {platform.processor() or platform.machine()}"
