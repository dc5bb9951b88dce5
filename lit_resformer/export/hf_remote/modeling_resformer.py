"""ResFormer, SVFormer and their relatives as a Hugging Face causal LM (loaded with `trust_remote_code=True`).

Self-contained: torch and transformers only, so an exported folder works where lit-resformer is not installed.
Equation numbers refer to "Value Residual Learning For Alleviating Attention Concentration In Transformers"
(arXiv 2410.17897).

Notation: layer n (1-based; `i = n - 1` in code) projects its normed input into Q_n, K_n, V_n;
A_n = softmax(Q_n K_n^T / sqrt(d) + causal mask); U_n = A_n V_n is the attention output before W_O.
The base model is Llama-like: pre-RMSNorm, SwiGLU MLP, RoPE, no biases, untied embeddings. Every variant is a
field of `ResFormerConfig`; parameter names follow the training code, so its weights load one to one.

Beyond the paper, the value path researchers use today: value embeddings (per-token tables added to the values of
chosen layers through a sigmoid gate, as nanochat and modded-nanogpt) and sigmoid gates from the token's hidden state
per head or per channel, full or low-rank (x-transformers, RWKV-7); and the field's other answers to attention
concentration: gated attention (arXiv 2505.06708), exclusive self-attention (modded-nanogpt's gated XSA), SATFormer
(arXiv 2605.03953), dense value connections (MUDDFormer arXiv 2502.12170, modded-nanogpt) and SkipV1Former
(arXiv 2510.16807).

The KV cache holds only what each layer produces: SVFormer keeps K for every layer and V once (per anchor),
CLA keeps one K/V per group, SkipV1Former's layers n >= 2 keep K and the half of their value heads they compute,
and a layer that reuses another layer's K or V reads the producer's entry.
Written against the Cache API of transformers 5 (`Cache(layers=...)`, `DynamicLayer`), and tested with 5.23 and
5.24, which renamed the cache argument and output field from `past_key_values` to `cache`.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_resformer import ResFormerConfig

# transformers 5.24 renamed the cache that generate() passes to forward, reads back from its output and reorders
# in beam search from `past_key_values` to `cache` (the old name is deprecated: it still works, with warnings, until
# it is removed). forward takes either name; the model returns and prepares its cache under the installed release's
# own name, which the fields of the output class tell.
CACHE_NAME = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"


# ---------------------------------------------------------------------------------------------- KV cache
class ProducedKVLayer(DynamicLayer):
    """The cache of one layer: the K and V that this layer itself produces.

    A tensor the layer does not produce (V of an SVFormer layer that is no anchor, K of a `share.first: k`
    layer) is kept as a zero-width tensor [B, Hkv, T, 0]: it holds no bytes, yet carries the batch and length
    that DynamicLayer's bookkeeping (beam reordering, cropping) works on.
    """

    def update(self, key_states, value_states, *args, **kwargs):
        produced = key_states if key_states is not None else value_states
        nothing = produced[..., :0]
        return super().update(nothing if key_states is None else key_states,
                              nothing if value_states is None else value_states)

    def get_seq_length(self) -> int:
        # DynamicLayer counts elements of K, which a V-only layer keeps zero-width: read the length from the shape.
        return self.keys.shape[-2] if self.is_initialized else 0


class ResFormerCache(Cache):
    """One `ProducedKVLayer` per layer; a layer that produces neither K nor V never writes and holds nothing."""

    def __init__(self, config: ResFormerConfig):
        super().__init__(layers=[ProducedKVLayer() for _ in range(config.n_layer)])


# ---------------------------------------------------------------------------------------------- attention
def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(config: ResFormerConfig, position_ids: torch.Tensor, dtype: torch.dtype):
    """cos and sin [B, 1, T, d] of RoPE (Llama's half-split layout) at `position_ids` [B, T]."""
    d = config.head_dim
    inv_freq = 1.0 / config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=position_ids.device) / d)
    angles = position_ids.float()[..., None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)[:, None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, rope) -> torch.Tensor:
    cos, sin = rope
    return x * cos + rotate_half(x) * sin


