"""Bits per byte: the bytes of every token of a byte-level BPE, the validation metric, its references and the summary."""

from __future__ import annotations

import math

import pytest
import torch
import torchmetrics
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from lit_resformer.data import LMDataModule
from lit_resformer.data.tokenizer import EOS_TOKEN, token_byte_lengths, token_bytes, train_bpe
from lit_resformer.model import ModelConfig
from lit_resformer.runs import curves
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.runs.summary import BPB_FIELDS, metric_results
from lit_resformer.training.module import LitResFormer, bits_per_byte

TEXT = "café €😀"
# The byte-level tokens of TEXT under HAND_MERGES, written out by hand: GPT-2's byte alphabet writes byte 0xC3 as
# 'Ã', 0xA9 '©', 0x20 'Ġ', 0xE2 'â', 0x82 'Ĥ', 0xAC '¬', 0xF0 'ð', 0x9F 'Ł', 0x98 'ĺ', 0x80 'Ģ'.
HAND_TOKENS = ["c", "a", "f", "Ã©", "ĠâĤ¬", "ðŁĺĢ"]
HAND_BYTES = [1, 1, 1, 2, 4, 4, 0]  # c a f é (C3 A9) " €" (20 E2 82 AC) 😀 (F0 9F 98 80), then EOS: no text
HAND_MERGES = [("Ã", "©"), ("ð", "Ł"), ("ðŁ", "ĺ"), ("ðŁĺ", "Ģ"), ("Ġ", "â"), ("Ġâ", "Ĥ"), ("ĠâĤ", "¬")]
LOSSES = [2.0, 1.5, 1.0, 3.0, 4.0, 5.0, 0.5]  # nats, one per target token (EOS included: it is predicted)
HAND_BPB = 17.0 / (math.log(2) * 13)  # 17 nats over 13 bytes = 1.8866 bits per byte


def hand_tokenizer() -> Tokenizer:
    """A byte-level BPE with the 256 byte characters, the merges above and EOS, as `train_bpe` builds them."""
    vocab = {char: i for i, char in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for left, right in HAND_MERGES:
        vocab[left + right] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab, HAND_MERGES))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(EOS_TOKEN, special=True)])
    return tokenizer


def test_bits_per_byte_by_hand():
    tokenizer = hand_tokenizer()
    encoding = tokenizer.encode(TEXT)
    assert encoding.tokens == HAND_TOKENS
    ids = [*encoding.ids, tokenizer.token_to_id(EOS_TOKEN)]
    table = token_byte_lengths(tokenizer)
    assert len(table) == tokenizer.get_vocab_size(with_added_tokens=True)
    assert table[ids].tolist() == HAND_BYTES
    assert sum(HAND_BYTES) == len(TEXT.encode("utf-8")) == 13
    assert [token_bytes(tokenizer)[i] for i in ids[3:]] == ["é".encode(), " €".encode(), "😀".encode(), b""]
    assert bits_per_byte(sum(LOSSES), int(table[ids].sum())) == pytest.approx(HAND_BPB)
    assert HAND_BPB == pytest.approx(1.88660, abs=1e-5)


def test_validation_accumulates_bits_per_byte_from_token_losses(monkeypatch):
    """The module's validation path: two batches whose mean losses are given (the second with an unscored label),
    per-domain sums of nats and bytes, then bits per byte = nats / (ln 2 x bytes)."""
    tokenizer = hand_tokenizer()
    ids = [*tokenizer.encode(TEXT).ids, tokenizer.token_to_id(EOS_TOKEN)]
    lit = LitResFormer(ModelConfig(n_layer=1, n_head=1, d_model=8, ffn_dim=8, max_seq_len=8,
                                   vocab_size=tokenizer.get_vocab_size()))
    lit.domains = ["text"]
    lit.val_loss = torch.nn.ModuleList([torchmetrics.MeanMetric()])
    lit.val_nats = torch.nn.ModuleList([torchmetrics.SumMetric()])
    lit.val_bytes = torch.nn.ModuleList([torchmetrics.SumMetric()])
    lit.token_bytes = torch.as_tensor(token_byte_lengths(tokenizer))
    batches = [torch.tensor([ids[:4]]), torch.tensor([[*ids[4:], -100]])]
    means = iter([sum(LOSSES[:4]) / 4, sum(LOSSES[4:]) / 3])
    monkeypatch.setattr(lit, "_eval_loss", lambda batch: torch.tensor(next(means)))
    logged = {}
    monkeypatch.setattr(lit, "log", lambda name, value, **kw: logged.__setitem__(name, float(value)))
    monkeypatch.setattr(lit, "log_dict", lambda values, **kw: logged.update({k: float(v) for k, v in values.items()}))
    for labels in batches:
        lit.validation_step({"input_ids": labels.clamp_min(0), "labels": labels}, 0)
    lit.on_validation_epoch_end()
    assert logged["val/bpb/text"] == pytest.approx(HAND_BPB, rel=1e-6)
    assert logged["val/bpb"] == pytest.approx(HAND_BPB, rel=1e-6)


