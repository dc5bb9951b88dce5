"""The field's newer answers to attention concentration, in the variant algebra: gated attention, exclusive
self-attention (XSA), SATFormer, dense value connections (MUDD) and SkipV1Former.

Each at its neutral setting equals vanilla (or ResFormer, where it composes with it); each decodes through the KV cache
to the full forward's logits and holds exactly the analytic cache bytes; each exports to a folder that plain
transformers loads (in a process where lit_resformer cannot be imported) and that computes and generates what the
project's model does; each new parameter learns; each bad combination is refused with the field named.
"""

from __future__ import annotations

import math

import pytest
import torch

from lit_resformer.export import export_model
from lit_resformer.model import ModelConfig, Trace, Transformer, kv_cache_bytes
from lit_resformer.model.hf import non_vanilla_fields, to_hf_llama
from lit_resformer.model.transformer import MIX_MODULES, ExclusiveSelfAttention
from tests.helpers.eval_data import byte_bpe_tokenizer
from tests.helpers.hf_remote import NEW_TOKENS, PROMPT_LEN, check_in_plain_transformers, reference_case
from tests.helpers.models import LEARNABLE_CHOICES, SMALL, argmax_without_cache, build, small, tokens

NEW_MODULES = MIX_MODULES  # the submodules the variants add: the residual's mix, value-embedding mix, gates, XSA, ...


def same_weights(target: Transformer, source: Transformer) -> Transformer:
    """Copy every parameter the two models share; only the variants' own tensors may be missing from the source, and
    only SkipV1Former's half-size W_V may differ in shape."""
    ours = target.state_dict()
    shared = {k: v for k, v in source.state_dict().items() if k in ours and v.shape == ours[k].shape}
    missing = set(ours) - set(shared)
    assert all(any(f".{m}." in name for m in NEW_MODULES) or name.endswith("attn.wv.weight") for name in missing)
    target.load_state_dict(shared, strict=False)
    return target


@torch.no_grad()
def moved_off_init(model: Transformer, scale: float = 0.3) -> Transformer:
    """Move every mixing weight and gate off its initial value, so a zero-initialised α, μ or W cannot hide a bug."""
    for p in model.mixing_parameters():
        p.add_(torch.randn_like(p) * scale)
    return model


def new_parameters(model: Transformer) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if any(f".{m}." in n for m in NEW_MODULES)}


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


class _Capture(Trace):
    def __init__(self):
        self.q, self.k, self.v, self.hidden = {}, {}, {}, {}

    def on_qkv(self, layer, q, k, v):
        self.q[layer], self.k[layer], self.v[layer] = q, k, v

    def on_hidden(self, layer, hidden):
        self.hidden[layer] = hidden


def _normed_input(model: Transformer, layer: int, cap: _Capture) -> torch.Tensor:
    return model.blocks[layer].attn_norm(cap.hidden[layer - 1])


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    b, t, _ = x.shape
    return x.view(b, t, heads, -1).transpose(1, 2)


# ---------------------------------------------------------------------------- neutral settings
@pytest.mark.parametrize("per", ["head", "element"])
@pytest.mark.parametrize("residual", [{}, {"target": "v"}], ids=["vanilla", "resformer"])
def test_gated_attention_with_a_zero_gate_and_doubled_output_projection_is_the_ungated_model(per, residual):
    """Neutral check chosen: W_θ = 0 gives σ(0) = 1/2 exactly, so Y' = Y/2; doubling W_O undoes it (both scalings
    are powers of two, exact in floating point). Gated ResFormer at that setting is ResFormer."""
    plain = build(small(residual=residual))
    gated = same_weights(build(small(residual=residual, attn_gate={"per": per}), seed=5), plain)
    with torch.no_grad():
        for block in gated.blocks:
            block.attn.out_gate.weight.zero_()
            block.attn.wo.weight.mul_(2.0)
        assert max_diff(gated(tokens()), plain(tokens())) <= 1e-6