def allowed_keys(t_q: int, t_k: int, offset: int, key_blocks: int, padding: torch.Tensor | None, device):
    """Boolean mask [t_q, blocks*t_k] (or [B, 1, t_q, blocks*t_k] with padding), True where a query may look.

    Query t sees cache slots s <= offset + t; `key_blocks` > 1 stacks position-aligned key sequences (Eq. 2), each
    causal. `padding` [B, offset + t_q] is 1 on real tokens: real queries skip padded keys, while a padded query
    keeps its causal keys so that no softmax row is empty.
    """
    rows = torch.arange(t_q, device=device)[:, None] + offset
    mask = torch.arange(t_k, device=device)[None, :] <= rows
    if padding is not None:
        real_key = padding[:, None, None, :t_k]
        padded_query = ~padding[:, None, offset:offset + t_q, None]
        mask = mask & (real_key | padded_query)
    return mask.repeat(*([1] * (mask.dim() - 1)), key_blocks)


def attend(q, k, v, offset: int, key_blocks: int, padding: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) v with q [B, H, T, d] and k, v [B, Hkv, S, d] (GQA: Hkv divides H)."""
    t_q, t_k = q.shape[-2], k.shape[-2] // key_blocks
    gqa = q.shape[1] != k.shape[1]
    if padding is None and key_blocks == 1:
        if offset == 0 and t_q == t_k:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        if t_q == 1:  # one new token sees the whole cache
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    mask = allowed_keys(t_q, t_k, offset, key_blocks, padding, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    b, t, _ = x.shape
    return x.view(b, t, heads, -1).transpose(1, 2)  # [B, heads, T, d]


def repeat_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x if x.shape[1] == heads else x.repeat_interleave(heads // x.shape[1], dim=1)


class TokenGate(nn.Module):
    """g = sigmoid(W x + b) from the token's normed hidden state: one gate per head or per channel, W full (`weight`)
    or low-rank (`up` @ `down`), b optional."""

    def __init__(self, d_model: int, heads: int, head_dim: int, per: str, rank: int | None, bias: bool):
        super().__init__()
        self.heads, self.low_rank = heads, rank is not None
        outputs = heads if per == "head" else heads * head_dim
        if rank is None:
            self.weight = nn.Parameter(torch.zeros(outputs, d_model))
        else:
            self.down = nn.Parameter(torch.zeros(rank, d_model))
            self.up = nn.Parameter(torch.zeros(outputs, rank))
        self.bias = nn.Parameter(torch.zeros(outputs)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.low_rank:
            logits = F.linear(F.linear(x, self.down), self.up, self.bias)
        else:
            logits = F.linear(x, self.weight, self.bias)
        b, t, _ = logits.shape
        return torch.sigmoid(logits).view(b, t, self.heads, -1).transpose(1, 2)  # [B, heads, T, 1 or head_dim]


class ValueEmbedMix(nn.Module):
    """Value embeddings of one layer: V'_n = w V_n + gate_scale * sigmoid(W_g u) * VE[token], one gate per KV head.

    u is the first `gate_width` channels of the normed layer input (nanochat), with the same channels of the table
    row after them when `gate_reads_table` (modded-nanogpt); w is 1 or a learned λ (modded-nanogpt).
    """

    def __init__(self, config: ResFormerConfig, heads: int):
        super().__init__()
        ve = config.value_embed
        self.width, self.reads_table, self.scale = ve["gate_width"], ve["gate_reads_table"], float(ve["gate_scale"])
        self.gate = nn.Parameter(torch.zeros(heads, self.width * (2 if self.reads_table else 1)))
        self.lam = nn.Parameter(torch.tensor(0.5)) if ve["value_weight"] == "learnable" else None

    def forward(self, x: torch.Tensor, v: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        u = x[..., :self.width]
        if self.reads_table:
            u = torch.cat([u, rows[..., :self.width]], dim=-1)
        g = self.scale * torch.sigmoid(F.linear(u, self.gate))  # [B, T, Hkv]
        weighted = v if self.lam is None else self.lam * v
        return weighted + g.transpose(1, 2).unsqueeze(-1) * split_heads(rows, v.shape[1])


class OutputGate(nn.Module):
    """Gated attention (arXiv 2505.06708): Y' = Y ⊙ σ(X W_θ) after SDPA, one gate per head or per channel."""

    def __init__(self, d_model: int, heads: int, head_dim: int, per: str):
        super().__init__()
        self.heads = heads
        self.weight = nn.Parameter(torch.zeros(heads if per == "head" else heads * head_dim, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return torch.sigmoid(F.linear(x, self.weight)).view(b, t, self.heads, -1).transpose(1, 2)  # [B, H, T, 1 or d]


class ExclusiveSelfAttention(nn.Module):
    """Gated XSA (modded-nanogpt): U <- U - tanh(α) (U·v / ‖v‖²) v per token and head, v the token's own value;
    α per layer, per head, or per token and head (α = W x)."""

    def __init__(self, config: ResFormerConfig, heads: int):
        super().__init__()
        self.per = config.xsa["per"]
        if self.per == "token":
            self.weight = nn.Parameter(torch.zeros(heads, config.d_model))
        else:
            self.alpha = nn.Parameter(torch.zeros(heads if self.per == "head" else ()))

    def forward(self, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.per == "token":
            alpha = F.linear(x, self.weight).transpose(1, 2).unsqueeze(-1)  # [B, H, T, 1]
        else:
            alpha = self.alpha.view(-1, 1, 1) if self.per == "head" else self.alpha
        along = (u * v).sum(-1, keepdim=True) / v.square().sum(-1, keepdim=True).clamp_min(1e-8)
        return u - torch.tanh(alpha) * along * v


class FirstValueGate(nn.Module):
    """SATFormer (arXiv 2605.03953): V'_n = V_n + relu(W_α h_n) · V_1, one gate per KV head and token."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(heads, d_model))

    def forward(self, x: torch.Tensor, v: torch.Tensor, v1: torch.Tensor) -> torch.Tensor:
        return v + F.relu(F.linear(x, self.weight)).transpose(1, 2).unsqueeze(-1) * v1


class DenseValue(nn.Module):
    """Dense value connections of one layer n: Σ_j μ_j h_j over earlier hidden states (h_0 = embeddings, h_j the
    stream handed to block j+1), μ = W_2 GELU(W_1 RMSNorm(h_{n-1})) per token (MUDDFormer, arXiv 2502.12170)."""

    def __init__(self, config: ResFormerConfig, layer: int):
        super().__init__()
        dv = config.dense_value
        self.sources, self.into, self.eps = config.dense_value_sources(layer), dv["into"], config.norm_eps
        self.w1 = nn.Parameter(torch.zeros(dv["hidden"], config.d_model))
        self.w2 = nn.Parameter(torch.zeros(len(self.sources), dv["hidden"]))

    def forward(self, streams: list[torch.Tensor]) -> torch.Tensor:
        h = streams[-1]
        mu = F.linear(F.gelu(F.linear(F.rms_norm(h, (h.shape[-1],), eps=self.eps), self.w1)), self.w2)  # [B, T, S]
        return sum(mu[..., s, None] * streams[j] for s, j in enumerate(self.sources))


class ResidualMix(nn.Module):
    """Weights (a, l) of X'_n = a X_n + l R_n for one layer: fixed, per layer, per head, per token, or tied."""

    def __init__(self, config: ResFormerConfig, layer: int, heads: int):
        super().__init__()
        r, n = config.residual, layer + 1
        # Eq. 5: with every earlier layer as the source, a = 1/n and l = (n-1)/n average V_1..V_n uniformly.
        self.initial = (1.0 / n, (n - 1) / n) if r["self_weight"] == "uniform" else (float(r["self_weight"]),
                                                                                      float(r["lam"]))
        self.kind = r["learnable"]
        if self.kind == "token":  # g X_n + (1 - g) R_n with a gate per head (or channel) and token
            self.gate = TokenGate(config.d_model, heads, config.head_dim, r["gate_per"], r["gate_rank"],
                                  r["gate_bias"])
        elif self.kind in ("scalar", "head"):
            shape = (1, heads, 1, 1) if self.kind == "head" else ()
            self.mix_self = nn.Parameter(torch.full(shape, self.initial[0]))
            self.mix_history = nn.Parameter(torch.full(shape, self.initial[1]))
        elif self.kind == "tied":  # one λ per layer: (1 - λ) X_n + λ R_n
            self.lam = nn.Parameter(torch.tensor(0.5))

    def forward(self, x: torch.Tensor) -> tuple:
        if self.kind == "token":
            g = self.gate(x)
            return g, 1.0 - g
        if self.kind in ("scalar", "head"):
            return self.mix_self, self.mix_history
        if self.kind == "tied":
            return 1.0 - self.lam, self.lam
        return self.initial


class LayerOutputs:
    """What each layer leaves for later layers during one forward pass, indexed by 0-based layer."""

    def __init__(self, n_layer: int):
        blank = lambda: [None] * n_layer  # noqa: E731
        self.raw = {"q": blank(), "k": blank(), "v": blank()}  # projections of the new tokens, before mixing
        self.q = blank()  # post-RoPE queries of the new tokens
        self.keys = blank()  # every post-RoPE key attended with (cache included)
        self.values = blank()  # every value attended with (cache included)
        self.new_values = blank()  # V'_n of the new tokens (NeuTRENO's and XSA's term)
        self.value_rows = {}  # value-embedding table key -> its rows of the new tokens
        self.streams = blank()  # h_j, the residual stream handed to block j+1 (dense value connections)


class Attention(nn.Module):
    def __init__(self, config: ResFormerConfig, layer: int):
        super().__init__()
        self.config, self.layer = config, layer
        d, kv_dim = config.d_model, config.n_kv_head * config.head_dim
        self.own = {p: config.producer(layer, p) == layer for p in "qkv"}
        # SkipV1Former: layers n >= 2 compute only the first half of their value heads.
        self.skip_v1 = config.share["skip_v1"] and layer > 0
        self.v_heads = config.n_kv_head // 2 if self.skip_v1 else config.n_kv_head
        # A layer that reuses another layer's projection has no weight for it (SVFormer: no W_V, Eq. 10).
        self.wq = nn.Linear(d, d, bias=False) if self.own["q"] else None
        self.wk = nn.Linear(d, kv_dim, bias=False) if self.own["k"] else None
        self.wv = nn.Linear(d, self.v_heads * config.head_dim, bias=False) if self.own["v"] else None
        self.wo = nn.Linear(d, d, bias=False)
        r = config.residual
        self.residual_target = r["target"] if layer in config.residual_layers() else None
        self.mapping = r["mapping"] if self.residual_target else "attention"
        self.sources = config.residual_sources(layer) if self.residual_target else []
        if self.residual_target and self.mapping != "cross_attention":
            self.mix = ResidualMix(config, layer, config.n_head if r["target"] == "q" else config.n_kv_head)
        self.neutreno = config.neutreno_lambda if layer > 0 else 0.0
        adds_embedding = layer in config.value_embed_layers()
        self.ve_mix = ValueEmbedMix(config, config.n_kv_head) if adds_embedding else None
        self.ve_table = config.value_embed_table(layer) if adds_embedding else None
        gated = layer in config.attn_gate_layers()
        self.out_gate = OutputGate(d, config.n_head, config.head_dim, config.attn_gate["per"]) if gated else None
        self.xsa = ExclusiveSelfAttention(config, config.n_head) if layer in config.xsa_layers() else None
        self.sat_gate = FirstValueGate(d, config.n_kv_head) if layer in config.satformer_layers() else None
        self.dense_value = DenseValue(config, layer) if layer in config.dense_value_layers() else None

    def forward(self, x, rope, outputs: LayerOutputs, cache: ResFormerCache | None, offset: int, padding,
                norm: nn.Module | None = None):
        cfg, i = self.config, self.layer
        proj = {"q": (self.wq, cfg.n_head), "k": (self.wk, cfg.n_kv_head), "v": (self.wv, self.v_heads)}
        inputs = dict.fromkeys("qkv", x)
        if self.dense_value is not None:
            dense = self.dense_value(outputs.streams[:i + 1])  # Σ_j μ_j(h_{n-1}) h_j
            if self.dense_value.into == "input":
                # MUDDFormer's V stream: V_n = W_V RMSNorm_n(h_{n-1} + Σ_j μ_j h_j), the block's attention norm.
                inputs["v"] = norm(outputs.streams[i] + dense)
        new = {p: split_heads(w(inputs[p]), heads) for p, (w, heads) in proj.items() if self.own[p]}
        if self.dense_value is not None and self.dense_value.into == "value":
            # modded-nanogpt's last layer: V_n = W_V x + Σ_j μ_j h_j, hidden states added in value space.
            new["v"] = new["v"] + split_heads(dense, cfg.n_kv_head)
        for p, t in new.items():
            outputs.raw[p][i] = t

        history, identity_weight = None, None
        if self.residual_target:
            t = self.residual_target
            # R_n: the source layers' raw projections (first: X_1, previous: X_{n-1}, all: their mean).
            sources = [outputs.raw[t][j] for j in self.sources]
            history = sources[0] if len(sources) == 1 else torch.stack(sources).mean(0)
            if self.mapping != "cross_attention":
                a, l = self.mix(x)
                if self.mapping == "attention":
                    # Eq. 7 (ResFormer, a = l = 1/2), Fig. 8 (a = 1, l = λ), Eq. 5 (uniform), Fig. 9 (Q or K):
                    # X'_n = a X_n + l R_n, mixed before RoPE and before the cache write.
                    new[t] = a * new[t] + l * history
                else:
                    # Eq. 6 (identity mapping): U_n = A_n (a V_n) + l R_n; the l R_n term is added after attention.
                    new[t] = a * new[t]
                    identity_weight = l
        if self.sat_gate is not None:
            # SATFormer: V'_n = V_n + relu(W_α h_n) V_1, V_1 layer 1's raw projection.
            new["v"] = self.sat_gate(x, new["v"], outputs.raw["v"][0])
        if self.ve_mix is not None:
            # Value embeddings: added after the residual's mixing, before the cache write.
            new["v"] = self.ve_mix(x, new["v"], outputs.value_rows[self.ve_table])

        if self.own["q"]:
            outputs.q[i] = apply_rope(new["q"], rope)
        q = outputs.q[cfg.producer(i, "q")]
        if self.own["k"] or self.own["v"]:
            k_new = apply_rope(new["k"], rope) if self.own["k"] else None
            v_new = new.get("v")
            k_all, v_all = cache.update(k_new, v_new, i) if cache is not None else (k_new, v_new)
            if self.own["k"]:
                outputs.keys[i] = k_all
            if self.own["v"]:
                if self.skip_v1:
                    # SkipV1Former: V_n = [own heads 1..H/2 ; V_1's heads H/2+1..H]; only the own half is cached.
                    half = cfg.n_kv_head // 2
                    v_new = torch.cat([v_new, outputs.new_values[0][:, half:]], dim=1)
                    v_all = torch.cat([v_all, outputs.values[0][:, half:]], dim=1)
                outputs.values[i], outputs.new_values[i] = v_all, v_new
        k, v = outputs.keys[cfg.producer(i, "k")], outputs.values[cfg.producer(i, "v")]

        blocks = 1
        if self.mapping == "cross_attention":
            # Eq. 2: U_n = softmax(Q_n [K_n; K_m]^T / sqrt(d)) [V_n; V_m], causal in every block.
            k = torch.cat([k, *(outputs.keys[m] for m in self.sources)], dim=2)
            v = torch.cat([v, *(outputs.values[m] for m in self.sources)], dim=2)
            blocks += len(self.sources)
        u = attend(q, k, v, offset, blocks, padding)

        if identity_weight is not None:
            u = u + repeat_heads(identity_weight * history, cfg.n_head)
        v_used = outputs.new_values[cfg.producer(i, "v")]  # the values of the new tokens this layer attended with
        if self.neutreno:
            # NeuTRENO (Appendix A.3): U_n <- U_n + mu (V_1 - V'_n), in head space, KV heads repeated for GQA.
            u = u + self.neutreno * repeat_heads(outputs.new_values[0] - v_used, cfg.n_head)
        if self.xsa is not None:
            # XSA: U <- U - tanh(α) (U·v / ‖v‖²) v, v each token's own value.
            u = self.xsa(x, u, repeat_heads(v_used, cfg.n_head))
        if self.out_gate is not None:
            # Gated attention: Y' = Y ⊙ σ(X W_θ), last before W_O.
            u = u * self.out_gate(x)
        b, _, t, _ = u.shape
        return self.wo(u.transpose(1, 2).reshape(b, t, cfg.d_model))


# ---------------------------------------------------------------------------------------------- blocks
class SwiGLU(nn.Module):
    def __init__(self, d_model: int, ffn_dim: int):
        super().__init__()
        self.w_gate = nn.Linear(d_model, ffn_dim, bias=False)
        self.w_up = nn.Linear(d_model, ffn_dim, bias=False)
        self.w_down = nn.Linear(ffn_dim, d_model, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, config: ResFormerConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.keeps_stream = bool(config.dense_value_layers())  # later layers' dense value connections read h_layer
        self.attn_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.attn = Attention(config, layer)
        self.mlp_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.mlp = SwiGLU(config.d_model, config.ffn_dim)

    def forward(self, x, rope, outputs, cache, offset, padding):
        if self.keeps_stream:
            outputs.streams[self.layer] = x  # h_{n-1}, the stream handed to block n
        x = x + self.attn(self.attn_norm(x), rope, outputs, cache, offset, padding, self.attn_norm)
        return x + self.mlp(self.mlp_norm(x))


class DepthWeightedAverage(nn.Module):
    """DenseFormer: the stream after block i is X_i = sum_j alpha_ij B_j over raw block outputs (B_0 = embeddings).

    Only every `dilation`-th output counting back from block i takes part; alpha starts at the identity.
    """

    def __init__(self, block: int, dilation: int):
        super().__init__()
        self.inputs = list(range(block % dilation, block + 1, dilation))
        alpha = torch.zeros(len(self.inputs))
        alpha[-1] = 1.0
        self.alpha = nn.Parameter(alpha)

    def forward(self, raw_outputs: list[torch.Tensor]) -> torch.Tensor:
        return sum(w * raw_outputs[j] for w, j in zip(self.alpha, self.inputs, strict=True))


# ---------------------------------------------------------------------------------------------- the model
class ResFormerForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = ResFormerConfig
    base_model_prefix = "resformer"
    _no_split_modules = ["Block"]

    def __init__(self, config: ResFormerConfig):
        super().__init__(config)
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # Value-embedding tables, keyed 'shared' or by 1-based layer number.
        self.value_embeds = nn.ModuleDict({
            key: nn.Embedding(config.vocab_size, config.n_kv_head * config.head_dim)
            for key in sorted({config.value_embed_table(i) for i in config.value_embed_layers()})})
        dwa = config.dwa
        # dwa[b] follows block b (1-based); every `period`-th block has one.
        self.dwa = nn.ModuleDict({str(b): DepthWeightedAverage(b, dwa["dilation"])
                                  for b in range(1, config.n_layer + 1) if dwa["enabled"] and b % dwa["period"] == 0})
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """The training code's initialisation (used for weights a folder does not hold)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.init_std)
        elif isinstance(module, nn.RMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, TokenGate):  # g = 1/2; a low-rank W_up starts random, as the training code's
            for name, p in module.named_parameters(recurse=False):
                if name == "up":
                    nn.init.normal_(p, mean=0.0, std=self.config.init_std)
                else:
                    nn.init.zeros_(p)
        elif isinstance(module, ValueEmbedMix):
            nn.init.zeros_(module.gate)
            if module.lam is not None:
                nn.init.constant_(module.lam, 0.5)
        elif isinstance(module, ResidualMix) and module.kind in ("scalar", "head"):
            nn.init.constant_(module.mix_self, module.initial[0])
            nn.init.constant_(module.mix_history, module.initial[1])
        elif isinstance(module, ResidualMix) and module.kind == "tied":
            nn.init.constant_(module.lam, 0.5)
        elif isinstance(module, (OutputGate, FirstValueGate)):  # random, as the references' projections
            nn.init.normal_(module.weight, mean=0.0, std=self.config.init_std)
        elif isinstance(module, ExclusiveSelfAttention):  # α = 0: tanh(α) = 0
            for p in module.parameters(recurse=False):
                nn.init.zeros_(p)
        elif isinstance(module, DenseValue):  # μ = 0: W_2 starts at zero
            nn.init.normal_(module.w1, mean=0.0, std=self.config.init_std)
            nn.init.zeros_(module.w2)
        elif isinstance(module, DepthWeightedAverage):
            nn.init.zeros_(module.alpha)
            nn.init.ones_(module.alpha[-1:])

    def get_input_embeddings(self) -> nn.Embedding:
        return self.tok_emb

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.tok_emb = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        # generate() would build a DynamicCache with K and V for every layer; this model keeps only what each
        # layer produces. Other cache implementations are left to transformers (and refused by forward).
        # This hook is internal to transformers, yet no public API lets a model choose the cache generate() builds;
        # its signature is the same in 5.23 and 5.24 (the export tests generate through it under both).
        wants_default = generation_config.use_cache is not False and generation_config.cache_implementation in (
            None, "dynamic")
        if wants_default and model_kwargs.get(CACHE_NAME) is None:
            model_kwargs[CACHE_NAME] = ResFormerCache(self.config)
            return
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)

    def forward(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.LongTensor | None = None, cache: ResFormerCache | None = None,
                use_cache: bool | None = None, labels: torch.LongTensor | None = None, logits_to_keep: int = 0,
                past_key_values: ResFormerCache | None = None, **kwargs) -> CausalLMOutputWithPast:
        """input_ids [B, T] (the tokens after the cached ones) -> logits [B, T, vocab].

        attention_mask [B, cached + T] marks real tokens with 1 (left padding for batched generation);
        position_ids default to the count of real tokens before each position. The cache is taken as `cache` or,
        as transformers called it before 5.24, `past_key_values`, and returned in the output field of the
        installed transformers' name.
        """
        if past_key_values is not None:
            if cache is not None:
                raise ValueError("pass the cache as `cache` or as `past_key_values` (its name before transformers "
                                 "5.24), not both")
            cache = past_key_values
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if cache is None and use_cache:
            cache = ResFormerCache(self.config)
        if cache is not None and not isinstance(cache, ResFormerCache):
            raise TypeError(f"the cache is a {type(cache).__name__}; this model keeps only the K/V each layer "
                            f"produces: pass ResFormerCache(model.config) or None")
        offset = cache.get_seq_length() if cache is not None else 0
        t = input_ids.shape[1]
        padding = None if attention_mask is None or bool(attention_mask.all()) else attention_mask.bool()
        if position_ids is None:
            if padding is None:
                position_ids = torch.arange(offset, offset + t, device=input_ids.device)[None]
            else:
                position_ids = (padding.long().cumsum(-1) - 1).clamp(min=0)[:, offset:offset + t]
        rope = rope_tables(self.config, position_ids, self.lm_head.weight.dtype)

        outputs = LayerOutputs(self.config.n_layer)
        outputs.value_rows = {key: table(input_ids) for key, table in self.value_embeds.items()}
        x = self.tok_emb(input_ids)
        raw_outputs = [x]  # B_0..B_i, kept only for DenseFormer
        for b, block in enumerate(self.blocks, start=1):
            x = block(x, rope, outputs, cache, offset, padding)
            if self.dwa:
                raw_outputs.append(x)
                if str(b) in self.dwa:
                    x = self.dwa[str(b)](raw_outputs)
        logits = self.lm_head(self.norm(x[:, -logits_to_keep:]))

        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_NAME: cache if use_cache else None})
