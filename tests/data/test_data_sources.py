"""Corpus sources: embedded, local files, and the hub path against a local stand-in with SlimPajama's schema."""

import collections
import json
import math
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lit_resformer.data import (
    TABLE2_MIXTURE,
    LMDataModule,
    embedded_documents,
    hub_documents,
    local_documents,
)
from lit_resformer.data import datamodule as datamodule_module


@pytest.fixture
def offline(monkeypatch):
    """No hub access: what CI and this machine have."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


@pytest.mark.integration
def test_embedded_corpus_end_to_end(tmp_path):
    """The one test over the full embedded corpus: both domains, then tokenizer + packing + per-domain loaders."""
    documents = collections.Counter()
    text_bytes = collections.Counter()
    for document in embedded_documents():
        documents[document.domain] += 1
        text_bytes[document.domain] += len(document.text.encode("utf-8"))
    assert documents["wiki"] > 9_900  # 10,033 article leads, a few may be empty
    assert documents["code"] > 100  # stdlib modules under the byte budget
    assert set(documents) == {"code", "wiki"}
    # Comparable sizes, so that neither domain is negligible in the training mix.
    assert 0.5 < text_bytes["code"] / text_bytes["wiki"] < 2

    datamodule = LMDataModule(cache_dir=str(tmp_path))
    assert datamodule.vocab_size == 8192
    assert datamodule.domains == ["code", "wiki"]
    assert datamodule.tokenizer.id_to_token(datamodule.eos_id) == "<|endoftext|>"
    datamodule.setup("fit")
    val_loaders = datamodule.val_dataloader()
    assert len(val_loaders) == 2
    for loader in val_loaders:
        assert 0 < len(loader.dataset) <= 64
    batch = next(iter(datamodule.train_dataloader()))
    assert batch["input_ids"].shape == (8, 256)


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_local_txt_documents_split_on_blank_lines(tmp_path):
    (tmp_path / "poems.txt").write_text("first doc\nline two\n\n\n  \nsecond doc\n\nthird\n")
    documents = list(local_documents(tmp_path / "poems.txt"))
    assert [d.text for d in documents] == ["first doc\nline two", "second doc", "third"]
    assert {d.domain for d in documents} == {"poems"}


def test_local_folder_domains_per_file_and_per_field(tmp_path):
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "news.jsonl").write_text(
        "\n".join(
            json.dumps({"text": f"news {i}", "meta": {"kind": "a" if i % 2 else "b"}}) for i in range(4)
        )
        + "\n"
    )
    pq.write_table(
        pa.table({"text": ["p0", "p1", "p2"], "meta": [{"kind": "a"}, {"kind": "c"}, {"kind": "c"}]}),
        folder / "papers.parquet",
    )
    by_file = list(local_documents(folder))
    # sorted file order: papers.parquet, then sub/news.jsonl
    assert [d.domain for d in by_file] == ["papers"] * 3 + ["news"] * 4
    assert [d.text for d in by_file[:3]] == ["p0", "p1", "p2"]

    by_field = list(local_documents(folder, domain_field="meta.kind"))
    assert collections.Counter(d.domain for d in by_field) == {"a": 3, "b": 2, "c": 2}


def test_local_txt_with_domain_field_is_rejected(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ValueError, match="domain_field"):
        list(local_documents(tmp_path, domain_field="source"))


def write_slimpajama_standin(path, per_domain=6000, seed=0):
    """SlimPajama's schema with every subset equally common, so only the mixture can produce Table 2."""
    rng = random.Random(seed)
    rows = [
        {"text": f"{name} document {i} " + "word " * rng.randint(3, 30), "meta": {"redpajama_set_name": name}}
        for name in TABLE2_MIXTURE
        for i in range(per_domain)
    ]
    rng.shuffle(rows)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def slimpajama_standin(tmp_path_factory):
    return write_slimpajama_standin(tmp_path_factory.mktemp("hub") / "slimpajama_standin.jsonl")


def test_hub_mixture_follows_table2(slimpajama_standin, offline):
    stream = hub_documents("json", data_files=str(slimpajama_standin), seed=0)
    counts = collections.Counter(document.domain for _, document in zip(range(10_000), stream, strict=False))
    assert sum(counts.values()) == 10_000
    for domain, share in TABLE2_MIXTURE.items():
        assert abs(counts[domain] / 10_000 - share) < 0.02, (domain, counts[domain])