@pytest.mark.parametrize("per", ["layer", "head", "token"])
@pytest.mark.parametrize("overrides", [{}, {"residual": {"target": "v"}}, {"share": {"svformer": True}, "n_kv_head": 2}],
                         ids=["vanilla", "resformer", "svformer-gqa"])
def test_xsa_starts_at_alpha_zero_which_is_the_model_without_it(per, overrides):
    plain = build(small(**overrides))
    xsa = same_weights(build(small(**overrides, xsa={"per": per}), seed=5), plain)
    assert all(p.abs().sum() == 0 for p in new_parameters(xsa).values())  # α (W) starts at zero
    with torch.no_grad():
        assert max_diff(xsa(tokens()), plain(tokens())) <= 1e-6


@pytest.mark.parametrize("n_kv_head", [4, 2])
def test_satformer_with_a_zero_gate_is_vanilla(n_kv_head):
    plain = build(small(n_kv_head=n_kv_head))
    sat = same_weights(build(small(n_kv_head=n_kv_head, satformer={"enabled": True}), seed=5), plain)
    assert all(p.abs().sum() > 0 for p in new_parameters(sat).values())  # random W_α (relu has no gradient at 0)
    with torch.no_grad():
        assert max_diff(sat(tokens()), plain(tokens())) > 1e-4
        for p in new_parameters(sat).values():
            p.zero_()  # W_α = 0: relu(0) V_1 = 0
        assert max_diff(sat(tokens()), plain(tokens())) <= 1e-6


@pytest.mark.parametrize("dense", [{"layers": "all"}, {"layers": [3, 6], "sources": [0, 2], "hidden": 8},
                                   {"layers": "last", "into": "value", "sources": [0, 3, 5]}],
                         ids=["mudd-input-all", "input-sparse", "modded-value-last"])
@pytest.mark.parametrize("residual", [{}, {"target": "v"}], ids=["vanilla", "resformer"])
def test_dense_value_connections_start_at_mu_zero_which_is_the_model_without_them(dense, residual):
    plain = build(small(residual=residual))
    mudd = same_weights(build(small(residual=residual, dense_value=dense), seed=5), plain)
    with torch.no_grad():
        assert all(block.attn.dense_value.w2.abs().sum() == 0 for block in mudd.blocks if block.attn.dense_value)
        assert max_diff(mudd(tokens()), plain(tokens())) <= 1e-6
        moved_off_init(mudd)
        assert max_diff(mudd(tokens()), plain(tokens())) > 1e-4  # and it is not silently ignored


# ---------------------------------------------------------------------------- the equations
def test_xsa_removes_tanh_alpha_of_the_component_along_the_own_value():
    """U' = U - tanh(α)(U·v/‖v‖²) v: U'·v = (1 - tanh α) U·v, and the part of U orthogonal to v is untouched."""
    config = small(xsa={"per": "head"})
    xsa = ExclusiveSelfAttention(config, 4)
    with torch.no_grad():
        xsa.alpha.copy_(torch.tensor([0.3, -0.7, 2.0, 0.0]))
    u, v = torch.randn(2, 4, 5, 16), torch.randn(2, 4, 5, 16)
    out = xsa(torch.randn(2, 5, 64), u, v)
    t = torch.tanh(xsa.alpha).view(1, 4, 1, 1)
    dot = lambda a, b: (a * b).sum(-1, keepdim=True)  # noqa: E731
    assert torch.allclose(dot(out, v), (1 - t) * dot(u, v), atol=1e-5)
    orthogonal = lambda a: a - dot(a, v) / dot(v, v) * v  # noqa: E731
    assert torch.allclose(orthogonal(out), orthogonal(u), atol=1e-5)
    assert torch.equal(xsa(torch.randn(2, 5, 64), u, torch.zeros_like(v)), u)  # a zero value removes nothing