def test_byte_lengths_agree_with_decoding():
    texts = ["naïve café, 5 €, 日本語 and 😀!\n\tdef f(x):\n        return x ** 2", "Ünïcödé “quotes” — dashes…"]
    tokenizer = train_bpe(texts * 30, 320)
    table, table_bytes = token_byte_lengths(tokenizer), token_bytes(tokenizer)
    for text in [*texts, "unseen: Ωμέγα ✓ 🚀", " leading space"]:
        ids = tokenizer.encode(text).ids
        assert int(table[ids].sum()) == len(text.encode("utf-8")), text
        assert b"".join(table_bytes[i] for i in ids) == text.encode("utf-8")
    whole = 0
    for token_id in range(tokenizer.get_vocab_size()):
        decoded = tokenizer.decode([token_id], skip_special_tokens=True)
        if "\ufffd" not in decoded:  # a token that is whole UTF-8 characters decodes to exactly its bytes
            assert len(decoded.encode("utf-8")) == table[token_id], tokenizer.id_to_token(token_id)
            whole += 1
    assert whole > 150  # the 128 ASCII bytes and most merges
    assert table[tokenizer.token_to_id(EOS_TOKEN)] == 0
    assert any(n == 1 and "\ufffd" in tokenizer.decode([i]) for i, n in enumerate(table))  # partial characters


def test_a_tokenizer_that_is_not_byte_level_isrefused():
    word_level = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    with pytest.raises(ValueError, match="byte-level BPE"):
        token_byte_lengths(word_level)


@pytest.mark.integration
def test_a_run_logs_bits_per_byte_and_its_summary_holds_them(trained_run, tiny_corpus, data_cache):
    run = trained_run
    metrics = curves.read_metrics(run)
    data = LMDataModule(source="local", path=str(tiny_corpus), bpe_vocab_size=300, seq_len=16, micro_batch_size=4,
                        holdout_fraction=0.05, cache_dir=str(data_cache))
    data.prepare_data()
    data.setup("fit")
    assert RunDir(run).corpus_hash() == data.corpus_hash  # the run recorded what it trained on (claims never pair two)
    for domain, loader in zip(data.domains, data.val_dataloader(), strict=True):
        labels = [row for batch in loader for row in batch["labels"].tolist()]
        tokens = sum(len(row) for row in labels)
        n_bytes = sum(len(data.tokenizer.decode(row).encode("utf-8")) for row in labels)  # the corpus is ASCII
        # The validation after 2 steps (logged at step 1) averages the loss over tokens; the one at step 0 averages
        # the batches' means (its last batch is smaller here), while bits per byte always sum every token's loss.
        for step, rel in ((1, 1e-5), (0, 1e-3)):
            expected = metrics.loc[step, f"val/loss/{domain}"] * tokens / (math.log(2) * n_bytes)
            assert metrics.loc[step, f"val/bpb/{domain}"] == pytest.approx(expected, rel=rel), (domain, step)
        for reference in ("unigram", "bigram"):
            expected = metrics.loc[0, f"val/{reference}_loss/{domain}"] * tokens / (math.log(2) * n_bytes)
            assert metrics.loc[0, f"val/{reference}_bpb/{domain}"] == pytest.approx(expected, rel=1e-6)
    for step in (0, 1):
        per_domain = [metrics.loc[step, f"val/bpb/{d}"] for d in data.domains]
        assert metrics.loc[step, "val/bpb"] == pytest.approx(sum(per_domain) / len(per_domain), rel=1e-6)
    summary = metric_results(metrics)
    assert set(BPB_FIELDS) <= set(summary)
    assert summary["final_val_bpb"] == pytest.approx(metrics.loc[1, "val/bpb"])
    assert summary["best_val_bpb"] == pytest.approx(metrics["val/bpb"].min())
    assert set(summary["final_val_bpb_by_domain"]) == set(data.domains) == set(summary["bigram_val_bpb_by_domain"])
    assert summary["unigram_val_bpb"] == pytest.approx(metrics.loc[0, "val/unigram_bpb"])


def test_a_summary_without_bits_per_byte_has_none():
    import pandas as pd

    summary = metric_results(pd.DataFrame({"train/loss": [5.0, 4.0], "val/loss": [5.1, 4.1],
                                           "val/loss/a": [5.1, 4.1]}, index=pd.Index([0, 1], name="step")))
    assert summary["final_val_bpb"] is None and summary["final_val_bpb_by_domain"] == {}
    assert summary["unigram_val_bpb"] is None and summary["bigram_val_bpb_by_domain"] == {}