def test_hub_mixture_by_tokens_follows_table2_token_shares(tmp_path, offline):
    # Books ten times longer than web pages, as in SlimPajama: document shares would then miss Table 2.
    words = {name: 20 for name in TABLE2_MIXTURE} | {"RedPajamaBook": 200, "RedPajamaArXiv": 100}
    rng = random.Random(1)
    rows = [
        {
            "text": " ".join(["w"] * rng.randint(words[name] // 2, words[name] * 3 // 2)),
            "meta": {"redpajama_set_name": name},
        }
        for name in TABLE2_MIXTURE
        for _ in range(1500)
    ]
    rng.shuffle(rows)
    path = tmp_path / "standin.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))

    stream = hub_documents("json", data_files=str(path), mixture_unit="tokens", measure=len)
    size = collections.Counter()
    for _, document in zip(range(5_000), stream, strict=False):
        size[document.domain] += len(document.text)
    total = sum(size.values())
    for domain, share in TABLE2_MIXTURE.items():
        assert abs(size[domain] / total - share) < 0.02, (domain, size[domain] / total)
    with pytest.raises(ValueError, match="data.hub_mixture_unit"):
        next(hub_documents("json", data_files=str(path), mixture_unit="bytes"))


def test_hub_without_mixture_keeps_the_stream(slimpajama_standin, offline):
    stream = hub_documents("json", data_files=str(slimpajama_standin), mixture={})
    first = [document.text for _, document in zip(range(5), stream, strict=False)]
    assert first == [row["text"].strip() for row in _records(slimpajama_standin)[:5]]


def test_hub_snapshot_is_capped_and_cached(slimpajama_standin, offline, tmp_path, monkeypatch):
    def make():
        return LMDataModule(
            source="hub",
            hub_name="json",
            hub_data_files=str(slimpajama_standin),
            max_hub_tokens=30_000,
            bpe_vocab_size=300,
            seq_len=16,
            holdout_fraction=0.05,
            cache_dir=str(tmp_path),
        )

    first = make()
    first.setup("fit")
    assert first.domains == sorted(TABLE2_MIXTURE)
    snapshot_records = _records(next((tmp_path / "hub").glob("*.jsonl")))
    # While the BPE does not exist yet the cap counts UTF-8 bytes / 4 (+ EOS): the snapshot ends with the first
    # document that reaches it.
    counted = [math.ceil(len(r["text"].encode()) / 4) + 1 for r in snapshot_records]
    assert sum(counted[:-1]) < 30_000 <= sum(counted)

    def no_streaming(*args, **kwargs):
        raise AssertionError("the hub was streamed again although the snapshot is cached")

    monkeypatch.setattr(datamodule_module, "hub_documents", no_streaming)
    second = make()
    second.setup("fit")
    assert np.array_equal(
        np.load(second._packed["dir"] / "train.npy"), np.load(first._packed["dir"] / "train.npy")
    )


def test_hub_snapshot_counts_tokens_with_a_fixed_tokenizer(slimpajama_standin, offline, tmp_path):
    from lit_resformer.data import train_bpe

    tokenizer_path = tmp_path / "tokenizer.json"
    train_bpe([r["text"] for r in _records(slimpajama_standin)[:500]], vocab_size=300).save(
        str(tokenizer_path)
    )
    datamodule = LMDataModule(
        source="hub",
        hub_name="json",
        hub_data_files=[str(slimpajama_standin)],
        hub_mixture_unit="tokens",
        max_hub_tokens=20_000,
        tokenizer=str(tokenizer_path),
        seq_len=16,
        holdout_fraction=0.05,
        cache_dir=str(tmp_path),
    )
    datamodule.setup("fit")
    meta = datamodule._packed
    taken = sum(meta["lengths"].values())  # every token of the snapshot, EOS included, in some split
    last_document = _records(next((tmp_path / "hub").glob("*.jsonl")))[-1]["text"]
    last_tokens = len(datamodule.tokenizer.encode(last_document, add_special_tokens=False).ids) + 1
    assert taken - last_tokens < 20_000 <= taken
