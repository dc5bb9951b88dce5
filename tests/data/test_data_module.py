"""Packing, caches, the split, loaders, DDP sharding and input validation of LMDataModule."""

import json
import types

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from lit_resformer.data import datamodule as datamodule_module
from lit_resformer.data import local_documents, pack_sequences, scan_corpus


def test_pack_sequences_rows_overlap_by_one_token():
    tokens = np.arange(50, dtype=np.uint16)
    rows = pack_sequences(tokens, seq_len=8)
    assert rows.shape == (6, 9)  # (50 - 1) // 8 full rows; the tail is dropped
    for i, row in enumerate(rows):
        assert np.array_equal(row, tokens[8 * i : 8 * i + 9])
    assert pack_sequences(tokens[:8], seq_len=8).shape == (0, 9)


def test_documents_end_with_eos_and_batches_are_next_token_pairs(tiny_datamodule, tiny_corpus):
    datamodule = tiny_datamodule()
    datamodule.setup("fit")
    meta = datamodule._packed
    tokens_dir = datamodule._tokens_dir()
    scan = datamodule.corpus_scan()
    train_texts = [doc.text for split, doc in scan.assign(local_documents(tiny_corpus)) if split == "train"]

    stream = np.fromfile(tokens_dir / "train.bin", dtype=meta["dtype"])
    assert stream[-1] == datamodule.eos_id
    ends = np.flatnonzero(stream == datamodule.eos_id)
    assert len(ends) == len(train_texts)  # exactly one EOS per document, at its end
    starts = np.concatenate([[0], ends[:-1] + 1])
    decoded = [datamodule.tokenizer.decode(stream[s:e].tolist()) for s, e in zip(starts, ends, strict=True)]
    assert decoded == train_texts

    train = np.load(meta["dir"] / "train.npy", mmap_mode="r")
    assert train.dtype == np.uint16 and train.shape[1] == datamodule.seq_len + 1
    assert np.array_equal(train[0], stream[: datamodule.seq_len + 1])

    batch = next(iter(datamodule.train_dataloader()))
    assert set(batch) == {"input_ids", "labels"}
    assert batch["input_ids"].shape == batch["labels"].shape == (4, 16)
    assert batch["input_ids"].dtype == batch["labels"].dtype == torch.long
    assert torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])


def test_cache_hit_returns_identical_arrays_without_tokenising(tiny_datamodule, monkeypatch):
    first = tiny_datamodule(seq_len=12)
    first.setup("fit")

    def fail(*args, **kwargs):
        raise AssertionError("the corpus was tokenised again although it is cached")

    monkeypatch.setattr(datamodule_module, "write_token_streams", fail)
    monkeypatch.setattr(datamodule_module, "train_bpe", fail)
    second = tiny_datamodule(seq_len=12)
    second.setup("fit")
    assert second._packed["dir"] == first._packed["dir"]
    for name in ["train"] + [f"{split}.{d}" for split in ("val", "test") for d in range(2)]:
        a = np.load(first._packed["dir"] / f"{name}.npy", mmap_mode="r")
        b = np.load(second._packed["dir"] / f"{name}.npy", mmap_mode="r")
        assert np.array_equal(a, b)
    # Another seq_len reuses the token streams and only packs again.
    other = tiny_datamodule(seq_len=10)
    other.setup("fit")
    assert other._packed["dir"] != first._packed["dir"]


