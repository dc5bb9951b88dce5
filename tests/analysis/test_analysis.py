"""The analysis trace on real models: the model's own attention, bounded memory, analysis.json + plots,
Hugging Face models, checkpoints and validation sampling."""

from __future__ import annotations

import json
import math
import weakref
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from lit_resformer.analysis import (
    AnalysisTrace,
    analyze,
    analyze_checkpoints,
    analyze_hf_model,
    analyze_model,
    analyze_run_dir,
    load_hf_causal_lm,
    sample_validation_batches,
)
from lit_resformer.analysis import metrics as M
from lit_resformer.model import ModelConfig, Trace, Transformer
from lit_resformer.model.hf import to_hf_llama
from lit_resformer.model.kernels import attention
from lit_resformer.reports.attention import analysis_section

SMALL = dict(n_layer=4, n_head=4, d_model=32, ffn_dim=64, vocab_size=97, max_seq_len=64)
PER_LAYER_KEYS = ["entropy", "importance_first", "importance_others", "similarity", "hidden_norm_first",
                  "hidden_norm_others", "value_norm_first", "value_norm_others", "top_eigenvalue", "fig4_cos_eq4",
                  "fig4_cos_eq6", "fig4_first_cos_eq4", "fig4_first_cos_eq6", "raw_value_norm_first",
                  "raw_value_norm_others", "raw_value_top_eigenvalue", "top_eigenvalue_share",
                  "raw_value_top_eigenvalue_share"]
BY_POSITION_KEYS = ["importance_by_position", "hidden_norm_by_position", "value_norm_by_position"]


def build(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig.from_dict({**SMALL, **overrides})).eval()


def tokens(batch=3, length=24, vocab=97, seed=1):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


class ModelAttention(Trace):
    """What the model itself computes on its explicit path: A_n and the q/k/v it attends with."""

    want_attention = True

    def __init__(self):
        self.probs, self.qkv = {}, {}

    def on_qkv(self, layer, q, k, v):
        self.qkv[layer] = (q, k, v)

    def on_attention(self, layer, probs):
        self.probs[layer] = probs


