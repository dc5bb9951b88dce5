"""Tokenizers: trained BPE (cached), tokenizer.json files, hub names (offline error path), bad specs."""

import pytest

from lit_resformer.data import EOS_TOKEN, LMDataModule, parse_tokenizer_spec, train_bpe
from lit_resformer.data import datamodule as datamodule_module


def test_bpe_is_trained_once_then_read_from_cache(tiny_corpus, tmp_path, monkeypatch):
    calls = []

    def counting_train_bpe(*args, **kwargs):
        calls.append(1)
        return train_bpe(*args, **kwargs)

    monkeypatch.setattr(datamodule_module, "train_bpe", counting_train_bpe)

    def make():
        return LMDataModule(
            source="local", path=str(tiny_corpus), bpe_vocab_size=300, cache_dir=str(tmp_path)
        )

    first = make()
    assert first.vocab_size == 300
    assert calls == [1]
    [cached] = (tmp_path / "tokenizers").glob("bpe-*-v300.json")
    modified = cached.stat().st_mtime_ns

    second = make()
    assert second.tokenizer.to_str() == first.tokenizer.to_str()
    assert calls == [1], "the second data module must read the cached tokenizer, not train again"
    assert cached.stat().st_mtime_ns == modified

    # Another vocabulary size is another tokenizer.
    assert (
        LMDataModule(
            source="local", path=str(tiny_corpus), bpe_vocab_size=280, cache_dir=str(tmp_path)
        ).vocab_size
        == 280
    )
    assert calls == [1, 1]


def test_bpe_round_trips_text_and_has_eos():
    texts = ["The quick brown fox jumps over the lazy dog.", "def f(x):\n    return x ** 2\n"] * 50
    tokenizer = train_bpe(texts, vocab_size=300)
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    assert eos_id is not None
    for text in texts[:2] + ["unseen: ünïcödé ✓ 数据"]:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        assert eos_id not in ids
        assert tokenizer.decode(ids) == text
    # Merges were learned: frequent words take fewer tokens than bytes.
    assert len(tokenizer.encode(texts[0]).ids) < len(texts[0].encode())


def test_tokenizer_json_path(tiny_corpus, tmp_path):
    trained = train_bpe(["hello world, hello tokens"] * 20, vocab_size=270)
    path = tmp_path / "my" / "tokenizer.json"
    path.parent.mkdir()
    trained.save(str(path))
    for spec in (str(path), str(path.parent)):  # the file, or a folder holding tokenizer.json
        datamodule = LMDataModule(
            source="local", path=str(tiny_corpus), tokenizer=spec, cache_dir=str(tmp_path)
        )
        assert datamodule.tokenizer.to_str() == trained.to_str()
        assert datamodule.vocab_size == 270
        assert datamodule.eos_id == trained.token_to_id(EOS_TOKEN)


def test_tokenizer_without_eos_is_rejected(tiny_corpus, tmp_path):
    path = tmp_path / "tokenizer.json"
    trained = train_bpe(["abc"] * 5, vocab_size=270, eos_token="</s>")
    trained.save(str(path))
    datamodule = LMDataModule(
        source="local", path=str(tiny_corpus), tokenizer=str(path), cache_dir=str(tmp_path)
    )
    with pytest.raises(ValueError, match="data.eos_token"):
        _ = datamodule.vocab_size
    assert LMDataModule(
        source="local", path=str(tiny_corpus), tokenizer=str(path), eos_token="</s>", cache_dir=str(tmp_path)
    ).eos_id == trained.token_to_id("</s>")


@pytest.mark.parametrize(
    "spec, kind",
    [
        ("bpe", "bpe"),
        ("togethercomputer/RedPajama-INCITE-7B-Base", "hub"),
        ("EleutherAI/gpt-neox-20b", "hub"),
    ],
)
def test_tokenizer_spec_kinds(spec, kind):
    assert parse_tokenizer_spec(spec)[0] == kind


@pytest.mark.parametrize("spec", ["sentencepiece", "gpt2", "", "/no/such/tokenizer.json", "missing.json"])
def test_unknown_tokenizer_fails_before_any_compute(spec, tiny_corpus, tmp_path):
    with pytest.raises(ValueError, match="data.tokenizer"):
        LMDataModule(source="local", path=str(tiny_corpus), tokenizer=spec, cache_dir=str(tmp_path))
    assert not (tmp_path / "tokenizers").exists()


def test_hub_tokenizer_offline_error(tiny_corpus, tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty HF cache
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    datamodule = LMDataModule(
        source="local",
        path=str(tiny_corpus),
        tokenizer="togethercomputer/RedPajama-INCITE-7B-Base",
        cache_dir=str(tmp_path),
    )
    with pytest.raises(RuntimeError, match="data.tokenizer: could not load hub tokenizer"):
        _ = datamodule.vocab_size