def test_gated_attention_multiplies_the_attention_output_by_sigmoid_of_the_normed_input():
    """Y' = Y ⊙ σ(X W_θ), rebuilt for layer 3 from captured q, k, v with the head-wise gate."""
    model = build(small(attn_gate={"per": "head"}))
    cap = _Capture()
    x = tokens()
    with torch.no_grad():
        model(x, trace=cap)
        layer, block = 2, model.blocks[2]
        u = torch.nn.functional.scaled_dot_product_attention(cap.q[layer], cap.k[layer], cap.v[layer], is_causal=True)
        xn = _normed_input(model, layer, cap)
        gate = torch.sigmoid(xn @ block.attn.out_gate.weight.T).transpose(1, 2).unsqueeze(-1)  # [B, H, T, 1]
        b, t, d = xn.shape
        h = cap.hidden[layer - 1] + block.attn.wo((u * gate).transpose(1, 2).reshape(b, t, d))
        assert torch.allclose(cap.hidden[layer], h + block.mlp(block.mlp_norm(h)), atol=1e-5)


def test_satformer_adds_relu_gated_first_layer_values():
    """V'_n = V_n + relu(W_α h_n) V_1, per KV head and token, V_1 layer 1's raw projection."""
    model = build(small(n_kv_head=2, satformer={"enabled": True, "layers": [3, 5]}))
    cap = _Capture()
    with torch.no_grad():
        model(tokens(), trace=cap)
        v1 = _heads(model.blocks[0].attn.wv(model.blocks[0].attn_norm(cap.hidden[-1])), 2)
        for layer in range(1, 6):
            attn, xn = model.blocks[layer].attn, _normed_input(model, layer, cap)
            own = _heads(attn.wv(xn), 2)
            if layer + 1 in (3, 5):
                gate = torch.relu(xn @ attn.sat_gate.weight.T).transpose(1, 2).unsqueeze(-1)
                assert torch.allclose(cap.v[layer], own + gate * v1, atol=1e-6)
                assert (gate == 0).any() and (gate > 0).any()  # relu: sparse access
            else:
                assert attn.sat_gate is None and torch.allclose(cap.v[layer], own, atol=1e-6)


def test_dense_value_input_is_the_norm_of_a_mu_weighted_mix_of_earlier_hidden_states():
    """MUDD's V stream: V_n = W_V RMSNorm_n(h_{n-1} + Σ_j μ_j h_j), μ = W_2 GELU(W_1 RMSNorm(h_{n-1}))."""
    model = moved_off_init(build(small(dense_value={"layers": [4], "sources": [0, 1, 3]})))
    cap = _Capture()
    with torch.no_grad():
        model(tokens(), trace=cap)
        h = [cap.hidden[j - 1] for j in range(4)]  # h_0 = embeddings .. h_3, the input of layer 4
        dense = model.blocks[3].attn.dense_value
        normed = torch.nn.functional.rms_norm(h[3], (64,), eps=1e-5)
        mu = torch.nn.functional.gelu(normed @ dense.w1.T) @ dense.w2.T  # [B, T, 3]
        mixed = h[3] + mu[..., :1] * h[0] + mu[..., 1:2] * h[1] + mu[..., 2:] * h[3]
        block = model.blocks[3]
        assert torch.allclose(cap.v[3], _heads(block.attn.wv(block.attn_norm(mixed)), 4), atol=1e-5)


def test_skip_v1_layers_attend_with_their_own_half_and_layer_ones_other_half():
    """SkipV1Former: V_n = [W_V^n x (KV heads 1..H/2) ; V_1 (heads H/2+1..H)], a half-size W_V from layer 2 on."""
    model = build(small(n_kv_head=2, share={"skip_v1": True}))
    cap = _Capture()
    with torch.no_grad():
        model(tokens(), trace=cap)
        assert model.blocks[0].attn.wv.weight.shape == (32, 64)
        for layer in range(1, 6):
            wv = model.blocks[layer].attn.wv
            assert wv.weight.shape == (16, 64)
            own = _heads(wv(_normed_input(model, layer, cap)), 1)
            assert torch.allclose(cap.v[layer], torch.cat([own, cap.v[0][:, 1:]], dim=1), atol=1e-6)