class RecordingTrace(AnalysisTrace):
    """Keeps every chunk of attention rows it reduces (test only: small sequences)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.chunks = defaultdict(list)

    def add_attention_rows(self, layer, probs, key_blocks=1):
        self.chunks[layer].append(probs.clone())
        super().add_attention_rows(layer, probs, key_blocks)


@pytest.mark.parametrize("variant", [dict(n_kv_head=2), dict(residual={"target": "v", "mapping": "cross_attention"})],
                         ids=["gqa", "cross_attention"])
def test_attention_reduced_is_the_models_own_and_equals_sdpa(variant):
    model = build(**variant)
    x = tokens()
    own = ModelAttention()
    recorder = RecordingTrace(top_i=4, attention_budget=3 * 4 * 48 * 5)  # a few rows per chunk
    with torch.no_grad():
        plain_logits = model(x)
        model(x, trace=own)
        traced_logits = model(x, trace=recorder)
    assert torch.equal(traced_logits, plain_logits)  # the trace leaves the model on its SDPA path
    summary = recorder.summary()
    for layer in range(model.config.n_layer):
        assert len(recorder.chunks[layer]) > 1
        rows = torch.cat(recorder.chunks[layer], dim=2)
        assert torch.allclose(rows, own.probs[layer], atol=1e-6)
        q, k, v = own.qkv[layer]
        blocks = k.shape[2] // q.shape[2]
        expected = (F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) if blocks == 1
                    else attention(q, k, v, offset=0, key_blocks=blocks))  # SDPA with the concatenated causal mask
        groups = q.shape[1] // k.shape[1]
        assert torch.allclose(own.probs[layer] @ v.repeat_interleave(groups, dim=1), expected, atol=1e-5)
        importance = M.token_importance(own.probs[layer], blocks).mean(0)
        assert torch.allclose(torch.tensor(summary["importance_by_position"][layer], dtype=torch.float64),
                              importance, atol=1e-6)


def _held_numel(obj, seen=None) -> int:
    """Numbers a trace keeps across layers: distinct tensors in its attributes and their dicts/tuples."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        return obj.numel()
    if isinstance(obj, dict):
        return sum(_held_numel(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_held_numel(v, seen) for v in obj)
    if isinstance(obj, AnalysisTrace):
        return sum(_held_numel(v, seen) for v in vars(obj).values())
    return 0


class ChunkWatcher(AnalysisTrace):
    """Checks that a chunk of attention is gone (not kept by anyone) when the next one arrives."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.previous = None
        self.chunks = defaultdict(int)
        self.peak_held = 0

    def add_attention_rows(self, layer, probs, key_blocks=1):
        assert self.previous is None or self.previous() is None, "an earlier attention chunk is still alive"
        self.previous = weakref.ref(probs)
        self.chunks[layer] += 1
        super().add_attention_rows(layer, probs, key_blocks)
        self.peak_held = max(self.peak_held, _held_numel(self))


@pytest.mark.integration
def test_long_sequence_memory_stays_bounded():
    t = 2048
    model = build(n_layer=2, n_head=2, d_model=32, max_seq_len=t)
    budget = 2 * t * 128  # 128 query rows of both heads per chunk
    trace = ChunkWatcher(top_i=8, attention_budget=budget)
    with torch.no_grad():
        model(tokens(batch=1, length=t), trace=trace)
    assert trace.largest_attention_block <= budget
    assert dict(trace.chunks) == {0: t // 128, 1: t // 128}
    # Across layers and chunks the trace holds O(layers x T) numbers, far less than one head's T x T matrix.
    assert trace.peak_held < t * t // 16
    assert trace.summary()["seq_len"] == t


def _png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_two_models_writes_schema_and_plots(tmp_path):
    models = {"vanilla": build(n_kv_head=2), "resformer": build(n_kv_head=2, residual={"target": "v"})}
    x = tokens(batch=4, length=20)
    report = analyze(models, x, tmp_path, batch_size=3, top_i=5, spectrum_layer=2)
    on_disk = json.loads((tmp_path / "analysis.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    assert (on_disk["num_seqs"], on_disk["seq_len"], on_disk["top_i"]) == (4, 20, 5)
    for result in on_disk["models"].values():
        assert result["kind"] == "lit-resformer" and result["num_seqs"] == 4 and result["n_layer"] == 4
        for key in PER_LAYER_KEYS:
            assert len(result[key]) == 4, key
        for key in BY_POSITION_KEYS:
            assert [len(row) for row in result[key]] == [20] * 4, key
        assert [len(row) for row in result["top_i_importance"]] == [5] * 4
        assert result["value_spectrum_layer"] == 2 and len(result["value_spectrum"]) == 16  # Hkv * d = 2 * 8
        assert result["value_spectrum"][0] == pytest.approx(result["top_eigenvalue"][1])
        assert result["fig4_cos_eq4"][0] is None and all(-1 <= c <= 1 for c in result["fig4_cos_eq4"][1:])
    expected_pngs = {"entropy_by_layer.png", "similarity_by_layer.png", "first_token_ratios.png",
                     "norms_by_position.png", "top_i_importance.png", "value_spectrum.png", "fig4_cosine.png"}
    assert set(on_disk["plots"]) == expected_pngs
    assert all(_png(tmp_path / name) for name in expected_pngs)


def test_raw_values_are_the_layers_own_projection():
    x = tokens(batch=2, length=12)
    vanilla = analyze_model(build(), x)
    assert vanilla["raw_value_norm_first"] == pytest.approx(vanilla["value_norm_first"], rel=1e-6)
    assert vanilla["raw_value_top_eigenvalue"] == pytest.approx(vanilla["top_eigenvalue"], rel=1e-6)
    assert vanilla["raw_value_top_eigenvalue_share"] == pytest.approx(vanilla["top_eigenvalue_share"], rel=1e-6)

    model = build(residual={"target": "v"})
    resformer = analyze_model(model, x)
    assert resformer["raw_value_top_eigenvalue"][0] == pytest.approx(resformer["top_eigenvalue"][0], rel=1e-6)
    assert resformer["raw_value_norm_others"][1:] != pytest.approx(resformer["value_norm_others"][1:], rel=1e-3)
    hidden = {}

    class Hidden(Trace):
        def on_hidden(self, layer, h):
            hidden[layer] = h

    with torch.no_grad():
        model(x, trace=Hidden())
        block = model.blocks[2]
        own = block.attn.wv(block.attn_norm(hidden[1]))  # V_3 = W_V x, before mixing with V_1
    assert resformer["raw_value_norm_first"][2] == pytest.approx(own[:, 0].norm(dim=-1).mean().item(), rel=1e-5)

    svformer = analyze_model(build(share={"svformer": True}), x)
    assert svformer["raw_value_top_eigenvalue"][0] is not None
    assert svformer["raw_value_top_eigenvalue"][1:] == [None] * 3  # layers without W_V
    assert svformer["raw_value_top_eigenvalue_share"][1:] == [None] * 3


def _naive_spectrum(features):
    """Eq. 12 by hand for [B, T, D] features: per sequence (1/l) sum_t v_t v_t^T, eigenvalues descending,
    then averaged over the sequences."""
    spectra = []
    for sequence in features.double():
        second_moment = sum(torch.outer(v, v) for v in sequence) / len(sequence)
        spectra.append(np.sort(np.linalg.eigvalsh(second_moment.numpy()))[::-1])
    return np.mean(spectra, axis=0)


@pytest.mark.parametrize("variant", [{}, dict(residual={"target": "v"})], ids=["vanilla", "resformer"])
def test_value_spectrum_is_eq12_of_the_values_attended_with(variant):
    model, x = build(n_kv_head=2, **variant), tokens(batch=4, length=10)
    own = ModelAttention()
    with torch.no_grad():
        model(x, trace=own)
    result = analyze_model(model, x, batch_size=3, spectrum_layer=3)  # batches of 3 + 1 sequences
    for layer in range(4):
        values = own.qkv[layer][2]  # [B, Hkv, T, d]
        features = values.permute(0, 2, 1, 3).reshape(4, 10, -1)
        expected = _naive_spectrum(features)
        assert result["top_eigenvalue"][layer] == pytest.approx(expected[0], rel=1e-6)
        # the scale-free share: the leading eigenvalue over the trace, the same for values scaled by any factor
        assert result["top_eigenvalue_share"][layer] == pytest.approx(expected[0] / expected.sum(), rel=1e-6)
        assert 1 / len(expected) <= result["top_eigenvalue_share"][layer] <= 1
        if layer == 2:
            assert result["value_spectrum"] == pytest.approx(expected.tolist(), rel=1e-6, abs=1e-9)


def _naive_fig4_cosines(q, k_n, v_n, k_m, v_m):
    """Fig. 4 by hand for one layer: per query row, Eq. 2 as a softmax over the concatenated allowed keys of
    layers n and m, Eq. 4 = 1/2 A_n (V_n + V_m), Eq. 6 = A_n V_n + V_m; cosines per token (heads
    concatenated), averaged over tokens."""
    b, h, t, d = q.shape
    groups = h // k_n.shape[1]
    k_n, v_n, k_m, v_m = (x.repeat_interleave(groups, dim=1) for x in (k_n, v_n, k_m, v_m))
    cos = {"eq4": [], "eq6": []}
    for bi in range(b):
        for ti in range(t):
            rows = {"eq2": [], "eq4": [], "eq6": []}
            for hi in range(h):
                own = torch.softmax(k_n[bi, hi, : ti + 1] @ q[bi, hi, ti] / math.sqrt(d), dim=0)
                keys = torch.cat([k_n[bi, hi, : ti + 1], k_m[bi, hi, : ti + 1]])
                both = torch.softmax(keys @ q[bi, hi, ti] / math.sqrt(d), dim=0)
                rows["eq2"].append(both @ torch.cat([v_n[bi, hi, : ti + 1], v_m[bi, hi, : ti + 1]]))
                rows["eq4"].append(0.5 * own @ (v_n[bi, hi, : ti + 1] + v_m[bi, hi, : ti + 1]))
                rows["eq6"].append(own @ v_n[bi, hi, : ti + 1] + v_m[bi, hi, ti])
            eq2 = torch.cat(rows["eq2"]).double()
            for eq in cos:
                cos[eq].append(F.cosine_similarity(eq2, torch.cat(rows[eq]).double(), dim=0).item())
    return {eq: float(np.mean(values)) for eq, values in cos.items()}


def test_fig4_against_previous_and_first_layer_matches_naive_cross_layer_attention():
    model, x = build(n_kv_head=2), tokens(batch=2, length=7)
    own = ModelAttention()
    with torch.no_grad():
        model(x, trace=own)
    result = analyze_model(model, x)
    assert result["fig4_cos_eq4"][0] is None and result["fig4_first_cos_eq6"][0] is None
    for layer in range(1, 4):
        q, k_n, v_n = own.qkv[layer]
        for prefix, m in (("fig4_cos", layer - 1), ("fig4_first_cos", 0)):
            _, k_m, v_m = own.qkv[m]
            naive = _naive_fig4_cosines(q, k_n, v_n, k_m, v_m)
            for eq in ("eq4", "eq6"):
                assert result[f"{prefix}_{eq}"][layer] == pytest.approx(naive[eq], abs=1e-5), (prefix, eq, layer)
    # m = n-1 and m = 1 coincide at layer 2 and differ above it.
    assert result["fig4_cos_eq4"][1] == pytest.approx(result["fig4_first_cos_eq4"][1])
    assert result["fig4_cos_eq6"][3] != pytest.approx(result["fig4_first_cos_eq6"][3], abs=1e-4)


def test_batching_does_not_change_results():
    model, x = build(), tokens(batch=4, length=16)
    one, all_at_once = analyze_model(model, x, batch_size=1), analyze_model(model, x, batch_size=4)
    for key in ["entropy", "similarity", "top_eigenvalue", "value_norm_others"]:
        assert one[key] == pytest.approx(all_at_once[key], rel=1e-5, abs=1e-7)
    for key in ("fig4_cos_eq6", "fig4_first_cos_eq4"):
        assert one[key][1:] == pytest.approx(all_at_once[key][1:], rel=1e-5)


def test_bad_inputs_fail_before_compute():
    model = build()
    with pytest.raises(ValueError, match="integer tensor"):
        analyze_model(model, torch.rand(2, 8))
    with pytest.raises(ValueError, match="max_seq_len=64"):
        analyze_model(model, tokens(length=65))
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 97\)"):
        analyze_model(model, tokens(vocab=200))
    with pytest.raises(ValueError, match="top_i=30"):
        analyze_model(model, tokens(length=8), top_i=30)
    with pytest.raises(ValueError, match="spectrum_layer=5"):
        analyze_model(model, tokens(), spectrum_layer=5)
    with pytest.raises(ValueError, match="models"):
        analyze({}, tokens(), "unused")
    with pytest.raises(ValueError, match="expected a lit-resformer Transformer"):
        analyze({"x": torch.nn.Linear(2, 2)}, tokens(), "unused")


def test_hf_causal_lm_matches_our_analysis_of_the_same_weights(tmp_path):
    model = build(n_kv_head=2)
    to_hf_llama(model).save_pretrained(tmp_path / "hf")
    hf = load_hf_causal_lm(tmp_path / "hf")
    x = tokens(batch=2, length=16)
    ours, theirs = analyze_model(model, x), analyze_hf_model(hf, x, batch_size=2)
    assert theirs["kind"] == "hf" and "value_norm_first" not in theirs and "fig4_cos_eq4" not in theirs
    assert theirs["entropy"] == pytest.approx(ours["entropy"], abs=1e-6)
    assert torch.allclose(torch.tensor(theirs["top_i_importance"]), torch.tensor(ours["top_i_importance"]), atol=1e-6)
    # Hugging Face reports the last layer after the final norm; every earlier layer is the residual stream.
    assert theirs["similarity"][:-1] == pytest.approx(ours["similarity"][:-1], abs=1e-6)
    assert theirs["hidden_norm_first"][:-1] == pytest.approx(ours["hidden_norm_first"][:-1], rel=1e-5)
    hf.config._attn_implementation = "sdpa"
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        analyze_hf_model(hf, x)


# ---------------------------------------------------------------------------- checkpoints and validation data
def _data_hparams(tiny_datamodule):
    datamodule = tiny_datamodule(seq_len=16)
    datamodule.prepare_data()
    return dict(datamodule.hparams), datamodule


def test_sample_validation_batches_come_from_the_validation_split(tiny_datamodule):
    hparams, datamodule = _data_hparams(tiny_datamodule)
    batches = sample_validation_batches(hparams, 6, seed=3)
    assert batches.shape == (6, 16) and batches.dtype == torch.int64
    reference = LMDataModuleRows(hparams)
    assert all(any(torch.equal(row, r) for r in reference) for row in batches)
    assert torch.equal(batches, sample_validation_batches(hparams, 6, seed=3))  # seeded
    with pytest.raises(ValueError, match="num_seqs=100000"):
        sample_validation_batches(hparams, 100_000)
    with pytest.raises(ValueError, match="another tokenizer"):
        sample_validation_batches(hparams, 2, expected_tokenizer_json="{}")


def LMDataModuleRows(hparams):  # noqa: N802 (reads like the type it lists)
    from lit_resformer.data import LMDataModule

    datamodule = LMDataModule(**{**hparams, "val_sequences_per_domain": None})
    return [row["input_ids"] for loader in datamodule.val_dataloader() for row in loader.dataset]


def _fit_tiny_run(tmp_path, corpus, cache, residual) -> Path:
    """Two training steps of a 2-layer model through the real CLI: a run directory with a checkpoint."""
    from lit_resformer.cli import main

    config = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": 1, "max_steps": 2, "val_check_interval": 2,
                    "check_val_every_n_epoch": None, "num_sanity_val_steps": 0, "enable_progress_bar": False,
                    "enable_model_summary": False},
        "model": {"config": {"n_layer": 2, "n_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64,
                             "residual": residual}, "lr": 3e-3, "warmup_steps": 1},
        "data": {"source": "local", "path": str(corpus), "bpe_vocab_size": 300, "seq_len": 16, "micro_batch_size": 4,
                 "holdout_fraction": 0.05, "cache_dir": str(cache)},
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    run = tmp_path / "resformer_seed0"
    main(["fit", "--config", str(path), "--trainer.default_root_dir", str(run)])
    return run


@pytest.mark.integration
def test_analyze_run_dir_on_a_trained_checkpoint(tmp_path, tiny_corpus, data_cache):
    run = _fit_tiny_run(tmp_path, tiny_corpus, data_cache, {"target": "v", "learnable": "scalar"})
    out = analyze_run_dir(run, num_seqs=3)
    assert out == run / "analysis" / "analysis.json"
    report = json.loads(out.read_text())
    result = report["models"]["resformer_seed0"]
    assert result["source"] == str(run / "checkpoints" / "last.ckpt")
    assert result["config"]["residual"]["learnable"] == "scalar"
    assert (report["num_seqs"], report["seq_len"], result["n_layer"]) == (3, 16, 2)

    both = analyze_checkpoints([run / "checkpoints" / "last.ckpt"] * 2, num_seqs=2, seq_len=8, out_dir=tmp_path / "two")
    assert list(both["models"]) == ["resformer_seed0", "resformer_seed0/last"]
    assert both["models"]["resformer_seed0"]["entropy"] == both["models"]["resformer_seed0/last"]["entropy"]
    with pytest.raises(ValueError, match="out_dir"):
        analyze_checkpoints([run / "checkpoints" / "last.ckpt"] * 2)
    with pytest.raises(ValueError, match="no checkpoints/last.ckpt"):
        analyze_run_dir(tmp_path)

    markdown, pngs = analysis_section({"resformer": [run]}, out_dir=tmp_path / "report")
    assert "| resformer | 1 |" in markdown and "mixing_resformer.png" in markdown  # logged mix/layer2/{self,history}
    assert len(pngs) == 3


@pytest.mark.slow
def test_hf_folder_alone_reads_the_embedded_corpus_with_its_own_tokenizer(tmp_path, tiny_datamodule, data_cache,
                                                                          monkeypatch):
    """Tokenizes the embedded corpus (a few MB) with the folder's tokenizer: tens of seconds."""
    monkeypatch.setenv("LIT_RESFORMER_CACHE", str(data_cache))
    _, datamodule = _data_hparams(tiny_datamodule)
    folder = tmp_path / "hf"
    to_hf_llama(build(vocab_size=datamodule.vocab_size, n_layer=2)).save_pretrained(folder)
    datamodule.tokenizer.save(str(folder / "tokenizer.json"))
    report = analyze_checkpoints([folder], num_seqs=3, seq_len=16, out_dir=tmp_path / "out")
    result = report["models"]["hf"]
    assert result["kind"] == "hf" and result["source"] == str(folder) and result["num_seqs"] == 3
    assert len(result["entropy"]) == 2 and "value_norm_first" not in result
