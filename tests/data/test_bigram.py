"""The bigram reference: Kneser-Ney probabilities by hand and normalised, below the unigram reference exactly when
the text has sequential structure, and the datamodule's value against an independent count, cached once."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lit_resformer.data import bigram as bigram_module
from lit_resformer.data import token_counts, unigram_loss
from lit_resformer.data.bigram import KneserNeyBigram, bigram_counts


def test_kneser_ney_by_hand_and_normalised():
    # stream 0 1 0 1 0 2 over 4 ids: pairs (0,1) x2, (1,0) x2, (0,2) x1
    counts = bigram_counts(np.array([0, 1, 0, 1, 0, 2]), vocab_size=4)
    assert counts.pairs.tolist() == [0 * 4 + 1, 0 * 4 + 2, 1 * 4 + 0] and counts.counts.tolist() == [2, 1, 2]
    model = KneserNeyBigram(counts)
    # pair types seen once: 1, twice: 2 -> D = 1 / (1 + 4) = 0.2; distinct predecessors of 0 1 2 3: 1 1 1 0 (all
    # count 1 -> D' = 0.9, the upper bound); 3 distinct pairs, 3 of 4 ids ever follow something
    assert model.discount == pytest.approx(0.2)
    continuation = (np.maximum(np.array([1, 1, 1, 0]) - 0.9, 0) + 0.9 * 3 / 4) / 3
    # P(1 | 0) = (2 - D) / 3 + D * 2 / 3 * P_cont(1): context 0 was followed 3 times, by 2 distinct ids
    assert model.probabilities(np.array([0]), np.array([1]))[0] == pytest.approx((2 - 0.2) / 3 + 0.2 * 2 / 3 * continuation[1])
    # an unseen id keeps some probability; an unseen context (3) falls back to the continuation unigram
    assert continuation[3] > 0
    assert model.probabilities(np.array([0]), np.array([3]))[0] == pytest.approx(0.2 * 2 / 3 * continuation[3])
    assert model.probabilities(np.array([3]), np.array([2]))[0] == pytest.approx(continuation[2])
    for context in range(4):  # every context, seen or not, is a distribution over the vocabulary
        assert model.probabilities(np.full(4, context), np.arange(4)).sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="token id 4 is outside the vocabulary of 4"):
        bigram_counts(np.array([0, 4]), vocab_size=4)
    with pytest.raises(ValueError, match="at least two tokens"):
        KneserNeyBigram(bigram_counts(np.array([1]), vocab_size=4))
    with pytest.raises(ValueError, match="no tokens"):
        model.loss(np.array([], dtype=np.int64), np.array([], dtype=np.int64))


def test_counts_match_an_independent_count_in_chunks_and_at_a_large_vocabulary(monkeypatch):
    rng = np.random.default_rng(0)
    vocab = 50_000  # sparse: V^2 = 2.5e9 ids, only the distinct pairs are stored
    stream = rng.integers(vocab - 30, vocab, 5_000)
    expected = Counter(zip(stream[:-1].tolist(), stream[1:].tolist(), strict=True))
    monkeypatch.setattr(bigram_module, "_PAIR_CHUNK", 777)  # pairs straddling chunk boundaries counted once
    counts = bigram_counts(stream, vocab)
    assert counts.total == len(stream) - 1
    assert {divmod(int(p), vocab): int(c) for p, c in zip(counts.pairs, counts.counts, strict=True)} == expected
    model = KneserNeyBigram(counts)
    assert model.probabilities(np.full(vocab, stream[0]), np.arange(vocab)).sum() == pytest.approx(1.0)


def _references(train: np.ndarray, held_out: np.ndarray, vocab: int) -> tuple[float, float]:
    unigram = unigram_loss(token_counts(train, vocab), held_out[1:])
    return unigram, KneserNeyBigram(bigram_counts(train, vocab)).loss(held_out[:-1], held_out[1:])


def _markov_stream(rng: np.random.Generator, transitions: np.ndarray, length: int) -> np.ndarray:
    cumulative = transitions.cumsum(axis=1)
    stream, draws = np.empty(length, dtype=np.int64), rng.random(length)
    stream[0] = 0
    for i in range(1, length):
        stream[i] = min(np.searchsorted(cumulative[stream[i - 1]], draws[i]), len(transitions) - 1)
    return stream


def test_bigram_is_below_the_unigram_only_when_the_text_has_sequential_structure():
    rng = np.random.default_rng(1)
    vocab = 40
    # no structure: independent draws from a skewed distribution; the bigram has nothing more to learn
    frequencies = 1 / np.arange(1, vocab + 1)
    independent = np.tile(frequencies / frequencies.sum(), (vocab, 1))
    # structure: each token is mostly followed by one of three successors
    structured = np.full((vocab, vocab), 0.01)
    for token in range(vocab):
        structured[token, [(token + 1) % vocab, (token + 7) % vocab, (token * 3) % vocab]] += 3.0
    structured /= structured.sum(axis=1, keepdims=True)
    for transitions, structure in ((independent, False), (structured, True)):
        stream = _markov_stream(rng, transitions, 120_000)
        unigram, bigram = _references(stream[:100_000], stream[100_000:], vocab)
        if structure:  # the true conditional entropy is about 1.4 nats, the unigram's about 3.7
            assert bigram < unigram - 1.5
        else:
            assert abs(bigram - unigram) < 0.02


@pytest.mark.parametrize("val_sequences_per_domain", [None, 2])
def test_datamodule_bigram_reference_matches_an_independent_count(tiny_datamodule, val_sequences_per_domain,
                                                                    monkeypatch, caplog):
    dm = tiny_datamodule(val_sequences_per_domain=val_sequences_per_domain)
    dm.prepare_data()
    reference = dm.bigram_val_losses()

    # independently: the training documents re-encoded (each followed by EOS) as one stream, its pairs counted
    tokenizer, scan, train = dm.tokenizer, dm.corpus_scan(), []
    for split, document in scan.assign(dm.documents()):
        if split == "train":
            train += tokenizer.encode(document.text, add_special_tokens=False).ids + [dm.eos_id]
    model = KneserNeyBigram(bigram_counts(np.array(train), dm.vocab_size))
    # scored on exactly the labels val/loss is computed on, each given the input token at its position
    for domain, loader in zip(dm.domains, dm.val_dataloader(), strict=True):
        previous = np.concatenate([batch["input_ids"].numpy().reshape(-1) for batch in loader])
        labels = np.concatenate([batch["labels"].numpy().reshape(-1) for batch in loader])
        assert reference[domain] == pytest.approx(model.loss(previous, labels), rel=1e-12)
        assert reference[domain] < dm.unigram_val_losses()[domain]

    # the counts are kept with the token cache and read back, not recounted
    assert (dm._tokens_dir() / "train_bigrams.npz").is_file()
    with monkeypatch.context() as patched:
        patched.setattr("lit_resformer.data.datamodule.bigram_counts", lambda *a: pytest.fail("counted again"))
        again = tiny_datamodule(val_sequences_per_domain=val_sequences_per_domain)
        assert again.bigram_val_losses() == reference

    # a damaged file fails its content hash and is counted again
    path = dm._tokens_dir() / "train_bigrams.npz"
    path.write_bytes(path.read_bytes()[:-10])
    with caplog.at_level("WARNING"):
        assert tiny_datamodule(val_sequences_per_domain=val_sequences_per_domain).bigram_val_losses() == reference
    assert "train_bigrams.npz has" in caplog.text and "counting again" in caplog.text


@pytest.mark.integration
def test_add_references_fills_in_a_run_trained_before_the_bigram_only_on_its_own_data(tmp_path, tiny_datamodule,
                                                                                       capsys):
    """`lit-resformer add-references`: the bigram reference of a finished run that predates it, computed from its
    rebuilt data once the run's logged unigram reference comes out again; another corpus is refused, a run with a
    reference or unfinished is left alone, and a run shared from another grid is done where it trained."""
    from lit_resformer.cli import main
    from lit_resformer.runs.run_dir import RunDir
    from lit_resformer.runs.summary import add_references

    module = tiny_datamodule()
    data = dict(module.hparams)
    module.prepare_data()
    module.setup("fit")
    unigram, bigram = module.unigram_val_losses(), module.bigram_val_losses()
    grid = tmp_path / "old-grid"
    (tmp_path / "old-grid").mkdir()
    (grid / "grid.yaml").write_text("name: old-grid\n")

    def old_run(cell: str, logged: dict, status: str = "done") -> RunDir:
        run = RunDir(grid / cell / "seed0")
        run.path.mkdir(parents=True)
        run.write_experiment({"data": data})
        run.write_summary({"status": status, "final_val_loss": 3.0, "unigram_val_loss_by_domain": logged,
                           "unigram_val_loss": sum(logged.values()) / len(logged)})
        return run

    own = old_run("own-data", unigram)
    other = old_run("other-data", {d: v + 0.01 for d, v in unigram.items()})
    running = old_run("unfinished", unigram, status="running")
    (grid / "shared").mkdir()
    (grid / "shared" / "seed0").symlink_to(own.path)

    main(["add-references", str(grid)])
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["other-data/seed0", "own-data/seed0"]  # no link, nothing unfinished
    added = own.read_summary()
    assert added["bigram_val_loss_by_domain"] == pytest.approx(bigram)
    assert added["bigram_val_loss"] == pytest.approx(np.mean(list(bigram.values())))
    assert added["references_added"]["unigram_match"] <= 1e-6
    assert "bigram_val_loss" not in other.read_summary()
    assert out[0].startswith("other-data/seed0: refused: the rebuilt validation tokens are not the run's "
                             "(unigram reference off by 0.01 nats")
    assert add_references(own) == "skipped: has a bigram reference"
    assert add_references(running) == "skipped: not finished"
