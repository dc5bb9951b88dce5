"""Run tests/helpers/hf_remote_check.py over exported folders in a separate, isolated interpreter (`python -I`: the
project is not importable there, as on a machine that has only transformers) and return what it computed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
import transformers

CHECK = Path(__file__).parent / "hf_remote_check.py"


def check_in_plain_transformers(root: Path, cases: dict) -> dict:
    """Save `cases` (folder name -> what to compute) under `root`, run the check on them, return its results."""
    torch.save(cases, root / "cases.pt")
    env = {**os.environ, "HF_MODULES_CACHE": str(root / "hf_modules"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    transformers_home = Path(transformers.__file__).parents[1]  # the release under test, wherever it is installed
    done = subprocess.run([sys.executable, "-I", str(CHECK), str(root / "cases.pt"), str(root / "results.pt"),
                           str(transformers_home)], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # What transformers deprecates it removes later: the exported code keeps to the names of the release under test.
    assert not [line for line in done.stderr.splitlines() if "deprecat" in line.lower()]
    results = torch.load(root / "results.pt")
    assert results["transformers"] == transformers.__version__
    return results
