"""Model core: the base model against transformers' Llama, and every variant proved by equivalences."""

from __future__ import annotations

import inspect
import math
import re
import warnings
from pathlib import Path
from typing import get_args

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention

from lit_resformer.model import ModelConfig, Trace, Transformer, kv_cache_bytes, transformer
from lit_resformer.model.config import MIXING_FIELDS, PRESETS, Learnable
from lit_resformer.model.hf import from_hf_llama, to_hf_llama
from lit_resformer.model.kernels import attention, blocked_causal_block_mask, flash_available
from lit_resformer.model.transformer import MIX_MODULES, RESIDUAL_MIXES, _Stash
from tests.helpers.models import (
    DECODE_VARIANTS,
    LEARNABLE_CHOICES,
    SMALL,
    argmax_without_cache,
    build,
    small,
    tokens,
)


def same_weights(target: Transformer, source: Transformer) -> Transformer:
    """Copy every parameter the two models share (variants add or drop a few of their own)."""
    ours = target.state_dict()
    shared = {k: v for k, v in source.state_dict().items() if k in ours}
    assert len(shared) >= len(ours) - 2 * target.config.n_layer  # only variant-specific tensors differ
    target.load_state_dict(shared, strict=False)
    return target


# ---------------------------------------------------------------------------- the anchor: HF Llama
@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_vanilla_equals_hf_llama(n_kv_head):
    model = build(small(n_kv_head=n_kv_head))
    hf = to_hf_llama(model)
    x = tokens(length=40)
    with torch.no_grad():
        ours, theirs = model(x), hf(x).logits
    assert (ours - theirs).abs().max().item() <= 1e-5
    back = from_hf_llama(hf)
    with torch.no_grad():
        assert (back(x) - theirs).abs().max().item() <= 1e-5


def test_hf_export_refuses_variants():
    with pytest.raises(ValueError, match=r"residual.target"):
        to_hf_llama(build(small(residual={"target": "v"})))
    with pytest.raises(ValueError, match=r"share.svformer"):
        to_hf_llama(build(small(share={"svformer": True})))


# ---------------------------------------------------------------------------- equivalences to vanilla
VANILLA_EQUIVALENTS = {
    "value residual with lam=0, self_weight=1": dict(residual={"target": "v", "self_weight": 1.0, "lam": 0.0}),
    "query residual with lam=0, self_weight=1": dict(residual={"target": "q", "self_weight": 1.0, "lam": 0.0}),
    "NeuTRENO mu=0": dict(neutreno_lambda=0.0),
    "identity-initialised DenseFormer": dict(dwa={"enabled": True}),
    "DenseFormer dilation 2 period 2": dict(dwa={"enabled": True, "dilation": 2, "period": 2}),
    "share every 1 (CLA with groups of one)": dict(share={"every": 1, "what": "kv"}),
    "explicit attention kernel": dict(attn_impl="explicit"),
}


@pytest.mark.parametrize("name", list(VANILLA_EQUIVALENTS))
def test_equivalent_to_vanilla(name):
    vanilla = build(small())
    variant = same_weights(build(small(**VANILLA_EQUIVALENTS[name]), seed=5), vanilla)
    x = tokens()
    with torch.no_grad():
        assert (variant(x) - vanilla(x)).abs().max().item() <= 1e-5


def test_variants_do_change_the_output():
    """Guard against equivalence tests passing because a variant is silently ignored."""
    vanilla = build(small())
    x = tokens()
    for overrides in (dict(residual={"target": "v"}), dict(neutreno_lambda=0.4), dict(share={"svformer": True}),
                      dict(residual={"target": "v", "mapping": "cross_attention"}), dict(share={"every": 2})):
        variant = same_weights(build(small(**overrides), seed=5), vanilla)
        with torch.no_grad():
            assert (variant(x) - vanilla(x)).abs().max().item() > 1e-3, overrides


def test_first_v_equals_svformer():
    sv = build(small(share={"svformer": True}))
    first_v = same_weights(build(small(share={"first": "v"}), seed=3), sv)
    x = tokens()
    with torch.no_grad():
        assert torch.equal(first_v(x), sv(x))


class _Capture(Trace):
    want_attention = True

    def __init__(self):
        self.v, self.k, self.q, self.hidden, self.probs = {}, {}, {}, {}, {}

    def on_qkv(self, layer, q, k, v):
        self.q[layer], self.k[layer], self.v[layer] = q, k, v

    def on_attention(self, layer, probs):
        self.probs[layer] = probs

    def on_hidden(self, layer, hidden):
        self.hidden[layer] = hidden


