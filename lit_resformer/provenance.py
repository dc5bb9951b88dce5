"""What a run ran on: the code's version, the libraries' versions, the device and the precision; and what that device
can do at most, the peaks a GPU run's model FLOP utilisation (MFU) is stated against.

A run's summary.json and a grid's manifest record it, so that a result says what produced it and two runs compared
with each other can be checked for a difference that is not the one under study.

Two peaks, as nanochat and this project's benchmarks state MFU:
- the **specification** peak: the GPU's dense bf16 tensor-core FLOP/s from its datasheet, whatever the run's precision
  (nanochat's convention, 989 TFLOP/s for an H100 SXM), so that an MFU compares with theirs (`spec_peak_flops`);
- the **measured** peak: the best FLOP/s of bf16 square matmuls on the idle device (`measure_peak_flops`), what the
  card really gives (an H200 here: 776 TFLOP/s, docs/BENCHMARKS.md). A grid runner cannot measure it while its runs
  share the card, so the process that starts the runner measures it first and passes it on (`MEASURED_PEAK_ENV`;
  `python -m lit_resformer.provenance --measure-peak`), with how many runs share the card (`RUNS_SHARING_ENV`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Distributions whose version changes what a run computes or how it is evaluated, by the name the record uses.
LIBRARIES = {"lightning": "lightning", "transformers": "transformers", "lm_eval": "lm_eval", "datasets": "datasets",
             "tokenizers": "tokenizers"}
FIELDS = ("git_commit", "git_dirty", "git_diff_sha256", "python", "torch", "cuda", *LIBRARIES, "device", "precision",
          "threads")
# Trains from a checkout with uncommitted changes, as --allow-dirty does (for test suites and scripts); the run still
# records its patch.
ALLOW_DIRTY_ENV = "LIT_RESFORMER_ALLOW_DIRTY"

# Dense (no 2:4 sparsity) bf16 tensor-core FLOP/s from NVIDIA's datasheets, by a fragment of the name
# torch.cuda.get_device_name gives, the most specific fragment first. Lightning's get_available_flops holds the same
# figures but asks a live device, and it does not know an H200 whose name lacks "SXM"/"NVL" ("NVIDIA H200" here).
SPEC_BF16_DENSE_FLOPS = (
    ("h100 pcie", 756e12), ("h100 nvl", 835e12), ("h100", 989.4e12),  # an H100 SXM's name: "NVIDIA H100 80GB HBM3"
    ("h200 nvl", 835e12), ("h200", 989.4e12),  # the SXM's name: "NVIDIA H200"
    ("a100", 312e12),
)
MEASURED_PEAK_ENV = "LIT_RESFORMER_MEASURED_PEAK_FLOPS"
RUNS_SHARING_ENV = "LIT_RESFORMER_RUNS_SHARING_DEVICE"


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
        "git_diff_sha256": hashlib.sha256(git_patch().encode()).hexdigest() if dirty else None,
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        **{name: _version(distribution) for name, distribution in LIBRARIES.items()},
        "device": _gpu_name(cuda_device) if on_gpu else _cpu_name(),
        "precision": str(precision),
        "threads": threads,
    }


def spec_peak_flops(device: str | None) -> float | None:
    """The dense bf16 datasheet peak of a GPU named as provenance names it; None for a CPU or a GPU not listed."""
    name = (device or "").lower()
    if not name or name.startswith("cpu"):
        return None
    return next((flops for fragment, flops in SPEC_BF16_DENSE_FLOPS if fragment in name), None)


def measure_peak_flops(device: str = "cuda", sizes: tuple[int, ...] = (4096, 8192, 16384), rounds: int = 5,
                       dtype=None, call_flops: float = 10 * 2 * 8192**3) -> float:
    """The best FLOP/s of `torch.mm` on square matrices (bf16 unless `dtype` says) over `sizes`, each timed `rounds`
    times after a warm-up, every timed call repeating its product up to `call_flops` (~15 ms on an H100) for the
    clocks to rise: one size timed once swung by 40% between two days (benchmarks/mfu.py), the best of many warm
    calls moves only with the card."""
    import time

    import torch

    dtype = dtype or torch.bfloat16
    on_cuda = torch.device(device).type == "cuda"
    best = 0.0
    for n in sizes:
        a, b, out = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(3))
        repeats = max(1, round(call_flops / (2 * n**3)))
        for round_index in range(rounds + 1):  # the first round warms up
            if on_cuda:
                torch.cuda.synchronize(device)
            started = time.perf_counter()
            for _ in range(repeats):
                torch.mm(a, b, out=out)
            if on_cuda:
                torch.cuda.synchronize(device)
            if round_index:
                best = max(best, 2.0 * n**3 * repeats / (time.perf_counter() - started))
        del a, b, out
    return best


def device_use(env: dict) -> dict:
    """What a run's environment says of its device beyond its name: the measured peak its starter passed on and how
    many runs share the device (None where not said), recorded in the run's summary beside its provenance."""
    peak, sharing = env.get(MEASURED_PEAK_ENV), env.get(RUNS_SHARING_ENV)
    return {"measured_peak_flops": float(peak) if peak else None, "runs_sharing_device": int(sharing) if sharing else None}


def run_provenance(config: dict, env: Mapping[str, str]) -> dict:
    """What a grid run's training process runs on (`collect`), from its config and its environment: a run
    whose environment hides the GPUs trains on the CPU; else on the first GPU of its CUDA_VISIBLE_DEVICES, found among
    the GPUs this process sees."""
    trainer = config.get("trainer") or {}
    precision, accelerator = str(trainer.get("precision", "32-true")), str(trainer.get("accelerator", "auto"))
    own = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if "CUDA_VISIBLE_DEVICES" in env and not own:
        return collect(precision, accelerator="cpu", threads=env.get("OMP_NUM_THREADS"))
    seen_here = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if own and own[0] in seen_here:
        index = seen_here.index(own[0])
    else:
        index = int(own[0]) if own and own[0].isdigit() and not seen_here else 0
    return collect(precision, accelerator=accelerator, cuda_device=index, threads=env.get("OMP_NUM_THREADS"))


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


def git_patch() -> str:
    """The checkout's uncommitted changes to tracked files as a patch (`git diff HEAD`; "" when there are none or no
    checkout): what a run from a dirty tree keeps beside its results (RunDir.diff_file), hashed in its provenance."""
    if not (REPO_ROOT / ".git").exists():
        return ""
    try:
        return subprocess.run(["git", "-C", str(REPO_ROOT), "diff", "HEAD", "--no-color", "--no-ext-diff"],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


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


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m lit_resformer.provenance",
                                     description="What this machine would record for a run, as JSON.")
    parser.add_argument("--measure-peak", action="store_true",
                        help="print only the measured bf16 matmul peak of GPU 0 in FLOP/s (for " + MEASURED_PEAK_ENV + ")")
    args = parser.parse_args()
    if args.measure_peak:
        import torch

        if not torch.cuda.is_available():
            parser.exit(2, "no GPU visible: the measured peak is a GPU's\n")
        print(f"{measure_peak_flops():.4g}")
    else:
        record = collect("32-true")
        print(json.dumps({**record, "spec_peak_flops": spec_peak_flops(record["device"])}, indent=1))
