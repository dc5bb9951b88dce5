"""docs/EXTENDING.md's worked example of a choice with learnable weights (`residual.learnable: sigmoid`), applied as the
recipe says to a copy of the package: only the two files it names change, and `lit-resformer fit` trains it, logs its
weights and `lit-resformer export` writes a folder that computes what the model computes."""

from __future__ import annotations

import ast
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import torch

from tests.helpers.experiments import read_metrics, tiny_experiment
from tests.helpers.hf_remote import check_in_plain_transformers

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "### Worked example: `residual.learnable: sigmoid`"
# What runs in the copy (lit_resformer imported from it): the commands a contributor runs, then the model's own logits.
IN_THE_COPY = """
import sys
import torch
from lit_resformer import load_checkpoint
from lit_resformer.cli import main
from lit_resformer.model import ModelConfig
from lit_resformer.model.config import mixing_settings
from tests.helpers.hf_remote import reference_case

experiment, run, folder, out = sys.argv[1:]
main(["fit", "--config", experiment, "--trainer.default_root_dir", run])
main(["export", "--ckpt", f"{run}/checkpoints/last.ckpt", "--to-hf", folder])
model, _ = load_checkpoint(f"{run}/checkpoints/last.ckpt")
case, expected = reference_case(model.eval(), folder, 0, "the quiet river")
try:
    ModelConfig(size="tiny", residual={"target": "v", "learnable": "sigmoid", "lam": 0.3})
except ValueError as refusal:
    refused = str(refusal)
torch.save({"case": case, "expected": expected, "refused": refused, "settings": mixing_settings()}, out)
"""


def recipe_blocks() -> dict[str, list[str]]:
    """The example's python blocks, by the package file named in bold before each."""
    text = (REPO / "docs" / "EXTENDING.md").read_text(encoding="utf-8")
    section = text.split(EXAMPLE, 1)[1].split("\n### ", 1)[0]
    blocks: dict[str, list[str]] = {}
    path = None
    for match in re.finditer(r"\*\*`(lit_resformer/[\w/]+\.py)`\*\*|```python\n(.*?)```", section, re.S):
        if match.group(1):
            path = match.group(1)
        else:
            blocks.setdefault(path, []).append(match.group(2))
    return blocks


def _tokens(source: str) -> list[str]:
    skipped = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    return [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skipped]


def _assigned(statement: ast.stmt) -> str | None:
    targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
    return next((t.id for t in targets if isinstance(t, ast.Name)), None)


def apply(source: str, block: str) -> str:
    """`source` with a recipe block applied: a top-level statement of the block that assigns a name the source assigns
    replaces that statement, and may only add to it (the old statement's tokens are a subsequence of the new one's);
    the others (classes, functions) are new and go before the first statement replaced."""
    lines = source.splitlines(keepends=True)
    ours = {_assigned(s): s for s in ast.parse(source).body if _assigned(s)}
    new, replaced = [], []
    for statement in ast.parse(block).body:
        text = ast.get_source_segment(block, statement)
        name = _assigned(statement)
        if name not in ours:
            new.append(text)
            continue
        old = ours[name]
        remaining = iter(_tokens(text))
        assert all(token in remaining for token in _tokens("".join(lines[old.lineno - 1:old.end_lineno]))), \
            f"the recipe's {name} drops part of the file's"
        replaced.append((old, text))
    assert replaced, "a recipe block names no statement of its file"
    for old, text in sorted(replaced, key=lambda pair: -pair[0].lineno):
        lines[old.lineno - 1:old.end_lineno] = [text + "\n"]
    first = min(old.lineno for old, _ in replaced)  # above every later replacement, so its line is still its own
    lines[first - 1:first - 1] = [text + "\n\n\n" for text in new]
    return "".join(lines)


def changed_files(copy: Path) -> set[str]:
    original = REPO / "lit_resformer"
    files = {p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    return {f for f in files if (copy / f).read_bytes() != (original / f).read_bytes()}


def test_the_recipe_names_two_package_files_and_applies_to_them():
    blocks = recipe_blocks()
    assert set(blocks) == {"lit_resformer/model/config.py", "lit_resformer/model/transformer.py"}
    for path, texts in blocks.items():
        source = (REPO / path).read_text(encoding="utf-8")
        for text in texts:
            source = apply(source, text)
        ast.parse(source)
    assert '"sigmoid"' in source and "class SigmoidMix" in source


@pytest.mark.integration
def test_a_learnable_choice_added_as_the_recipe_says_trains_logs_and_exports(tmp_path, tiny_corpus, data_cache):
    copy = tmp_path / "src" / "lit_resformer"
    shutil.copytree(REPO / "lit_resformer", copy, ignore=shutil.ignore_patterns("__pycache__"))
    for path, texts in recipe_blocks().items():
        file = tmp_path / "src" / path
        for text in texts:
            file.write_text(apply(file.read_text(encoding="utf-8"), text), encoding="utf-8")
    assert changed_files(copy) == {"model/config.py", "model/transformer.py"}

    experiment = tiny_experiment(
        tmp_path / "experiment.yaml", tiny_corpus, data_cache, trainer={"max_steps": 3},
        model={"config": {"n_layer": 2, "n_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64,
                          "residual": {"target": "v", "learnable": "sigmoid"}},
               "lr": 3e-3, "warmup_steps": 1, "mix_lr": 0.05})
    run, folder, out = tmp_path / "run", tmp_path / "hf" / "sigmoid", tmp_path / "expected.pt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "src"), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", IN_THE_COPY, str(experiment), str(run), str(folder), str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    metrics = read_metrics(run)["mix/layer2/lambda"]
    assert [step for step, _ in metrics] == [0, 1, 2]
    assert metrics[0][1] == 0.5 and metrics[-1][1] != 0.5  # σ(0), then it trains
    result = torch.load(out)
    assert "residual.learnable (one of ['scalar', 'head', 'token', 'tied', 'sigmoid'])" in result["settings"]
    assert "residual.learnable='sigmoid' mixes with weights that sum to 1" in result["refused"]
    got = check_in_plain_transformers(tmp_path / "hf", {"sigmoid": result["case"]})["folders"]["sigmoid"]
    assert got["config"]["residual"]["learnable"] == "sigmoid"
    assert (got["logits"] - result["expected"]["logits"]).abs().max() <= 1e-5
    assert torch.equal(got["sequences"], result["expected"]["sequences"])
