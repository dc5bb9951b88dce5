"""The unigram plateau reference: the loss against a hand computation, the datamodule's value against an
independent count over the corpus, its cache, and its place (beside the bigram reference) in every run's metrics
and summary."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from lit_resformer.data import token_counts, unigram_loss
from lit_resformer.data.packing import stream_name
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.runs.summary import results


def test_unigram_loss_by_hand():
    # training tokens 0 0 1 2 over a vocabulary of 4: counts 2 1 1 0, N = 4, add-one: p = (c + 1) / (4 + 4)
    counts = token_counts(np.array([0, 0, 1, 2], dtype=np.uint16), vocab_size=4)
    assert counts.tolist() == [2, 1, 1, 0]
    # validation tokens 0 3 1: -(log 3/8 + log 1/8 + log 2/8) / 3; the unseen token 3 keeps a finite loss
    assert unigram_loss(counts, np.array([0, 3, 1])) == pytest.approx(-(math.log(3 / 8) + math.log(1 / 8) + math.log(2 / 8)) / 3)
    # add-k: p = (c + 0.5) / (4 + 2); token 2 was seen once, token 3 never
    assert unigram_loss(counts, np.array([2, 3]), add_k=0.5) == pytest.approx(-(math.log(1.5 / 6) + math.log(0.5 / 6)) / 2)
    with pytest.raises(ValueError, match="token id 4 is outside the vocabulary of 4"):
        token_counts(np.array([4]), vocab_size=4)
    with pytest.raises(ValueError, match="no tokens"):
        unigram_loss(counts, np.array([], dtype=np.int64))


@pytest.mark.parametrize("val_sequences_per_domain", [None, 2])
def test_datamodule_reference_matches_an_independent_count(tiny_datamodule, val_sequences_per_domain, monkeypatch):
    dm = tiny_datamodule(val_sequences_per_domain=val_sequences_per_domain)
    dm.prepare_data()
    reference = dm.unigram_val_losses()

    # independently: re-encode the training documents (each followed by EOS) and count in Python
    tokenizer, scan = dm.tokenizer, dm.corpus_scan()
    train = Counter()
    for split, document in scan.assign(dm.documents()):
        if split == "train":
            train.update(tokenizer.encode(document.text, add_special_tokens=False).ids + [dm.eos_id])
    total, vocab = sum(train.values()), dm.vocab_size
    # scored on exactly the labels val/loss is computed on
    for domain, loader in zip(dm.domains, dm.val_dataloader(), strict=True):
        labels = [int(t) for batch in loader for t in batch["labels"].reshape(-1)]
        expected = -sum(math.log((train[t] + 1) / (total + vocab)) for t in labels) / len(labels)
        assert reference[domain] == pytest.approx(expected, rel=1e-9)
    if val_sequences_per_domain is None:  # the whole split is the whole stream but its first token and ragged tail
        assert len(labels) > 0.9 * dm._packed["lengths"][stream_name("val", len(dm.domains) - 1)]

    # the training counts are kept with the token cache and read back, not recounted
    assert (dm._tokens_dir() / "train_counts.npy").is_file()
    monkeypatch.setattr("lit_resformer.data.datamodule.token_counts", lambda *a: pytest.fail("counted again"))
    again = tiny_datamodule(val_sequences_per_domain=val_sequences_per_domain)
    assert again.unigram_val_losses() == reference


@pytest.mark.integration
def test_every_run_logs_the_reference_at_step_zero_and_summarises_it(trained_run, tiny_datamodule):
    run = trained_run
    expected = tiny_datamodule().unigram_val_losses()
    metrics = RunDir(run).read_metrics()
    for domain, loss in expected.items():
        assert metrics[f"val/unigram_loss/{domain}"] == [(0, pytest.approx(loss))]
    # averaged over domains like val/loss
    assert metrics["val/unigram_loss"] == [(0, pytest.approx(np.mean(list(expected.values()))))]
    # the bigram reference beside it
    bigram = tiny_datamodule().bigram_val_losses()
    for domain, loss in bigram.items():
        assert metrics[f"val/bigram_loss/{domain}"] == [(0, pytest.approx(loss))]
    assert metrics["val/bigram_loss"] == [(0, pytest.approx(np.mean(list(bigram.values()))))]

    summary = results(RunDir(run))
    assert summary["unigram_val_loss"] == pytest.approx(np.mean(list(expected.values())))
    assert summary["unigram_val_loss_by_domain"] == pytest.approx(expected)
    assert summary["bigram_val_loss"] == pytest.approx(np.mean(list(bigram.values())))
    assert summary["bigram_val_loss_by_domain"] == pytest.approx(bigram)
    assert summary["bigram_val_loss"] < summary["unigram_val_loss"]