def test_the_variants_change_the_output_once_off_their_neutral_setting():
    """Guard against equivalence tests passing because a variant is silently ignored."""
    vanilla = build(small(n_kv_head=2))
    for overrides in (dict(attn_gate={"per": "head"}), dict(xsa={"per": "layer"}), dict(satformer={"enabled": True}),
                      dict(dense_value={"layers": "all"}), dict(share={"skip_v1": True})):
        variant = moved_off_init(same_weights(build(small(n_kv_head=2, **overrides), seed=5), vanilla))
        with torch.no_grad():
            assert max_diff(variant(tokens()), vanilla(tokens())) > 1e-3, overrides


# ---------------------------------------------------------------------------- decoding and the KV cache
DECODE_VARIANTS = {
    "gate-head": dict(attn_gate={"per": "head"}),
    "gate-element+resformer+gqa": dict(attn_gate={"per": "element"}, residual={"target": "v"}, n_kv_head=2),
    "gate-some-layers+identity": dict(attn_gate={"per": "head", "layers": [2, 5]},
                                      residual={"target": "v", "mapping": "identity"}),
    "xsa-layer": dict(xsa={"per": "layer"}),
    "xsa-head+svformer-anchors+gqa": dict(xsa={"per": "head"}, share={"svformer": True, "anchors": [4]}, n_kv_head=2),
    "xsa-token+neutreno": dict(xsa={"per": "token", "layers": [1, 3, 6]}, neutreno_lambda=0.3),
    "xsa+cross-attention": dict(xsa={"per": "head"}, residual={"target": "v", "mapping": "cross_attention"}),
    "satformer": dict(satformer={"enabled": True}),
    "satformer+gqa+value-embed": dict(satformer={"enabled": True}, value_embed={"layers": "alternate"}, n_kv_head=2),
    "dense-input-all": dict(dense_value={"layers": "all"}),
    "dense-input+denseformer+resformer": dict(dense_value={"layers": [3, 6], "hidden": 16}, dwa={"enabled": True},
                                              residual={"target": "v", "learnable": "tied"}),
    "dense-value-last": dict(dense_value={"layers": "last", "into": "value", "sources": [0, 3, 5]}),
    "skip-v1": dict(share={"skip_v1": True}),
    "skip-v1+gqa+neutreno": dict(share={"skip_v1": True}, n_kv_head=2, neutreno_lambda=0.3),
    "skip-v1+cla-k+xsa+gate": dict(share={"skip_v1": True, "every": 2, "what": "k"}, xsa={"per": "head"},
                                   attn_gate={"per": "head"}),
    "skip-v1+query-residual+explicit": dict(share={"skip_v1": True}, residual={"target": "q"}, attn_impl="explicit"),
    "all-that-compose": dict(attn_gate={"per": "element"}, xsa={"per": "token"}, satformer={"enabled": True},
                             dense_value={"layers": "all"}, value_embed={"layers": [1, 4]}, neutreno_lambda=0.2,
                             n_kv_head=2),
}


@pytest.mark.parametrize("name", list(DECODE_VARIANTS))
def test_incremental_decode_matches_full_forward_and_holds_the_analytic_bytes(name):
    config = small(**DECODE_VARIANTS[name])
    model = moved_off_init(build(config))
    x = tokens(length=14)
    with torch.no_grad():
        full = model(x)
        cache = model.new_cache(batch=2, max_seq=14)
        # a prefill of 5 tokens, then one token at a time
        steps = [model(x[:, :5], cache=cache)] + [model(x[:, t:t + 1], cache=cache) for t in range(5, 14)]
    assert max_diff(torch.cat(steps, 1), full) <= 1e-5
    assert cache.held_bytes() == kv_cache_bytes(config, batch=2, seq=14)