def test_interrupted_build_leaves_no_cache_entry(tiny_datamodule, monkeypatch, data_cache):
    calls = []
    real_write_packed = datamodule_module.write_packed

    def crash_on_second_file(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return real_write_packed(*args, **kwargs)

    monkeypatch.setattr(datamodule_module, "write_packed", crash_on_second_file)
    with pytest.raises(KeyboardInterrupt):
        tiny_datamodule(seq_len=9).setup("fit")
    assert not list((data_cache / "packed").glob("*-T9*")), "no partial entry (and no temporary) may remain"
    monkeypatch.setattr(datamodule_module, "write_packed", real_write_packed)
    datamodule = tiny_datamodule(seq_len=9)
    datamodule.setup("fit")
    assert json.loads((datamodule._packed["dir"] / "meta.json").read_text())["seq_len"] == 9


def test_split_is_deterministic_disjoint_and_per_domain(tiny_corpus):
    documents = list(local_documents(tiny_corpus))
    scan = scan_corpus(documents, holdout_fraction=0.1)
    again = scan_corpus(documents, holdout_fraction=0.1)
    assert scan.held_out == again.held_out and scan.fingerprint == again.fingerprint

    splits = {"train": set(), "val": set(), "test": set()}
    per_domain = {}
    for split, document in scan.assign(documents):
        splits[split].add(document.text)
        per_domain.setdefault((split, document.domain), 0)
        per_domain[(split, document.domain)] += 1
    assert not splits["train"] & splits["val"]
    assert not splits["train"] & splits["test"]
    assert not splits["val"] & splits["test"]
    for domain in ("alpha", "beta"):
        assert per_domain[("val", domain)] == per_domain[("test", domain)] == 6  # 10% of 60
        assert per_domain[("train", domain)] == 48

    # The held-out documents are chosen by their text, not by their position in the files.
    reordered = scan_corpus(documents[::-1], holdout_fraction=0.1)
    held_out_reordered = {doc.text for split, doc in reordered.assign(documents[::-1]) if split == "val"}
    assert held_out_reordered == splits["val"]


def test_val_and_test_loaders_one_per_domain(tiny_datamodule):
    datamodule = tiny_datamodule(val_sequences_per_domain=5)
    datamodule.setup("validate")
    assert datamodule.domains == ["alpha", "beta"]
    val_loaders, test_loaders = datamodule.val_dataloader(), datamodule.test_dataloader()
    assert isinstance(val_loaders, list) and len(val_loaders) == len(test_loaders) == 2
    for val_loader, test_loader in zip(val_loaders, test_loaders, strict=True):
        assert isinstance(val_loader, DataLoader)
        assert len(val_loader.dataset) == len(test_loader.dataset) == 5
        val_batch, test_batch = next(iter(val_loader)), next(iter(test_loader))
        assert val_batch["input_ids"].shape[1] == 16
        assert not torch.equal(val_batch["input_ids"], test_batch["input_ids"])
    # The domains differ in content: their first validation batches are different token sequences.
    assert not torch.equal(next(iter(val_loaders[0]))["input_ids"], next(iter(val_loaders[1]))["input_ids"])
    uncapped = tiny_datamodule(val_sequences_per_domain=None)
    assert len(uncapped.val_dataloader()[1].dataset) > 5


def test_ddp_ranks_see_disjoint_data(tiny_datamodule):
    rows_by_rank = []
    for rank in (0, 1):
        datamodule = tiny_datamodule(micro_batch_size=8)
        datamodule.trainer = types.SimpleNamespace(
            world_size=2, global_rank=rank
        )  # what a DDP Trainer reports
        loader = datamodule.train_dataloader()
        loader.sampler.set_epoch(3)
        rows_by_rank.append({tuple(row.tolist()) for batch in loader for row in batch["input_ids"]})
        assert len(loader) == len(loader.dataset) // 2 // 8
    assert rows_by_rank[0] and rows_by_rank[1]
    assert not rows_by_rank[0] & rows_by_rank[1]


def test_each_epoch_is_reshuffled(tiny_datamodule):
    loader = tiny_datamodule().train_dataloader()
    loader.sampler.set_epoch(0)
    epoch0 = next(iter(loader))["input_ids"]
    loader.sampler.set_epoch(1)
    assert not torch.equal(next(iter(loader))["input_ids"], epoch0)


# ---------------------------------------------------------------------------------------------------------
# bad input: a clear error naming the field, before any compute


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(source="web"), "data.source"),
        (dict(seq_len=0), "data.seq_len"),
        (dict(micro_batch_size=0), "data.micro_batch_size"),
        (dict(num_workers=-1), "data.num_workers"),
        (dict(bpe_vocab_size=100), "data.bpe_vocab_size"),
        (dict(holdout_fraction=0.0), "data.holdout_fraction"),
        (dict(val_sequences_per_domain=0), "data.val_sequences_per_domain"),
        (dict(path=None), "data.path"),
        (dict(path=""), "data.path"),
        (dict(path="/no/such/corpus"), "data.path"),
        (dict(tokenizer="wordpiece"), "data.tokenizer"),
        (dict(source="hub", hub_mixture={"RedPajamaC4": -1.0}), "data.hub_mixture"),
        (dict(source="hub", max_hub_tokens=0), "data.max_hub_tokens"),
    ],
)
def test_bad_config_fails_at_init(tiny_datamodule, overrides, field, data_cache):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        tiny_datamodule(**overrides)


def test_bad_local_files_fail_at_init(tmp_path, tiny_datamodule):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"data\.path: folder .* is empty"):
        tiny_datamodule(path=str(tmp_path / "empty"))
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.txt").write_text("text")
    (tmp_path / "mixed" / "b.csv").write_text("x,y")
    with pytest.raises(ValueError, match=r"data\.path: unknown file type.*b\.csv"):
        tiny_datamodule(path=str(tmp_path / "mixed"))


def test_domain_with_too_few_documents(tmp_path, tiny_corpus, tiny_datamodule):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "big.txt").write_text((tiny_corpus / "alpha.txt").read_text())
    (folder / "small.txt").write_text("only one document here")
    datamodule = tiny_datamodule(path=str(folder))
    with pytest.raises(ValueError, match="domain 'small' has 1 document"):
        datamodule.setup("fit")


def test_domain_with_too_few_tokens_for_one_validation_sequence(tiny_datamodule):
    datamodule = tiny_datamodule(seq_len=600)
    with pytest.raises(ValueError, match=r"domain 'alpha' has too few val tokens.*data\.holdout_fraction"):
        datamodule.setup("fit")


def test_fewer_train_sequences_than_one_batch(tiny_datamodule):
    with pytest.raises(ValueError, match=r"data\.micro_batch_size"):
        tiny_datamodule(seq_len=16, micro_batch_size=10_000, holdout_fraction=0.05).setup("fit")