def _value_projection(model, layer, capture):
    block = model.blocks[layer]
    x = block.attn_norm(capture.hidden[layer - 1])
    b, t, _ = x.shape
    return block.attn.wv(x).view(b, t, model.config.n_kv_head, -1).transpose(1, 2)


def test_resformer_mixes_half_of_first_layer_values():
    """Eq. 7: V'_n = 1/2 (V_n + V_1) is what layer n attends with."""
    model = build(small(residual={"target": "v"}))
    cap = _Capture()
    with torch.no_grad():
        model(tokens(), trace=cap)
        v1 = _value_projection(model, 0, cap)
        for n in range(1, 6):
            expected = 0.5 * (_value_projection(model, n, cap) + v1)
            assert torch.allclose(cap.v[n], expected, atol=1e-6)


def test_uniform_weights_average_all_earlier_values():
    """Eq. 5: with source=all and depth weights, V'_n is the mean of V_1..V_n."""
    model = build(small(residual={"target": "v", "source": "all", "self_weight": "uniform", "lam": "uniform"}))
    cap = _Capture()
    with torch.no_grad():
        model(tokens(), trace=cap)
        raw = [_value_projection(model, i, cap) for i in range(6)]
        for n in range(1, 6):
            assert torch.allclose(cap.v[n], torch.stack(raw[: n + 1]).mean(0), atol=1e-6)


def test_svformer_layers_attend_with_first_layer_values_and_anchors_refresh():
    model = build(small(share={"svformer": True, "anchors": [4]}))
    cap = _Capture()
    with torch.no_grad():
        model(tokens(), trace=cap)
    assert all(cap.v[n] is cap.v[0] for n in (1, 2))
    assert all(cap.v[n] is cap.v[3] for n in (4, 5)) and cap.v[3] is not cap.v[0]
    assert model.blocks[1].attn.wv is None and model.blocks[3].attn.wv is not None


def test_neutreno_adds_value_difference():
    """U_n + mu (V_1 - V_n): compare with the same model and mu=0 plus the explicit term."""
    plain, neu = build(small(attn_impl="explicit")), build(small(neutreno_lambda=0.4, attn_impl="explicit"))
    neu.load_state_dict(plain.state_dict())
    x = tokens()
    cap_neu = _Capture()
    with torch.no_grad():
        neu(x, trace=cap_neu)
        # Recompute layer 2's attention output with and without the NeuTRENO term from captured inputs.
        v = cap_neu.v[1]
        u = cap_neu.probs[1] @ v
        u_neu = u + 0.4 * (cap_neu.v[0] - v)
        block = neu.blocks[1]
        h = cap_neu.hidden[0]
        b, t, d = h.shape
        expected = h + block.attn.wo(u_neu.transpose(1, 2).reshape(b, t, d))
        expected = expected + block.mlp(block.mlp_norm(expected))
        assert torch.allclose(cap_neu.hidden[1], expected, atol=1e-5)
        assert not torch.allclose(u, u_neu)


def _causal_softmax(q, k):
    """A_n written out: softmax(Q K^T / sqrt d) under the causal mask, KV heads repeated for GQA."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    t = q.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf")).softmax(-1)


def _block_output_from_attention(model, layer, hidden_in, u):
    """Block `layer`'s output given its attention output U [B, H, T, d] (before W_O)."""
    block = model.blocks[layer]
    b, t, d = hidden_in.shape
    h = hidden_in + block.attn.wo(u.transpose(1, 2).reshape(b, t, d))
    return h + block.mlp(block.mlp_norm(h))


