"""`lit-resformer generate`: a trained run's continuation of a prompt, the model's own greedy decoding (or seeded
sampling) through the KV cache, and bad input refused in one line before the checkpoint is read."""

from __future__ import annotations

import pytest
import torch

from lit_resformer import load_checkpoint
from lit_resformer.cli import main
from lit_resformer.data.tokenizer import EOS_TOKEN
from tests.helpers.models import argmax_without_cache

PROMPT = "the value of"


def generated(capsys, ckpt, *extra: str) -> str:
    main(["generate", "--ckpt", str(ckpt), "--prompt", PROMPT, *extra])
    return capsys.readouterr().out


def test_greedy_continuation_is_the_models_argmax_recomputed_without_the_cache(trained_run, capsys):
    ckpt = trained_run / "checkpoints" / "last.ckpt"
    model, tokenizer = load_checkpoint(ckpt)
    prompt = tokenizer.encode(PROMPT).ids
    expected = argmax_without_cache(model, torch.tensor([prompt]), 12)[0, len(prompt):].tolist()
    eos = tokenizer.token_to_id(EOS_TOKEN)
    expected = expected[:expected.index(eos)] if eos in expected else expected
    assert generated(capsys, ckpt, "--max-new-tokens", "12") == PROMPT + tokenizer.decode(expected) + "\n"


def test_sampling_is_seeded_and_top_1_is_greedy(trained_run, capsys):
    ckpt = trained_run / "checkpoints" / "last.ckpt"
    sampled = [generated(capsys, ckpt, "--temperature", "1.5", "--seed", str(seed)) for seed in (1, 1, 2)]
    assert sampled[0] == sampled[1] != sampled[2]
    assert generated(capsys, ckpt, "--temperature", "1.5", "--top-k", "1") == generated(capsys, ckpt)


@pytest.mark.parametrize("extra,words", [
    (["--max-new-tokens", "0"], "--max-new-tokens must be an integer >= 1, got 0"),
    (["--temperature", "-1"], "--temperature must be a number >= 0 (0: greedy), got -1"),
    (["--top-k", "5"], "--top-k must be an integer >= 1 and sample (--temperature > 0)"),
    (["--max-new-tokens", "64"], "exceed the model's context of 64 tokens (model.config.max_seq_len)"),
])
def test_bad_input_is_refused_in_one_line(trained_run, capsys, extra, words):
    with pytest.raises(SystemExit) as refused:
        main(["generate", "--ckpt", str(trained_run / "checkpoints" / "last.ckpt"), "--prompt", PROMPT, *extra])
    assert str(refused.value.code).startswith("lit-resformer generate: error: ") and words in str(refused.value.code)
    assert "\n" not in str(refused.value.code)


def test_a_missing_checkpoint_is_refused_before_anything_is_loaded(tmp_path):
    with pytest.raises(SystemExit, match="--ckpt .*missing.ckpt: no such checkpoint file"):
        main(["generate", "--ckpt", str(tmp_path / "missing.ckpt"), "--prompt", PROMPT])