def test_generate_through_the_skip_v1_cache_equals_argmax_without_cache():
    model = moved_off_init(build(small(share={"skip_v1": True}, n_kv_head=2, xsa={"per": "head"})))
    prompt = tokens(length=6)
    out = model.generate(prompt, max_new_tokens=8)
    assert torch.equal(out, argmax_without_cache(model, prompt, 8))


@pytest.mark.parametrize("n_layer", [6, 8, 24])
def test_skip_v1_cache_is_three_quarters_plus_of_vanilla_exactly(n_layer):
    """L layers: L K tensors, one full V (layer 1) and L-1 half Vs = (3L+1)/(4L) of vanilla's 2L tensors."""
    cfg = dict(SMALL, n_layer=n_layer)
    for n_kv_head in (4, 2):
        vanilla = kv_cache_bytes(ModelConfig(**cfg, n_kv_head=n_kv_head), batch=3, seq=100)
        assert vanilla == 2 * n_layer * 3 * 100 * n_kv_head * 16 * 4
        skip = kv_cache_bytes(ModelConfig(**cfg, n_kv_head=n_kv_head, share={"skip_v1": True}), batch=3, seq=100)
        assert skip * 4 * n_layer == vanilla * (3 * n_layer + 1)
    # With CLA sharing K in pairs: L/2 K + one full V + L-1 half Vs = (2L+1)/(4L) of vanilla.
    skip_cla = kv_cache_bytes(ModelConfig(**cfg, share={"skip_v1": True, "every": 2, "what": "k"}), 3, 100)
    assert skip_cla * 4 * n_layer == kv_cache_bytes(ModelConfig(**cfg), 3, 100) * (2 * n_layer + 1)
    # The cache the model allocates for 6 layers: 1 - 19/24, i.e. 20.8% smaller (25% as L grows).
    config = ModelConfig(**dict(SMALL), share={"skip_v1": True})
    cache = build(config).new_cache(batch=1, max_seq=64)
    assert cache.held_bytes() == kv_cache_bytes(config, 1, 64) == kv_cache_bytes(ModelConfig(**SMALL), 1, 64) * 19 // 24
    assert [t.shape[1] for t in cache.values] == [4, 2, 2, 2, 2, 2]


def test_the_other_variants_keep_the_vanilla_cache():
    for overrides in (dict(attn_gate={"per": "element"}), dict(xsa={"per": "token"}), dict(satformer={"enabled": True}),
                      dict(dense_value={"layers": "all"})):
        assert kv_cache_bytes(small(**overrides), 2, 50) == kv_cache_bytes(small(), 2, 50), overrides


# ---------------------------------------------------------------------------- training: gradients, groups, counts
GRADIENT_CASES = {
    "gate-element+xsa-token+satformer+dense-input": dict(attn_gate={"per": "element"}, xsa={"per": "token"},
                                                         satformer={"enabled": True}, dense_value={"layers": "all"}),
    "gate-head+xsa-head+dense-value-last": dict(attn_gate={"per": "head"}, xsa={"per": "head"},
                                                dense_value={"layers": "last", "into": "value", "sources": [0, 5]}),
    "xsa-layer+skip-v1+gqa": dict(xsa={"per": "layer"}, share={"skip_v1": True}, n_kv_head=2),
    "token-gate-low-rank+value-embed-lambda": dict(residual={"target": "v", "learnable": "token", "gate_rank": 4,
                                                             "gate_bias": True},
                                                   value_embed={"layers": [1, 3], "value_weight": "learnable"}),
    **LEARNABLE_CHOICES,  # every choice of the variant Literals, the residual's learnable kinds among them
}