@pytest.mark.parametrize("n_kv_head", [4, 2])
def test_identity_mapping_is_eq6(n_kv_head):
    """Eq. 6: U_n = A_n V_n + 1/(n-1) sum_{i<n} V_i, checked at every depth from captured projections."""
    model = build(small(n_kv_head=n_kv_head, residual={"target": "v", "mapping": "identity", "source": "all",
                                                       "self_weight": 1.0, "lam": 1.0}))
    cap = _Capture()
    with torch.no_grad():
        model(tokens(), trace=cap)
        raw = [_value_projection(model, i, cap) for i in range(6)]
        for n in range(2, 7):  # 1-based depth
            i = n - 1
            earlier = sum(raw[:i]) / (n - 1)
            u = _causal_softmax(cap.q[i], cap.k[i]) @ raw[i].repeat_interleave(4 // n_kv_head, dim=1)
            u = u + earlier.repeat_interleave(4 // n_kv_head, dim=1)
            expected = _block_output_from_attention(model, i, cap.hidden[i - 1], u)
            assert torch.allclose(cap.hidden[i], expected, atol=1e-5), n


def test_tied_mixing_is_one_lambda_per_layer():
    """`tied`: V'_n = (1 - λ_n) V_n + λ_n V_1 with one trained λ per layer (modded-nanogpt), starting at 1/2."""
    model = build(small(residual={"target": "v", "learnable": "tied"}))
    lams = [block.attn.mix.lam for block in model.blocks[1:]]
    assert [p.shape for p in lams] == [torch.Size([])] * 5 and all(p.item() == 0.5 for p in lams)
    with torch.no_grad():
        for n, p in enumerate(lams, start=2):
            p.fill_(0.1 * n)
    cap = _Capture()
    with torch.no_grad():
        model(tokens(), trace=cap)
        v1 = _value_projection(model, 0, cap)
        for i in range(1, 6):
            lam = 0.1 * (i + 1)
            assert torch.allclose(cap.v[i], (1 - lam) * _value_projection(model, i, cap) + lam * v1, atol=1e-6)
    vanilla = same_weights(build(small(), seed=7), model)
    with torch.no_grad():
        for p in lams:
            p.zero_()  # λ = 0 is the vanilla model
        assert (model(tokens()) - vanilla(tokens())).abs().max().item() <= 1e-5


def _denseformer_reference(model, idx, alphas, dilation, period):
    """A transcription of epfml/DenseFormer's `DWAModules` forward around our blocks: block outputs go into
    `dilation` accumulators (output k into accumulator k % dilation, B_0 = embeddings), and after block i with
    (i+1) % period == 0 the next input is the alpha-weighted sum of that accumulator's *stored* outputs."""
    x = model.tok_emb(idx)
    accumulators = [[] for _ in range(dilation)]
    accumulators[0].append(x)
    stash = _Stash.empty(model.config.n_layer)
    for i, block in enumerate(model.blocks):
        x = block(x, model.rope, stash, None, None)
        accumulators[(i + 1) % dilation].append(x)
        if (i + 1) % period == 0:
            x = torch.tensordot(alphas[i], torch.stack(accumulators[(i + 1) % dilation]), dims=1)
    return model.lm_head(model.norm(x))[..., : model.config.vocab_size]  # the padded head rows are never logits


@pytest.mark.integration
@pytest.mark.parametrize("dilation,period", [(1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (2, 3)])
def test_denseformer_matches_reference_on_random_alphas(dilation, period):
    model = build(small(dwa={"enabled": True, "dilation": dilation, "period": period}))
    n_layer = model.config.n_layer
    generator = torch.Generator().manual_seed(dilation * 10 + period)
    alphas = {}
    with torch.no_grad():
        for i in range(n_layer):
            if (i + 1) % period == 0:
                dwa = model.dwa[str(i + 1)]
                assert dwa.alpha.shape == ((i + 1 + dilation) // dilation,)  # the reference's weight count
                assert dwa.alpha[-1].item() == 1.0 and dwa.alpha[:-1].abs().sum().item() == 0.0  # identity init
                dwa.alpha.copy_(torch.randn(dwa.alpha.shape, generator=generator))
                alphas[i] = dwa.alpha
        assert set(model.dwa) == {str(i + 1) for i in alphas}
        x = tokens(length=14)
        ours = model(x)
        reference = _denseformer_reference(model, x, alphas, dilation, period)
        assert (ours - reference).abs().max().item() <= 1e-4
        cache = model.new_cache(batch=2, max_seq=14)
        steps = [model(x[:, :5], cache=cache)] + [model(x[:, t:t + 1], cache=cache) for t in range(5, 14)]
        assert (torch.cat(steps, 1) - ours).abs().max().item() <= 1e-4


def test_denseformer_averages_raw_outputs_not_earlier_averages():
    """Three blocks, alpha_2 reads B_0..B_2: if X_1 had overwritten B_1 the result would differ."""
    model = build(small(n_layer=3, dwa={"enabled": True}))
    hidden = {}

    class Raw(Trace):
        def on_hidden(self, layer, h):
            hidden[layer] = h

    with torch.no_grad():
        model.dwa["1"].alpha.copy_(torch.tensor([0.7, 0.3]))
        model.dwa["2"].alpha.copy_(torch.tensor([0.2, 0.5, 0.3]))
        model(tokens(), trace=Raw())
        stash = _Stash.empty(3)
        b0 = model.tok_emb(tokens())
        b1 = model.blocks[0](b0, model.rope, stash, None, None)
        x1 = 0.7 * b0 + 0.3 * b1
        b2 = model.blocks[1](x1, model.rope, stash, None, None)
        assert torch.allclose(hidden[0], x1, atol=1e-6)
        assert torch.allclose(hidden[1], 0.2 * b0 + 0.5 * b1 + 0.3 * b2, atol=1e-6)


def test_num_anchors_are_evenly_spaced_on_every_preset():
    """Anchor j at layer 1 + floor(j L / k): the k groups sharing one value differ in size by at most one."""
    for size in PRESETS:
        n_layer = ModelConfig.preset(size).n_layer
        for k in range(1, n_layer + 1):
            anchors = ModelConfig.preset(size, share={"svformer": True, "num_anchors": k}).value_anchors()
            assert [a + 1 for a in anchors] == [1 + math.floor(j * n_layer / k) for j in range(k)], (size, k)
            groups = [b - a for a, b in zip(anchors, [*anchors[1:], n_layer], strict=True)]
            assert len(groups) == k and max(groups) - min(groups) <= 1, (size, k, groups)
    assert ModelConfig.preset("tiny", share={"svformer": True, "num_anchors": 4}).value_anchors() == [0, 1, 3, 4]
    assert ModelConfig.preset("82M", share={"svformer": True, "num_anchors": 4}).value_anchors() == [0, 2, 4, 6]


# ---------------------------------------------------------------------------- cross-layer attention
def _naive_cross_attention(q, k_self, v_self, k_other, v_other):
    """Per query row, softmax over the allowed keys of both layers (Eq. 2), written as loops."""
    b, h, t, d = q.shape
    out = torch.zeros_like(q)
    for bi in range(b):
        for hi in range(h):
            for ti in range(t):
                keys = torch.cat([k_self[bi, hi, : ti + 1], k_other[bi, hi, : ti + 1]])
                vals = torch.cat([v_self[bi, hi, : ti + 1], v_other[bi, hi, : ti + 1]])
                w = torch.softmax(keys @ q[bi, hi, ti] / math.sqrt(d), dim=0)
                out[bi, hi, ti] = w @ vals
    return out


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_cross_attention_kernel_matches_naive_reference():
    q, k1, v1, k2, v2 = (_rand(2, 3, 7, 8, seed=s) for s in range(5))
    fast = attention(q, torch.cat([k1, k2], 2), torch.cat([v1, v2], 2), offset=0, key_blocks=2)
    assert torch.allclose(fast, _naive_cross_attention(q, k1, v1, k2, v2), atol=1e-5)


@pytest.mark.parametrize("t,key_blocks,n_kv_head", [(7, 2, 3), (130, 2, 1), (200, 3, 3)])
def test_flex_block_mask_is_the_blocked_causal_mask(t, key_blocks, n_kv_head):
    """The FlexAttention path compiled CUDA training takes for Eq. 2 (CPU: forward only, unfused) computes what
    the loops compute; 130 and 200 rows cross a 128-row tile, 3 blocks are Eq. 2 with two source layers."""
    q = _rand(1, 3, t, 8, seed=20)
    k, v = _rand(1, n_kv_head, key_blocks * t, 8, seed=21), _rand(1, n_kv_head, key_blocks * t, 8, seed=22)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
        flex = flex_attention(q, k, v, block_mask=blocked_causal_block_mask(t, key_blocks, q.device),
                              enable_gqa=n_kv_head != 3)
    k, v = k.repeat_interleave(3 // n_kv_head, 1), v.repeat_interleave(3 // n_kv_head, 1)
    assert torch.allclose(flex, attention(q, k, v, offset=0, key_blocks=key_blocks), atol=1e-5)
    if key_blocks == 2 and t < 10:
        assert torch.allclose(flex, _naive_cross_attention(q, k[:, :, :t], v[:, :, :t], k[:, :, t:], v[:, :, t:]),
                              atol=1e-5)


def test_block_identity_eq3_and_eq4():
    """Eq. 3: the concatenated softmax is Lambda A_self V_n + (1 - Lambda) A_cross V_1 with row weights Lambda;
    Eq. 4: when K_1 = K_n the blocks coincide and Lambda = 1/2, i.e. 1/2 A_n (V_n + V_1)."""
    q, kn, vn, k1, v1 = (_rand(2, 3, 9, 8, seed=s) for s in range(10, 15))
    mask = torch.ones(9, 9).tril().bool()
    scale = 1 / math.sqrt(8)
    s_self = (q @ kn.transpose(-2, -1) * scale).masked_fill(~mask, float("-inf"))
    s_cross = (q @ k1.transpose(-2, -1) * scale).masked_fill(~mask, float("-inf"))
    z_self, z_cross = s_self.exp().sum(-1, keepdim=True), s_cross.exp().sum(-1, keepdim=True)
    lam = z_self / (z_self + z_cross)
    eq3 = lam * (s_self.softmax(-1) @ vn) + (1 - lam) * (s_cross.softmax(-1) @ v1)
    eq2 = attention(q, torch.cat([kn, k1], 2), torch.cat([vn, v1], 2), offset=0, key_blocks=2)
    assert torch.allclose(eq2, eq3, atol=1e-5)
    eq2_same_keys = attention(q, torch.cat([kn, kn], 2), torch.cat([vn, v1], 2), offset=0, key_blocks=2)
    eq4 = 0.5 * attention(q, kn, vn + v1, offset=0)
    assert torch.allclose(eq2_same_keys, eq4, atol=1e-5)


def test_cross_attention_model_layer_matches_naive():
    model = build(small(residual={"target": "v", "mapping": "cross_attention"}, n_kv_head=4))
    cap = _Capture()
    with torch.no_grad():
        model(tokens(batch=1, length=6), trace=cap)
    # Layer 3 (index 2) attends over its own keys and layer 1's keys.
    q, k, v = cap.q[2], cap.k[2], cap.v[2]
    t = q.shape[2]
    naive = _naive_cross_attention(q, k[:, :, :t], v[:, :, :t], k[:, :, t:], v[:, :, t:])
    assert torch.allclose(cap.probs[2] @ v, naive, atol=1e-5)
    assert torch.equal(k[:, :, t:], cap.k[0]) and torch.equal(v[:, :, t:], cap.v[0])


# ---------------------------------------------------------------------------- decoding and the KV cache


@pytest.mark.integration
@pytest.mark.parametrize("name", list(DECODE_VARIANTS))
def test_incremental_decode_matches_full_forward(name):
    config = small(**DECODE_VARIANTS[name])
    model = build(config)
    x = tokens(length=14)
    with torch.no_grad():
        full = model(x)
        cache = model.new_cache(batch=2, max_seq=14)
        # a prefill of 5 tokens, then one token at a time
        steps = [model(x[:, :5], cache=cache)] + [model(x[:, t:t + 1], cache=cache) for t in range(5, 14)]
    assert (torch.cat(steps, 1) - full).abs().max().item() <= 1e-5
    assert cache.held_bytes() == kv_cache_bytes(config, batch=2, seq=14)


@pytest.mark.parametrize("name", ["resformer", "cross-attention", "svformer-anchors", "neutreno+gqa"])
def test_explicit_kernel_equals_sdpa(name):
    sdpa = build(small(**DECODE_VARIANTS[name]))
    explicit = same_weights(build(small(**DECODE_VARIANTS[name], attn_impl="explicit")), sdpa)
    x = tokens()
    with torch.no_grad():
        assert (sdpa(x) - explicit(x)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name,kernel", [("resformer+gqa", "sdpa"), ("cross-attention", "sdpa"),
                                         ("svformer-anchors", "sdpa"), ("neutreno+gqa", "explicit"),
                                         ("cla3+gqa", "sdpa")])
def test_left_padded_rows_compute_what_each_row_computes_alone(name, kernel):
    """`padding` (transformers' attention_mask) through a prefill and cached steps: each row's real tokens get the
    logits the row gets alone, its RoPE positions counting real tokens only and no real token attending to padding."""
    model = build(small(**DECODE_VARIANTS[name], attn_impl=kernel))
    x = tokens(length=12)
    padding = torch.ones_like(x)
    padding[1, :5] = 0  # row 1 is x[1, 5:] behind 5 pad tokens
    with torch.no_grad():
        cache = model.new_cache(batch=2, max_seq=12)
        steps = [model(x[:, :9], cache=cache, padding=padding[:, :9])]
        steps += [model(x[:, t:t + 1], cache=cache, padding=padding[:, :t + 1]) for t in range(9, 12)]
        padded = torch.cat(steps, 1)
        assert (padded[0] - model(x[:1])[0]).abs().max().item() <= 1e-5
        assert (padded[1, 5:] - model(x[1:, 5:])[0]).abs().max().item() <= 1e-5


def test_kv_cache_grows_keeping_what_it_holds_and_reorders_its_rows():
    """What generation through transformers asks of the cache: room for more positions, then beams reordered."""
    config = small(**DECODE_VARIANTS["svformer-anchors"])
    model = build(config)
    x = tokens(batch=3, length=10)
    with torch.no_grad():
        full = model(x)
        cache = model.new_cache(batch=3, max_seq=4)
        first = model(x[:, :4], cache=cache)
        cache.reserve(10)
        assert cache.max_seq == 10 and cache.held_bytes() == kv_cache_bytes(config, batch=3, seq=10)
        rows = torch.tensor([2, 0, 0])
        cache.reindex(rows)
        rest = model(x[rows, 4:], cache=cache)
    assert (torch.cat([first[rows], rest], 1) - full[rows]).abs().max().item() <= 1e-5
    with pytest.raises(ValueError, match="cache length 65 exceeds max_seq_len=64"):
        cache.reserve(65)


def test_kv_cache_sizes():
    n_layer = 8
    cfg = dict(SMALL, n_layer=n_layer)
    vanilla = kv_cache_bytes(ModelConfig(**cfg), batch=3, seq=100)
    assert vanilla == 2 * n_layer * 3 * 100 * 64 * 4
    sv = kv_cache_bytes(ModelConfig(**cfg, share={"svformer": True}), batch=3, seq=100)
    assert sv * 2 * n_layer == vanilla * (n_layer + 1)  # exactly (L+1)/(2L)
    cla = kv_cache_bytes(ModelConfig(**cfg, share={"every": 2}), batch=3, seq=100)
    assert cla * 2 == vanilla
    gqa_sv = kv_cache_bytes(ModelConfig(**dict(cfg, n_kv_head=1), share={"svformer": True}), batch=3, seq=100)
    assert gqa_sv * 4 * 2 * n_layer == vanilla * (n_layer + 1)
    assert kv_cache_bytes(ModelConfig(**cfg), 1, 10, dtype=torch.bfloat16) * 2 == kv_cache_bytes(ModelConfig(**cfg), 1, 10)


def test_svformer_parameter_count():
    vanilla, sv = build(small(n_kv_head=2)), build(small(n_kv_head=2, share={"svformer": True}))
    c = vanilla.config
    assert vanilla.num_params() - sv.num_params() == (c.n_layer - 1) * c.d_model * c.kv_dim


def test_generate_greedy_matches_argmax_without_cache():
    model = build(small(residual={"target": "v"}, share={"every": 2, "what": "k"}))
    prompt = tokens(length=6)
    out = model.generate(prompt, max_new_tokens=8)
    assert torch.equal(out, argmax_without_cache(model, prompt, 8))


def test_generate_sampling_is_seeded_and_stops_at_eos():
    model = build(small())
    prompt = tokens(length=4)
    a = model.generate(prompt, 10, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(0))
    b = model.generate(prompt, 10, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (2, 14)
    first = model.generate(prompt, 1)[:, -1]
    stopped = model.generate(prompt[:1], 10, eos_id=int(first[0]))
    assert stopped.shape[1] == 5


def test_sequence_longer_than_max_seq_len_isrefused():
    model = build(small(max_seq_len=16))
    with pytest.raises(ValueError, match="max_seq_len"):
        model(tokens(length=17))


def test_flash_is_optional_on_cpu():
    assert not flash_available(torch.device("cpu"))
    model = build(small(attn_impl="flash"))  # falls back to SDPA off CUDA
    with torch.no_grad():
        assert torch.isfinite(model(tokens())).all()


# ---------------------------------------------------------------------------- learnable mixing
def test_every_learnable_kind_has_its_residual_mix():
    assert set(RESIDUAL_MIXES) == set(get_args(Learnable))


@pytest.mark.parametrize("learnable", [kind for kind in get_args(Learnable) if kind != "none"])
def test_learnable_mixing_weights_get_gradients_and_their_own_group(learnable):
    model = build(small(residual={"target": "v", "learnable": learnable}))
    mixing = model.mixing_parameters()
    assert len(mixing) >= 5  # one set per layer n >= 2
    loss = model(tokens()).logsumexp(-1).mean()
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in mixing)
    decay, no_decay, mix = model.param_groups(weight_decay=0.1, mix_lr=0.02)
    assert {id(p) for p in mix["params"]} == {id(p) for p in mixing}
    assert mix["weight_decay"] == 0.0 and mix["lr"] == 0.02
    assert not {id(p) for p in mixing} & {id(p) for p in decay["params"] + no_decay["params"]}
    assert "lr" not in model.param_groups(weight_decay=0.1)[2]  # default: the optimizer's base lr


@pytest.mark.parametrize("overrides", [*LEARNABLE_CHOICES.values(), *DECODE_VARIANTS.values()],
                         ids=[*LEARNABLE_CHOICES, *DECODE_VARIANTS])
def test_every_module_with_learnable_weights_logs_them_detached(overrides):
    """Each mixing or gating module (MIX_MODULES) and each DenseFormer average reports its own scalars, under its layer
    or block; those with parameters report at least one, those without none; nothing logged carries a graph. The
    config says whether the model has a mixing group (`has_mixing_weights`, which `mix_lr` is checked against)."""
    model = build(small(**overrides))
    expected = {}
    for n, block in enumerate(model.blocks, start=1):
        for module in (getattr(block.attn, name) for name in MIX_MODULES):
            if module is not None:
                reported = module.logged()
                assert bool(reported) == any(True for _ in module.parameters()), type(module).__name__
                expected.update({f"mix/layer{n}/{key}": value for key, value in reported.items()})
    for b, dwa in model.dwa.items():
        expected.update({f"dwa/block{b}/{key}": value for key, value in dwa.logged().items()})
    logged = model.mixing_weights()
    assert set(logged) == set(expected) and len(logged) >= len(model.dwa)
    assert all(value.ndim == 0 and not value.requires_grad for value in logged.values())
    assert model.config.has_mixing_weights() == (len(model.param_groups(weight_decay=0.1)) == 3)


def test_the_learnable_choices_build_every_module_that_logs_and_set_every_mixing_field():
    """LEARNABLE_CHOICES reaches every module class of the model that logs its weights, and every config field that
    gives a model mixing weights (MIXING_FIELDS): a new module or field without a case there fails here."""
    built = {type(module) for overrides in LEARNABLE_CHOICES.values() for module in build(small(**overrides)).modules()}
    logging = {cls for _, cls in inspect.getmembers(transformer, inspect.isclass)
               if issubclass(cls, torch.nn.Module) and hasattr(cls, "logged") and cls.__module__ == transformer.__name__}
    assert logging - {transformer.Attention, transformer.FixedMix} <= built  # a layer's collector; fixed weights
    configs = [small(**overrides) for overrides in LEARNABLE_CHOICES.values()]
    for field in MIXING_FIELDS:
        group, name = field.split(".")
        default = getattr(getattr(small(), group), name)
        assert any(getattr(getattr(config, group), name) != default for config in configs), field


def test_weight_decay_groups():
    model = build(small(dwa={"enabled": True}))
    groups = model.param_groups(weight_decay=0.1)
    assert len(groups) == 2  # no residual mixing weights, no third group
    decay, no_decay = groups
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = [names[id(p)] for p in decay["params"]]
    # DenseFormer's alphas are decayed as in epfml/DenseFormer; otherwise weight matrices only.
    assert all(n.endswith("weight") and p.ndim == 2 for n, p in model.named_parameters() if n in decayed
               and not n.startswith("dwa."))
    assert {n for n in names.values() if n.startswith("dwa.")} <= set(decayed)
    assert not any(n.startswith("tok_emb") for n in decayed)
    assert any("norm" in names[id(p)] for p in no_decay["params"])
    decay_emb = model.param_groups(weight_decay=0.1, decay_embeddings=True)[0]
    assert any(p is model.tok_emb.weight for p in decay_emb["params"])


def test_flops_and_params():
    model = build(small())
    c = model.config
    per_layer = 4 * c.d_model * c.d_model + 3 * c.d_model * c.ffn_dim + 2 * c.d_model
    assert model.num_params() == c.n_layer * per_layer + 2 * c.vocab_size * c.d_model + c.d_model
    cross = build(small(residual={"target": "v", "mapping": "cross_attention"}))
    assert cross.flops_per_token(32) > model.flops_per_token(32)


# ---------------------------------------------------------------------------- config validation
INVALID = [
    (dict(residual={"target": "x"}), r"residual.target.*\['none', 'v', 'q', 'k'\]"),
    (dict(residual={"target": "v", "source": "last"}), r"residual.source.*\['first', 'previous', 'all'\]"),
    (dict(residual={"target": "v", "mapping": "dense"}), r"residual.mapping.*attention"),
    (dict(residual={"target": "v", "learnable": "vector"}), r"residual.learnable.*scalar.*tied"),
    (dict(residual={"target": "v", "learnable": "tied", "lam": 0.3}), r"residual.learnable='tied'.*self_weight/lam"),
    (dict(residual={"target": "v", "lam": -1.0}), r"residual.lam"),
    (dict(residual={"target": "v", "self_weight": -0.5}), r"residual.self_weight"),
    (dict(residual={"target": "v", "self_weight": "uniform"}), r"must both be 'uniform'"),
    (dict(residual={"target": "v", "layers": [1, 2]}), r"residual.layers.*\[2, 6\]"),
    (dict(residual={"target": "v", "layers": [9]}), r"residual.layers"),
    (dict(residual={"lam": 2.0}), r"residual.lam is set but residual.target is 'none'"),
    (dict(residual={"target": "q", "mapping": "identity"}), r"residual.mapping.*values only"),
    (dict(residual={"target": "v", "mapping": "cross_attention", "learnable": "scalar"}), r"residual.learnable"),
    (dict(residual={"target": "v"}, share={"svformer": True}), r"residual.target='v'.*share.svformer"),
    (dict(residual={"target": "v", "mapping": "cross_attention"}, share={"every": 2, "what": "k"}),
     r"cross_attention"),
    (dict(residual={"target": "k"}, share={"first": "k"}), r"residual.target='k'"),
    (dict(n_head=4, n_kv_head=3), r"n_head=4 must be divisible by n_kv_head=3"),
    (dict(d_model=66), r"d_model=66 must be divisible by n_head"),
    (dict(share={"anchors": [3]}), r"share.anchors/share.num_anchors need share.svformer"),
    (dict(share={"svformer": True, "anchors": [3], "num_anchors": 2}), r"either share.anchors or share.num_anchors"),
    (dict(share={"svformer": True, "num_anchors": 9}), r"share.num_anchors"),
    (dict(share={"svformer": True, "every": 2, "what": "kv"}), r"share.what='kv'"),
    (dict(share={"svformer": True, "first": "v"}), r"share.first='v' is SVFormer"),
    (dict(share={"what": "qk"}), r"share.what.*\['k', 'v', 'kv'\]"),
    (dict(share={"first": "o"}), r"share.first.*\['none', 'q', 'k', 'v'\]"),
    (dict(share={"every": 0}), r"share.every"),
    (dict(share={"first": "k", "every": 2, "what": "kv"}), r"share.first='k' and share.every=2"),
    (dict(neutreno_lambda=-0.2), r"neutreno_lambda"),
    (dict(dwa={"enabled": True, "dilation": 0}), r"dwa.dilation"),
    (dict(dwa={"period": 2}), r"dwa.enabled is false"),
    (dict(attn_impl="triton"), r"attn_impl.*\['sdpa', 'flash', 'explicit'\]"),
    (dict(residual={"target": "v", "colour": 1}), r"residual.colour.*allowed fields"),
    (dict(vocab_size=0), r"vocab_size=0 must be a positive integer"),
    (dict(size="huge"), r"size='huge' is not a preset"),
]


@pytest.mark.parametrize("overrides,message", INVALID, ids=[m for _, m in INVALID])
def test_invalid_configs_are_refused_with_the_field_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        small(**overrides)


def test_presets_and_dotted_overrides():
    cfg = ModelConfig.preset("82M", **{"residual.target": "v", "share.svformer": False})
    assert (cfg.n_layer, cfg.n_head, cfg.d_model, cfg.ffn_dim, cfg.vocab_size) == (8, 8, 512, 1792, 50277)
    assert ModelConfig.preset("tiny").n_layer >= 6 and ModelConfig.preset("mini").n_layer >= 6
    assert ModelConfig.preset("2M").to_dict()["d_model"] == 16
    assert ModelConfig(**ModelConfig.preset("tiny", residual={"target": "v"}).to_dict()).residual.target == "v"
    assert cfg.replace(**{"residual.lam": 2.0}).residual.lam == 2.0
    assert ModelConfig.preset("tiny", share={"svformer": True, "num_anchors": 2}).value_anchors() == [0, 3]


def test_paper_equations_are_findable_in_the_code():
    source = "\n".join(p.read_text() for p in Path(__file__).parents[2].joinpath("lit_resformer", "model").glob("*.py"))
    for eq in (2, 3, 4, 5, 6, 7, 10):
        assert re.search(rf"Eq\. {eq}\b", source), f"Eq. {eq} is not referenced in lit_resformer/model"
