"""Run tests/helpers/hf_remote_check.py over exported folders in a separate, isolated interpreter (`python -I`: the
project is not importable there, as on a machine that has only transformers) and return what it computed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import torch
import transformers
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from lit_resformer.model import Transformer, kv_cache_bytes

CHECK = Path(__file__).parent / "hf_remote_check.py"
PROMPT_LEN, NEW_TOKENS = 10, 8


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


def exported_modules(folder: Path) -> tuple[ModuleType, ModuleType]:
    """(configuration_resformer, modeling_resformer) of an exported folder, loaded from it as transformers loads a
    folder's code with trust_remote_code."""
    model_class = get_class_from_dynamic_module("modeling_resformer.ResFormerForCausalLM", folder)
    return sys.modules[model_class.config_class.__module__], sys.modules[model_class.__module__]


@torch.no_grad()
def reference_case(model: Transformer, folder: Path, seed: int, text: str) -> tuple[dict, dict]:
    """(inputs for the checking process, what the project's model computes on them): its config, logits, greedy
    generation through the cache, one left-padded row, the cache's size, and `text` for the exported tokenizer."""
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    ids = torch.randint(1, vocab, (2, PROMPT_LEN), generator=generator)
    greedy = model.generate(ids, max_new_tokens=NEW_TOKENS)
    short = ids[1, :6]
    padded_ids = torch.zeros_like(ids)  # row 1 is left-padded to the length of row 0
    padded_ids[0], padded_ids[1, -len(short):] = ids[0], short
    padded_mask = (torch.arange(PROMPT_LEN) >= torch.tensor([[0], [PROMPT_LEN - len(short)]])).long()
    case = {"dir": str(folder), "ids": ids, "max_new_tokens": NEW_TOKENS, "padded_ids": padded_ids,
            "padded_mask": padded_mask, "text": text}
    expected = {
        "config": model.config.to_dict(),
        "logits": model(ids),
        "sequences": greedy,
        "step_logits": model(greedy[:, :-1])[:, PROMPT_LEN - 1:],
        "cache_bytes": kv_cache_bytes(model.config, batch=2, seq=PROMPT_LEN + NEW_TOKENS - 1),
        "padded_new_tokens": [model.generate(ids[:1], NEW_TOKENS)[0, PROMPT_LEN:],
                              model.generate(short[None], NEW_TOKENS)[0, len(short):]],
    }
    return case, expected