@pytest.mark.parametrize("name", list(GRADIENT_CASES))
def test_every_new_parameter_learns_and_sits_in_the_undecayed_mixing_group(name):
    """From init, one AdamW step, then every parameter has a non-zero gradient (the zero-initialised W_2 of a μ
    network leaves its W_1 without one until W_2 has moved, a low-rank gate's W_up likewise). DenseFormer's alphas
    alone make no mixing group: they are decayed."""
    model = build(small(**GRADIENT_CASES[name])).train()
    new = new_parameters(model)
    assert all(p.requires_grad for p in new.values())
    assert bool(new) == model.config.has_mixing_weights()
    groups = model.param_groups(weight_decay=0.1, mix_lr=0.02)
    if new:
        decay, no_decay, mix = groups
        assert {id(p) for p in new.values()} <= {id(p) for p in mix["params"]}
        assert mix["weight_decay"] == 0.0 and mix["lr"] == 0.02
        assert not {id(p) for p in new.values()} & {id(p) for p in decay["params"] + no_decay["params"]}
        assert {id(p) for p in new.values()} <= {id(p) for p in model.mixing_parameters()}
    optimizer = torch.optim.AdamW(groups, lr=1e-2)
    x = tokens()
    model(x[:, :-1], labels=x[:, 1:]).backward()
    optimizer.step()
    optimizer.zero_grad()
    model(x[:, :-1], labels=x[:, 1:]).backward()
    dead = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not dead, dead


def _flops_and_params(**overrides):
    model = build(small(**overrides))
    return model.flops_per_token(32), model.num_params()


