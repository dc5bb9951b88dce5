"""The value path beyond the paper: value embeddings and sigmoid-gated value residuals, proved as every variant is.

Each form equals vanilla (or ResFormer, its limit) with its table or gate zeroed, computes its published formula,
decodes incrementally as it computes the full sequence, holds the analytic KV-cache bytes, and gives every gate,
mixing weight and table a gradient. (The HF export of each form is checked in test_export.py.)
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lit_resformer.model import ModelConfig, Trace, Transformer, kv_cache_bytes
from lit_resformer.training.module import LitResFormer

SMALL = dict(n_layer=6, n_head=4, d_model=64, ffn_dim=128, vocab_size=97, max_seq_len=64)

# x-transformers: per head, full rank, bias. RWKV-7: per channel, low rank, bias.
X_TRANSFORMERS_GATE = {"target": "v", "learnable": "token", "gate_bias": True}
RWKV7_GATE = {"target": "v", "learnable": "token", "gate_per": "channel", "gate_rank": 4, "gate_bias": True}
NANOCHAT = {"layers": "alternate", "gate_width": 12, "gate_scale": 3.0}
MODDED_NANOGPT = {"layers": [2, 3, 5, 6], "gate_width": 6, "gate_reads_table": True, "gate_scale": 2.0,
                  "value_weight": "learnable"}

FORMS = {
    "x-transformers gate": dict(residual=X_TRANSFORMERS_GATE),
    "x-transformers gate, GQA": dict(residual=X_TRANSFORMERS_GATE, n_kv_head=2),
    "RWKV-7 gate": dict(residual=RWKV7_GATE),
    "per-channel full-rank gate on the previous layer's keys": dict(
        residual={"target": "k", "source": "previous", "learnable": "token", "gate_per": "channel"}),
    "nanochat value embeddings": dict(value_embed=NANOCHAT),
    "modded-nanogpt value embeddings, GQA": dict(value_embed=MODDED_NANOGPT, n_kv_head=2),
    "one shared table + ResFormer": dict(value_embed={"layers": [1, 4, 6], "shared": True},
                                         residual={"target": "v"}),
    "value embeddings + RWKV-7 gate + identity mapping": dict(
        value_embed=NANOCHAT, residual={**RWKV7_GATE, "mapping": "identity"}),
}


def small(**overrides) -> ModelConfig:
    return ModelConfig.from_dict({**SMALL, **overrides})


def tokens(batch=2, length=20, seed=1):
    return torch.randint(0, SMALL["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def build(config: ModelConfig, seed: int = 0, move_gates: bool = True) -> Transformer:
    """A model whose gates, mixing weights and λs are moved off their initial values (so they matter)."""
    torch.manual_seed(seed)
    model = Transformer(config).eval()
    if move_gates:
        with torch.no_grad():
            for p in model.mixing_parameters():
                p.add_(torch.randn_like(p) * 0.5)
    return model


def copy_shared(target: Transformer, source: Transformer) -> Transformer:
    ours = target.state_dict()
    target.load_state_dict({k: v for k, v in source.state_dict().items() if k in ours}, strict=False)
    return target


def zero_(params) -> None:
    with torch.no_grad():
        for p in params:
            p.zero_()


def max_diff(a: Transformer, b: Transformer, x=None) -> float:
    x = tokens() if x is None else x
    with torch.no_grad():
        return (a(x) - b(x)).abs().max().item()


# ---------------------------------------------------------------------------- limits: vanilla or ResFormer
@pytest.mark.parametrize("gate", [X_TRANSFORMERS_GATE, RWKV7_GATE, {**RWKV7_GATE, "gate_rank": None}],
                         ids=["per-head", "per-channel-low-rank", "per-channel-full"])
def test_zeroed_token_gate_is_resformer(gate):
    gated = build(small(residual=gate), seed=3)
    resformer = copy_shared(build(small(residual={"target": "v"})), gated)
    assert max_diff(gated, resformer) > 1e-3  # the moved gate matters
    zero_(p for b in gated.blocks[1:] for p in b.attn.mix.gate.parameters())
    assert max_diff(gated, resformer) <= 1e-5


@pytest.mark.parametrize("value_embed", [NANOCHAT, MODDED_NANOGPT, {"layers": [1, 4, 6], "shared": True}],
                         ids=["nanochat", "modded-nanogpt", "shared"])
def test_zeroed_tables_are_vanilla(value_embed):
    embedded = build(small(value_embed=value_embed), seed=3)
    vanilla = copy_shared(build(small()), embedded)
    assert max_diff(embedded, vanilla) > 1e-3
    zero_(embedded.value_embeds.parameters())
    lams = [b.attn.ve_mix.lam for b in embedded.blocks if b.attn.ve_mix is not None and b.attn.ve_mix.lam is not None]
    assert bool(lams) == (value_embed.get("value_weight") == "learnable")
    # modded-nanogpt's λ scales the layer's own values: vanilla with W_V scaled alike.
    with torch.no_grad():
        for block in embedded.blocks:
            if block.attn.ve_mix is not None and block.attn.ve_mix.lam is not None:
                vanilla.blocks[block.attn.layer].attn.wv.weight.mul_(block.attn.ve_mix.lam)
    assert max_diff(embedded, vanilla) <= 1e-5


def test_zeroed_tables_with_resformer_are_resformer():
    both = build(small(value_embed=NANOCHAT, residual={"target": "v"}), seed=3)
    resformer = copy_shared(build(small(residual={"target": "v"})), both)
    assert max_diff(both, resformer) > 1e-3
    zero_(both.value_embeds.parameters())
    assert max_diff(both, resformer) <= 1e-5


# ---------------------------------------------------------------------------- the published formulas
class _Capture(Trace):
    def __init__(self):
        self.v, self.hidden = {}, {}

    def on_qkv(self, layer, q, k, v):
        self.v[layer] = v

    def on_hidden(self, layer, hidden):
        self.hidden[layer] = hidden


def _heads(x, heads):
    b, t, _ = x.shape
    return x.view(b, t, heads, -1).transpose(1, 2)


def _normed_input(model, capture, layer):
    return model.blocks[layer].attn_norm(capture.hidden[layer - 1])


@pytest.mark.parametrize("value_embed", [NANOCHAT, MODDED_NANOGPT], ids=["nanochat", "modded-nanogpt"])
def test_value_embeddings_add_the_gated_table_row(value_embed):
    """nanochat: V' = V + 3 sigmoid(W x[:12]) VE[token]; modded-nanogpt: V' = λ V + 2 sigmoid(W [x[:6]; VE[:6]]) VE."""
    model = build(small(value_embed=value_embed, n_kv_head=2), seed=2)
    x, capture = tokens(), _Capture()
    hkv, width = model.config.n_kv_head, value_embed["gate_width"]
    with torch.no_grad():
        model(x, trace=capture)
        for i in model.config.value_embed_layers():
            attn = model.blocks[i].attn
            h = _normed_input(model, capture, i)
            row = model.value_embeds[str(i + 1)](x)
            gate_in = torch.cat([h[..., :width], row[..., :width]], -1) if value_embed.get("gate_reads_table") \
                else h[..., :width]
            gate = value_embed["gate_scale"] * torch.sigmoid(gate_in @ attn.ve_mix.gate.T)  # [B, T, Hkv]
            own = _heads(attn.wv(h), hkv) * (attn.ve_mix.lam if attn.ve_mix.lam is not None else 1.0)
            expected = own + gate.transpose(1, 2)[..., None] * _heads(row, hkv)
            assert (capture.v[i] - expected).abs().max() <= 1e-5, i


def test_one_shared_table_serves_every_chosen_layer():
    model = build(small(value_embed={"layers": [2, 5], "shared": True}))
    assert list(model.value_embeds) == ["shared"]
    assert [b.attn.ve_table for b in model.blocks] == [None, "shared", None, None, "shared", None]
    assert small(value_embed={"layers": "alternate"}).value_embed_layers() == [1, 3, 5]  # the last layer included
    assert small(n_layer=5, value_embed={"layers": "alternate"}).value_embed_layers() == [0, 2, 4]


def test_low_rank_per_channel_gate_weighs_the_layers_own_values():
    """V' = g V_n + (1 - g) V_1 with g = sigmoid(W_up W_down x + b), one gate per channel (RWKV-7's LoRA gate)."""
    model = build(small(residual=RWKV7_GATE, n_kv_head=2), seed=4)
    x, capture = tokens(), _Capture()
    with torch.no_grad():
        model(x, trace=capture)
        first = _heads(model.blocks[0].attn.wv(_normed_input(model, capture, 0)), 2)
        for i in range(1, model.config.n_layer):
            attn, h = model.blocks[i].attn, _normed_input(model, capture, i)
            gate = attn.mix.gate
            g = _heads(torch.sigmoid(h @ gate.down.T @ gate.up.T + gate.bias), 2)  # [B, Hkv, T, d]: per channel
            expected = g * _heads(attn.wv(h), 2) + (1 - g) * first
            assert (capture.v[i] - expected).abs().max() <= 1e-5, i


def test_gates_start_at_the_resformer_mix_and_tables_at_the_gate_midpoint():
    torch.manual_seed(0)
    gated = Transformer(small(residual=RWKV7_GATE))
    resformer = copy_shared(Transformer(small(residual={"target": "v"})), gated)
    assert max_diff(gated, resformer) <= 1e-5  # g = 1/2 before training
    ve = Transformer(small(value_embed=MODDED_NANOGPT))
    attn = ve.blocks[1].attn
    assert attn.ve_mix.lam.item() == 0.5 and not attn.ve_mix.gate.any()


# ---------------------------------------------------------------------------- decoding and the KV cache
@pytest.mark.parametrize("name", list(FORMS))
def test_incremental_decode_matches_full_forward_and_the_cache_holds_the_analytic_bytes(name):
    model = build(small(**FORMS[name]), seed=6)
    x = tokens(length=16)
    cache = model.new_cache(batch=2, max_seq=16)
    with torch.no_grad():
        full = model(x)
        steps = [model(x[:, :5], cache=cache)] + [model(x[:, t:t + 1], cache=cache) for t in range(5, 16)]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() <= 1e-5
    assert cache.held_bytes() == kv_cache_bytes(model.config, batch=2, seq=16)
    # Value embeddings and gates change what is stored, never how much: the bytes of the plain model.
    assert kv_cache_bytes(model.config, 2, 16) == kv_cache_bytes(small(n_kv_head=model.config.n_kv_head), 2, 16)


# ---------------------------------------------------------------------------- training: gradients, groups, logs
@pytest.mark.parametrize("name", list(FORMS))
def test_every_gate_mixing_weight_and_table_gets_a_gradient_after_one_step(name):
    """The failure mode of one public implementation: mixing weights that silently never receive a gradient."""
    torch.manual_seed(0)
    model = Transformer(small(**FORMS[name])).train()  # from the real initialisation: zero gates, λ = 1/2
    learned = {n: p for n, p in model.named_parameters() if p in set(model.mixing_parameters())
               or n.startswith("value_embeds.")}
    assert learned
    optimizer = torch.optim.AdamW(model.param_groups(weight_decay=0.1), lr=1e-2)
    x = tokens(length=24)
    for _ in range(2):  # a low-rank gate's W_up has no gradient until W_down has left zero: one step
        optimizer.zero_grad()
        logits = model(x[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten()).backward()
        optimizer.step()
    silent = [n for n, p in learned.items() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not silent


def test_gates_and_lambdas_train_in_the_mixing_group_and_tables_as_embeddings():
    model = Transformer(small(value_embed=MODDED_NANOGPT, residual=RWKV7_GATE))
    names = {id(p): n for n, p in model.named_parameters()}
    decay, no_decay, mix = model.param_groups(weight_decay=0.1, mix_lr=0.05)
    mixed = {names[id(p)] for p in mix["params"]}
    assert mix["weight_decay"] == 0.0 and mix["lr"] == 0.05
    assert {n for n in names.values() if ".ve_mix." in n or ".mix.gate." in n} == mixed
    assert any(n.endswith("ve_mix.lam") for n in mixed) and any(n.endswith("mix.gate.up") for n in mixed)
    tables = {n for n in names.values() if n.startswith("value_embeds.")}
    assert tables <= {names[id(p)] for p in no_decay["params"]}
    decayed = {names[id(p)] for p in model.param_groups(weight_decay=0.1, decay_embeddings=True)[0]["params"]}
    assert tables <= decayed


def test_gates_and_lambdas_are_logged_like_the_other_mixing_weights():
    module = LitResFormer(small(value_embed=MODDED_NANOGPT, residual=RWKV7_GATE), mix_lr=0.05)
    logged = module.mixing_weights()
    assert {"mix/layer2/gate_weight_norm", "mix/layer2/value_embed_gate_norm", "mix/layer2/value_lambda"} <= set(logged)
    assert "mix/layer1/value_embed_gate_norm" not in logged  # layer 1 has no table here
    assert float(logged["mix/layer2/value_lambda"]) == 0.5
    with pytest.raises(ValueError, match=r"model.mix_lr.*value_embed.layers"):
        LitResFormer(small(), mix_lr=0.05)


def test_tables_are_parameters_but_not_flops():
    vanilla, embedded = Transformer(small()), Transformer(small(value_embed=NANOCHAT))
    tables = 3 * SMALL["vocab_size"] * SMALL["d_model"]
    gates = 3 * SMALL["n_head"] * NANOCHAT["gate_width"]
    assert embedded.num_params() == vanilla.num_params() + tables + gates
    assert embedded.num_params(non_embedding=True) == vanilla.num_params(non_embedding=True) + gates
    assert embedded.flops_per_token(32) == vanilla.flops_per_token(32) + 6 * gates


# ---------------------------------------------------------------------------- config validation
INVALID = [
    (dict(residual={"target": "v", "gate_per": "channel"}), r"residual.gate_per.*residual.learnable='token'"),
    (dict(residual={"target": "v", "learnable": "head", "gate_rank": 4}), r"residual.gate_rank.*learnable"),
    (dict(residual={"target": "v", "learnable": "token", "gate_per": "row"}),
     r"residual.gate_per='row'.*\['head', 'channel'\]"),
    (dict(residual={"target": "v", "learnable": "token", "gate_rank": 0}), r"residual.gate_rank=0.*positive"),
    (dict(residual={"target": "v", "learnable": "token", "gate_bias": 1}), r"residual.gate_bias=1.*true or false"),
    (dict(residual={"gate_bias": True}), r"residual.gate_bias is set but residual.target is 'none'"),
    (dict(value_embed={"gate_width": 6}), r"value_embed.gate_width is set but value_embed.layers is null"),
    (dict(value_embed={"layers": "every_other"}), r"value_embed.layers='every_other'.*\['alternate'\]"),
    (dict(value_embed={"layers": [0, 2]}), r"value_embed.layers.*\[1, 6\]"),
    (dict(value_embed={"layers": [2, 2]}), r"value_embed.layers.*repeats"),
    (dict(value_embed={"layers": [2], "gate_width": 65}), r"value_embed.gate_width=65.*\[1, 64\]"),
    (dict(value_embed={"layers": [2], "gate_width": 20, "gate_reads_table": True}, n_kv_head=1),
     r"value_embed.gate_width=20.*\[1, 16\].*table row"),
    (dict(value_embed={"layers": [2], "gate_scale": 0}), r"value_embed.gate_scale=0.*> 0"),
    (dict(value_embed={"layers": [2], "value_weight": "head"}), r"value_embed.value_weight.*\['fixed', 'learnable'\]"),
    (dict(value_embed={"layers": [2], "shared": "yes"}), r"value_embed.shared='yes'.*true or false"),
    (dict(value_embed={"layers": [1, 3]}, share={"svformer": True}), r"value_embed.layers holds layer 3.*own V"),
    (dict(value_embed={"layers": [2]}, share={"every": 2, "what": "kv"}), r"value_embed.layers holds layer 2"),
    (dict(value_embed={"layers": [2], "size": 3}), r"value_embed.size.*allowed fields"),
]


@pytest.mark.parametrize("overrides,message", INVALID, ids=[m for _, m in INVALID])
def test_invalid_value_path_configs_are_refused_with_the_fields_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        small(**overrides)


def test_value_embeddings_on_layers_that_compute_their_own_values_compose_with_sharing():
    config = small(value_embed={"layers": [1, 4]}, share={"svformer": True, "anchors": [4]})
    model = build(config)
    x = tokens(length=12)
    cache = model.new_cache(batch=2, max_seq=12)
    with torch.no_grad():
        full = model(x)
        steps = [model(x[:, :4], cache=cache)] + [model(x[:, t:t + 1], cache=cache) for t in range(4, 12)]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() <= 1e-5
    assert cache.held_bytes() == kv_cache_bytes(config, batch=2, seq=12)