def test_num_params_and_flops_count_the_new_parameters():
    c = small()
    L, H, D, hidden = c.n_layer, c.n_head, c.d_model, 64
    # name -> (overrides, added weight-matrix parameters (matmuls: 6 FLOPs each per token), added other parameters)
    cases = {
        "gate-head": (dict(attn_gate={"per": "head"}), L * H * D, 0),
        "gate-element": (dict(attn_gate={"per": "element"}), L * D * D, 0),
        "gate-two-layers": (dict(attn_gate={"per": "head", "layers": [1, 6]}), 2 * H * D, 0),
        "xsa-layer": (dict(xsa={"per": "layer"}), 0, L),
        "xsa-head": (dict(xsa={"per": "head"}), 0, L * H),
        "xsa-token": (dict(xsa={"per": "token"}), L * H * D, 0),
        "satformer-gqa": (dict(satformer={"enabled": True}, n_kv_head=2), (L - 1) * 2 * D, 0),
        "dense-all": (dict(dense_value={"layers": "all"}), sum(hidden * D + (i + 1) * hidden for i in range(1, L)), 0),
        "dense-last-3": (dict(dense_value={"layers": "last", "sources": [0, 2, 5], "hidden": 8}), 8 * D + 3 * 8, 0),
        "skip-v1": (dict(share={"skip_v1": True}), -(L - 1) * D * (D // 2), 0),
    }
    for name, (overrides, matrices, others) in cases.items():
        flops, params = _flops_and_params(n_kv_head=overrides.get("n_kv_head", H))
        f, p = _flops_and_params(**overrides)
        assert p - params == matrices + others, name
        assert f - flops == 6 * matrices, name


# ---------------------------------------------------------------------------- config validation
INVALID = [
    (dict(attn_gate={"per": "channel"}), r"attn_gate.per='channel'.*\['none', 'head', 'element'\]"),
    (dict(attn_gate={"layers": [2]}), r"attn_gate.layers is set but attn_gate.per is 'none'"),
    (dict(attn_gate={"per": "head", "layers": [0]}), r"attn_gate.layers.*\[1, 6\]"),
    (dict(attn_gate={"per": "head", "bias": True}), r"attn_gate.bias.*allowed fields of attn_gate"),
    (dict(xsa={"per": "token-head"}), r"xsa.per.*\['none', 'layer', 'head', 'token'\]"),
    (dict(xsa={"layers": [1]}), r"xsa.layers is set but xsa.per is 'none'"),
    (dict(xsa={"per": "head", "layers": [7]}), r"xsa.layers.*\[1, 6\]"),
    (dict(satformer={"enabled": "yes"}), r"satformer.enabled='yes' must be true or false"),
    (dict(satformer={"layers": [3]}), r"satformer.layers is set but satformer.enabled is false"),
    (dict(satformer={"enabled": True, "layers": [1]}), r"satformer.layers.*\[2, 6\]"),
    (dict(satformer={"enabled": True}, residual={"target": "v"}), r"satformer.enabled and residual.target='v'"),
    (dict(satformer={"enabled": True}, share={"svformer": True}), r"satformer.layers holds layer 2.*share.svformer"),
    (dict(satformer={"enabled": True}, share={"skip_v1": True}), r"satformer.layers holds layer 2.*share.skip_v1"),
    (dict(satformer={"enabled": True, "layers": [4]}, share={"every": 2, "what": "v"}),
     r"satformer.layers holds layer 4, which reuses layer 3's values"),
    (dict(dense_value={"layers": [1]}), r"dense_value.layers.*\[2, 6\]"),
    (dict(dense_value={"layers": "first"}), r"dense_value.layers='first'.*\['all', 'last'\]"),
    (dict(dense_value={"into": "value"}), r"dense_value.into is set but dense_value.layers is null"),
    (dict(dense_value={"layers": "all", "into": "query"}), r"dense_value.into.*\['input', 'value'\]"),
    (dict(dense_value={"layers": "all", "hidden": 0}), r"dense_value.hidden=0 must be a positive integer"),
    (dict(dense_value={"layers": [3, 5], "sources": [0, 3]}), r"dense_value.sources holds 3; layer 3.*\[0, 2\]"),
    (dict(dense_value={"layers": "all", "sources": [0, 0]}), r"dense_value.sources.*(repeats|holds 0)"),
    (dict(dense_value={"layers": "last", "into": "value"}, n_kv_head=2), r"dense_value.into='value'.*n_kv_head"),
    (dict(dense_value={"layers": "all"}, share={"svformer": True}), r"dense_value.layers holds layer 2.*own V"),
    (dict(dense_value={"layers": "all"}, share={"skip_v1": True}), r"dense_value.layers.*share.skip_v1"),
    (dict(share={"skip_v1": 1}), r"share.skip_v1=1 must be true or false"),
    (dict(share={"skip_v1": True, "svformer": True}), r"share.skip_v1.*share.svformer.*keep one"),
    (dict(share={"skip_v1": True, "first": "v"}), r"share.skip_v1.*share.first='v'"),
    (dict(share={"skip_v1": True, "every": 2, "what": "kv"}), r"share.skip_v1.*share.what in \['v','kv'\]"),
    (dict(share={"skip_v1": True}, n_kv_head=1), r"share.skip_v1.*n_kv_head=1 must be even"),
    (dict(share={"skip_v1": True}, residual={"target": "v"}), r"residual.target='v' cannot combine with share.skip_v1"),
    (dict(share={"skip_v1": True}, value_embed={"layers": [1, 2]}),
     r"value_embed.layers holds layer 2.*share.skip_v1"),
]


@pytest.mark.parametrize("overrides,message", INVALID, ids=[m for _, m in INVALID])
def test_bad_combinations_are_refused_with_the_field_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        small(**overrides)


def test_what_composes_is_accepted():
    for overrides in (dict(share={"skip_v1": True}, value_embed={"layers": [1]}, n_kv_head=2),
                      dict(share={"skip_v1": True, "every": 3, "what": "k"}, residual={"target": "q"}, n_kv_head=2),
                      dict(satformer={"enabled": True, "layers": [2]}, share={"svformer": True, "anchors": [2]}),
                      dict(dense_value={"layers": [3], "sources": [0, 1]}, share={"every": 2, "what": "v"}),
                      dict(attn_gate={"per": "head"}, xsa={"per": "head"}, share={"svformer": True})):
        small(**overrides)


def test_new_fields_are_not_vanilla():
    config = small(attn_gate={"per": "head"}, xsa={"per": "layer", "layers": [2]}, satformer={"enabled": True},
                   dense_value={"layers": "last"})
    assert set(non_vanilla_fields(config)) == {"attn_gate.per", "xsa.per", "xsa.layers", "satformer.enabled",
                                               "dense_value.layers"}
    assert non_vanilla_fields(small(share={"skip_v1": True})) == ["share.skip_v1"]
    with pytest.raises(ValueError, match=r"attn_gate.per"):
        to_hf_llama(build(small(attn_gate={"per": "head"})))


# ---------------------------------------------------------------------------- Hugging Face export
TEXT = "the quiet river walks under the old stone bridge in the morning light"
EXPORTED = ["gate-head", "gate-element+resformer+gqa", "xsa-head+svformer-anchors+gqa", "xsa-token+neutreno",
            "satformer+gqa+value-embed", "dense-input+denseformer+resformer", "dense-value-last",
            "skip-v1+gqa+neutreno", "skip-v1+cla-k+xsa+gate", "all-that-compose"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every exported variant through one isolated `python -I` process: {name: (expected, what the folder computed)}."""
    root = tmp_path_factory.mktemp("hf_variants")
    tokenizer = byte_bpe_tokenizer(300, [TEXT, "a bright song over the north river", "def value return self"] * 3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and robust to a busy machine
    cases, expected = {}, {}
    for seed, name in enumerate(EXPORTED):
        torch.manual_seed(seed)
        config = ModelConfig.from_dict({"n_layer": 6, "n_head": 4, "d_model": 32, "ffn_dim": 64, "init_std": 0.1,
                                        "vocab_size": tokenizer.get_vocab_size(), "max_seq_len": 64,
                                        **DECODE_VARIANTS[name]})
        model = moved_off_init(Transformer(config).eval())
        export_model(model, tokenizer, root / name)
        cases[name], expected[name] = reference_case(model, root / name, seed, TEXT)
    torch.set_num_threads(threads)
    results = check_in_plain_transformers(root, cases)
    return {name: (expected[name], results["folders"][name]) for name in EXPORTED}


@pytest.mark.parametrize("name", EXPORTED)
def test_exported_folder_loads_in_plain_transformers_and_computes_what_the_model_computes(exported, name):
    expected, got = exported[name]
    assert got["class"] == "ResFormerForCausalLM"
    assert got["config"] == expected["config"]  # config.json gives back every field of the training config
    assert max_diff(got["logits"], expected["logits"]) <= 1e-5
    assert torch.equal(got["sequences"], expected["sequences"])
    assert max_diff(got["step_logits"], expected["step_logits"]) <= 1e-5  # each cached step = the full forward
    assert got["cache_length"] == PROMPT_LEN + NEW_TOKENS - 1
    assert got["cache_bytes"] == expected["cache_bytes"]  # SkipV1Former's half V included
    with_cache, without_cache = got["beam_sequences"]
    assert torch.equal(with_cache, without_cache)
    for row, alone in enumerate(expected["padded_new_tokens"]):  # left padding generates what each prompt does alone
        assert torch.equal(got["padded_sequences"][row, PROMPT_LEN:], alone), row


def test_skip_v1_export_caches_a_quarter_less_than_it_would_with_full_values(exported):
    expected, got = exported["skip-v1+gqa+neutreno"]
    full = kv_cache_bytes(ModelConfig(n_layer=6, n_head=4, n_kv_head=2, d_model=32, ffn_dim=64, vocab_size=300,
                                      max_seq_len=64), batch=2, seq=PROMPT_LEN + NEW_TOKENS - 1)
    assert got["cache_bytes"] * 24 == full * 19 and math.isclose(1 - got["cache_bytes"] / full, 5 / 24)
