"""The Llama-like decoder and every attention variant of the paper, in one file.

Notation (paper §3): layer n (1-based) projects its normed input into Q_n, K_n, V_n;
A_n = softmax(Q_n K_n^T / sqrt(d) + causal mask); U_n = A_n V_n is the attention output before W_O.
In code layers are 0-based (`i = n - 1`). What a layer leaves for later layers during one forward pass
(raw projections for residuals, full keys/values for sharing and cross-layer attention) lives in a
`_Stash`, so the decoder stays a plain loop over blocks. History terms read the source layers' raw
projections (W_V x before that layer's own mixing), so `source: previous` is V_{n-1} as layer n-1 projected it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .cache import KVCache
from .config import ModelConfig
from .decoding import GraphedDecodeStep
from .kernels import attention
from .loss import next_token_loss


class Trace:
    """Receives per-layer internals during a forward pass (analysis). Override what you need.

    Passing a trace routes attention through the explicit kernel so A_n is materialised, one layer at
    a time: a subclass that reduces `probs` on the fly keeps memory bounded for long sequences.
    """

    want_attention = False

    def on_qkv(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Post-RoPE queries [B,H,T,d] and the full keys/values [B,Hkv,S,d] the layer attends with."""

    def on_attention(self, layer: int, probs: torch.Tensor) -> None:
        """A_n as [B, H, T, S] (only when `want_attention`)."""

    def on_hidden(self, layer: int, hidden: torch.Tensor) -> None:
        """Residual stream after block `layer` (layer -1 = embeddings), [B, T, D]."""


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """RoPE with the half-split layout that Llama uses (theta 10000)."""

    def __init__(self, head_dim: int, max_seq_len: int, theta: float):
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("cos", torch.empty(max_seq_len, head_dim, dtype=torch.float32), persistent=False)
        self.register_buffer("sin", torch.empty(max_seq_len, head_dim, dtype=torch.float32), persistent=False)
        self.fill_tables()

    @torch.no_grad()
    def fill_tables(self) -> None:
        """cos and sin of every position's angles. Computed, never saved: a loader that builds the model on the meta
        device (transformers' from_pretrained) calls this once the buffers are real."""
        inv_freq = 1.0 / self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        angles = torch.outer(torch.arange(self.cos.shape[0], dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.cos.copy_(angles.cos())
        self.sin.copy_(angles.sin())

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor) -> torch.Tensor:
        t = x.shape[-2]
        if isinstance(offset, torch.Tensor):  # static decoding: the position lives on the device
            positions = offset + torch.arange(t, device=x.device)
            cos, sin = self.cos[positions], self.sin[positions]
        else:
            cos, sin = self.cos[offset:offset + t], self.sin[offset:offset + t]
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        return x * cos + _rotate_half(x) * sin


class TokenGate(nn.Module):
    """g = sigmoid(W x + b) from the token's normed hidden state x: one gate per head, or one per channel.

    W is full (`weight`) or low-rank W_up W_down (`up`, `down`), as RWKV-7's LoRA gate. W (W_down when low-rank)
    and b start at zero, so g starts at 1/2 (the ResFormer mix). W_up starts random: with both factors at zero
    neither would ever receive a gradient.
    """

    def __init__(self, d_model: int, heads: int, head_dim: int, per: str = "head", rank: int | None = None,
                 bias: bool = False, init_std: float = 0.02):
        super().__init__()
        self.heads, self.low_rank = heads, rank is not None
        outputs = heads if per == "head" else heads * head_dim
        if rank is None:
            self.weight = nn.Parameter(torch.zeros(outputs, d_model))
        else:
            self.down = nn.Parameter(torch.zeros(rank, d_model))
            self.up = nn.Parameter(torch.randn(outputs, rank) * init_std)
        self.bias = nn.Parameter(torch.zeros(outputs)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.low_rank:
            logits = F.linear(F.linear(x, self.down), self.up, self.bias)
        else:
            logits = F.linear(x, self.weight, self.bias)
        b, t, _ = logits.shape
        return torch.sigmoid(logits).view(b, t, self.heads, -1).transpose(1, 2)  # [B, heads, T, 1 or head_dim]


def _initial_weights(config: ModelConfig, layer: int) -> tuple[float, float]:
    """(a, l) of layer `layer` (0-based) from residual.self_weight and residual.lam."""
    r, n = config.residual, layer + 1
    # Eq. 5: with every earlier layer as the source, a = 1/n and l = (n-1)/n average V_1..V_n uniformly.
    return (1.0 / n, (n - 1) / n) if r.self_weight == "uniform" else (float(r.self_weight), float(r.lam))


# The residual's weights (a, l) of X'_n = a X_n + l R_n for one layer, one module per residual.learnable kind
# (RESIDUAL_MIXES). Each is built as (config, layer, heads), `heads` the heads of the mixed projection; its forward
# takes the layer's normed input x and returns (a, l), numbers or tensors that broadcast over [B, heads, T, d]; its
# `logged()` returns what a training step logs of its weights, by name, detached and on the device.
class FixedMix(nn.Module):
    """learnable 'none': a and l are numbers (Eq. 7: a = l = 1/2; Fig. 8: a = 1, l = λ; Eq. 5: uniform)."""

    def __init__(self, config: ModelConfig, layer: int, heads: int):
        super().__init__()
        self.fixed = _initial_weights(config, layer)

    def forward(self, x: torch.Tensor) -> tuple:
        return self.fixed

    def logged(self) -> dict[str, torch.Tensor]:
        return {}


class LearnedMix(nn.Module):
    """learnable 'scalar' (a, l per layer) or 'head' (per head), starting at self_weight and lam."""

    def __init__(self, config: ModelConfig, layer: int, heads: int):
        super().__init__()
        a, l = _initial_weights(config, layer)
        shape = (1, heads, 1, 1) if config.residual.learnable == "head" else ()
        self.mix_self = nn.Parameter(torch.full(shape, a))
        self.mix_history = nn.Parameter(torch.full(shape, l))

    def forward(self, x: torch.Tensor) -> tuple:
        return self.mix_self, self.mix_history

    def logged(self) -> dict[str, torch.Tensor]:  # heads averaged
        return {"self": self.mix_self.detach().mean(), "history": self.mix_history.detach().mean()}


class GatedMix(nn.Module):
    """learnable 'token': (g, 1 - g) from a sigmoid gate g on the token's normed hidden state (TokenGate)."""

    def __init__(self, config: ModelConfig, layer: int, heads: int):
        super().__init__()
        r = config.residual
        self.gate = TokenGate(config.d_model, heads, config.head_dim, r.gate_per, r.gate_rank, r.gate_bias,
                              config.init_std)

    def forward(self, x: torch.Tensor) -> tuple:
        g = self.gate(x)
        return g, 1.0 - g

    def logged(self) -> dict[str, torch.Tensor]:  # the norm of all the gate's parameters (W, or W_up and W_down, b)
        return {"gate_weight_norm": torch.linalg.vector_norm(torch.cat([p.detach().flatten()
                                                                        for p in self.gate.parameters()]))}


class TiedMix(nn.Module):
    """learnable 'tied': modded-nanogpt's value residual, V' = (1 - λ) V_n + λ R_n, one λ per layer from 1/2."""

    def __init__(self, config: ModelConfig, layer: int, heads: int):
        super().__init__()
        self.lam = nn.Parameter(torch.tensor(_initial_weights(config, layer)[1]))

    def forward(self, x: torch.Tensor) -> tuple:
        return 1.0 - self.lam, self.lam

    def logged(self) -> dict[str, torch.Tensor]:
        return {"lambda": self.lam.detach()}


# residual.learnable -> its module (config.py's Learnable lists the kinds).
RESIDUAL_MIXES: dict[str, type[nn.Module]] = {
    "none": FixedMix, "scalar": LearnedMix, "head": LearnedMix, "token": GatedMix, "tied": TiedMix,
}


class ValueEmbedMix(nn.Module):
    """V'_n = w V_n + gate_scale * sigmoid(W_g u) * VE[token] for one layer, one gate per KV head (ValueEmbedConfig).

    u = x[:gate_width] (nanochat, nanochat/gpt.py: `3 * sigmoid(ve_gate(x[..., :12]))`), or with
    `gate_reads_table` [x[:gate_width]; VE[token][:gate_width]] (modded-nanogpt, train_gpt.py: `2 * sigmoid(
    F.linear(cat([x[..., :6], ve[..., :6]]), ve_gate))`). w = 1, or a learned λ from 1/2 (modded-nanogpt's
    `sa_lambdas[0]`). W_g starts at zero, as modded-nanogpt's `ve_gate_bank`: the gate starts at gate_scale / 2.
    """

    def __init__(self, config: ModelConfig, heads: int):
        super().__init__()
        ve = config.value_embed
        self.width, self.reads_table, self.scale = ve.gate_width, ve.gate_reads_table, float(ve.gate_scale)
        self.gate = nn.Parameter(torch.zeros(heads, self.width * (2 if self.reads_table else 1)))
        self.lam = nn.Parameter(torch.tensor(0.5)) if ve.value_weight == "learnable" else None

    def forward(self, x: torch.Tensor, v: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """x [B, T, D] the normed layer input, v [B, Hkv, T, d], rows [B, T, Hkv * d] the table rows of the tokens."""
        u = x[..., :self.width]
        if self.reads_table:
            u = torch.cat([u, rows[..., :self.width]], dim=-1)
        g = self.scale * torch.sigmoid(F.linear(u, self.gate))  # [B, T, Hkv]
        weighted = v if self.lam is None else self.lam * v
        return weighted + g.transpose(1, 2).unsqueeze(-1) * _heads(rows, v.shape[1])

    def logged(self) -> dict[str, torch.Tensor]:
        lam = {} if self.lam is None else {"value_lambda": self.lam.detach()}
        return {"value_embed_gate_norm": self.gate.detach().norm(), **lam}


class OutputGate(nn.Module):
    """Gated attention (Qiu et al. 2025, arXiv 2505.06708: Y' = Y ⊙ σ(X W_θ) at gate position G1, after SDPA):
    σ(X W_θ) from the layer's normed input X, one gate per head (`head`) or per channel (`element`).

    W_θ starts random (init_std) as in the reference, where it is extra output rows of q_proj, so σ ≈ 1/2 at init.
    """

    def __init__(self, d_model: int, heads: int, head_dim: int, per: str, init_std: float):
        super().__init__()
        self.heads = heads
        self.weight = nn.Parameter(torch.randn(heads if per == "head" else heads * head_dim, d_model) * init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return torch.sigmoid(F.linear(x, self.weight)).view(b, t, self.heads, -1).transpose(1, 2)  # [B, H, T, 1 or d]

    def logged(self) -> dict[str, torch.Tensor]:
        return {"attn_gate_weight_norm": self.weight.detach().norm()}


class ExclusiveSelfAttention(nn.Module):
    """Gated XSA (modded-nanogpt train_gpt.py, `CausalSelfAttention.forward`): U <- U - tanh(α) (U·v / ‖v‖²) v per
    token and head, v the token's own value. α per layer, per head, or per token and head (α = W x); α (W) starts
    at zero, where tanh(α) = 0 and the layer is vanilla."""

    def __init__(self, config: ModelConfig, heads: int):
        super().__init__()
        self.per = config.xsa.per
        if self.per == "token":
            self.weight = nn.Parameter(torch.zeros(heads, config.d_model))
        else:
            self.alpha = nn.Parameter(torch.zeros(heads if self.per == "head" else ()))

    def forward(self, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """x [B, T, D] the normed layer input, u [B, H, T, d] the attention output, v [B, H, T, d] the own values."""
        if self.per == "token":
            alpha = F.linear(x, self.weight).transpose(1, 2).unsqueeze(-1)  # [B, H, T, 1]
        else:
            alpha = self.alpha.view(-1, 1, 1) if self.per == "head" else self.alpha
        # (U·v / ‖v‖²) v is U's component along v; the clamp (modded-nanogpt's 1e-8) keeps v = 0 harmless.
        along = (u * v).sum(-1, keepdim=True) / v.square().sum(-1, keepdim=True).clamp_min(1e-8)
        return u - torch.tanh(alpha) * along * v

    def logged(self) -> dict[str, torch.Tensor]:  # α (per layer, or per head averaged), or the norm of the per-token W
        if self.per == "token":
            return {"xsa_weight_norm": self.weight.detach().norm()}
        return {"xsa_alpha": self.alpha.detach().mean()}


class FirstValueGate(nn.Module):
    """SATFormer (arXiv 2605.03953; SkyeGunasekaran/SATFormer, models/satformer/attn_satformer.py,
    `ValueResidualMixing`): V'_n = V_n + relu(W_α h_n) · V_1, one gate per KV head and token.

    W_α starts random (init_std) as the reference's nn.Linear: relu has no gradient at 0, so a zero W_α would never
    learn. W_α = 0 is the vanilla model exactly.
    """

    def __init__(self, d_model: int, heads: int, init_std: float):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(heads, d_model) * init_std)

    def forward(self, x: torch.Tensor, v: torch.Tensor, v1: torch.Tensor) -> torch.Tensor:
        """x [B, T, D] the normed layer input h_n; v, v1 [B, Hkv, T, d]."""
        return v + F.relu(F.linear(x, self.weight)).transpose(1, 2).unsqueeze(-1) * v1

    def logged(self) -> dict[str, torch.Tensor]:
        return {"satformer_gate_norm": self.weight.detach().norm()}


class DenseValue(nn.Module):
    """Dense value connections of one layer n (DenseValueConfig): Σ_j μ_j h_j over earlier hidden states h_j, with
    μ = W_2 GELU(W_1 RMSNorm(h_{n-1})) per token (MUDDFormer arXiv 2502.12170, its code's `MultiwayDynamicDenseBlock`: an
    RMSNorm without scale, then a GELU MLP; modded-nanogpt `forward_mudd`). W_2 starts at zero: μ = 0, vanilla."""

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        dv = config.dense_value
        self.sources, self.into, self.eps = config.dense_value_sources(layer), dv.into, config.norm_eps
        self.w1 = nn.Parameter(torch.randn(dv.hidden, config.d_model) * config.init_std)
        self.w2 = nn.Parameter(torch.zeros(len(self.sources), dv.hidden))

    def forward(self, streams: list[torch.Tensor]) -> torch.Tensor:
        """streams h_0..h_{n-1}, each [B, T, D] -> Σ_j μ_j(h_{n-1}) h_j, [B, T, D]."""
        h = streams[-1]
        mu = F.linear(F.gelu(F.linear(F.rms_norm(h, (h.shape[-1],), eps=self.eps), self.w1)), self.w2)  # [B, T, S]
        return sum(mu[..., s, None] * streams[j] for s, j in enumerate(self.sources))

    def logged(self) -> dict[str, torch.Tensor]:  # the μ network's output weights W_2 (zero: the vanilla layer)
        return {"dense_value_mu_norm": self.w2.detach().norm()}


@dataclass
class _Stash:
    """What each layer leaves behind in one forward pass, indexed by 0-based layer."""

    raw: dict[str, list] = field(default_factory=dict)  # q/k/v projections of the new tokens, before mixing
    q: list = field(default_factory=list)  # post-RoPE queries of the new tokens
    keys: list = field(default_factory=list)  # full post-RoPE keys attended with (cache included)
    values: list = field(default_factory=list)  # full values attended with (cache included)
    new_values: list = field(default_factory=list)  # V'_n of the new tokens (NeuTRENO's term)
    value_rows: dict = field(default_factory=dict)  # value-embedding table key -> its rows of the new tokens
    streams: list = field(default_factory=list)  # h_j: the residual stream handed to block j+1 (dense value only)
    padding: torch.Tensor | None = None  # [B, cached + T], True on real tokens: left-padded rows only

    @classmethod
    def empty(cls, n_layer: int) -> _Stash:
        blank = lambda: [None] * n_layer  # noqa: E731
        return cls({"q": blank(), "k": blank(), "v": blank()}, blank(), blank(), blank(), blank(), streams=blank())


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    b, t, _ = x.shape
    return x.view(b, t, heads, -1).transpose(1, 2)  # [B, heads, T, d]


def _repeat_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x if x.shape[1] == heads else x.repeat_interleave(heads // x.shape[1], dim=1)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.config, self.layer = config, layer
        d, h, hk = config.d_model, config.n_head, config.n_kv_head
        self.own = {p: config.producer(layer, p) == layer for p in "qkv"}
        # SkipV1Former: layers n >= 2 compute only half their value heads (ShareConfig.skip_v1).
        self.skip_v1 = config.share.skip_v1 and layer > 0
        self.v_heads = hk // 2 if self.skip_v1 else hk
        # Layers that reuse another layer's projection have no weight for it (SVFormer: no W_V, Eq. 10).
        self.wq = nn.Linear(d, d, bias=False) if self.own["q"] else None
        self.wk = nn.Linear(d, config.kv_dim, bias=False) if self.own["k"] else None
        self.wv = nn.Linear(d, self.v_heads * config.head_dim, bias=False) if self.own["v"] else None
        self.wo = nn.Linear(d, d, bias=False)
        r = config.residual
        self.residual_target = r.target if layer in config.residual_layers() else None
        self.mapping = r.mapping if self.residual_target else "attention"
        self.sources = config.residual_sources(layer) if self.residual_target else []
        mixes = self.residual_target is not None and self.mapping != "cross_attention"
        self.mix = RESIDUAL_MIXES[r.learnable](config, layer, h if r.target == "q" else hk) if mixes else None
        # μ is read as a number, so that a stack of runs (lit_resformer.stacking) can hand each run its own; the
        # branch exists where μ is set
        self.neutreno = config.neutreno_lambda if layer > 0 and config.neutreno_lambda else None
        adds_embedding = layer in config.value_embed_layers()
        self.ve_mix = ValueEmbedMix(config, hk) if adds_embedding else None
        self.ve_table = config.value_embed_table(layer) if adds_embedding else None
        # The field's other answers to attention concentration (one module each, None where the layer has none).
        gated = layer in config.attn_gate_layers()
        self.out_gate = OutputGate(d, h, config.head_dim, config.attn_gate.per, config.init_std) if gated else None
        self.xsa = ExclusiveSelfAttention(config, h) if layer in config.xsa_layers() else None
        self.sat_gate = FirstValueGate(d, hk, config.init_std) if layer in config.satformer_layers() else None
        self.dense_value = DenseValue(config, layer) if layer in config.dense_value_layers() else None

    def forward(self, x, rope: Rotary, stash: _Stash, cache: KVCache | None, trace: Trace | None,
                norm: nn.Module | None = None):
        """x [B, T, D] the normed layer input; `norm` the block's attention norm (dense value connections into the
        value input normalise their mixed stream with it)."""
        cfg, i = self.config, self.layer
        offset = cache.pos if cache is not None else 0
        proj = {"q": (self.wq, cfg.n_head), "k": (self.wk, cfg.n_kv_head), "v": (self.wv, self.v_heads)}
        inputs = dict.fromkeys("qkv", x)
        if self.dense_value is not None:
            dense = self.dense_value(stash.streams[:i + 1])  # Σ_j μ_j(h_{n-1}) h_j
            if self.dense_value.into == "input":
                # MUDDFormer's V stream (arXiv 2502.12170): V_n = W_V RMSNorm_n(h_{n-1} + Σ_j μ_j h_j).
                inputs["v"] = norm(stash.streams[i] + dense)
        new = {p: _heads(w(inputs[p]), heads) for p, (w, heads) in proj.items() if self.own[p]}
        if self.dense_value is not None and self.dense_value.into == "value":
            # modded-nanogpt's last layer (train_gpt.py, `v_mudd` as `aux_v`): V_n = W_V x + Σ_j μ_j h_j.
            new["v"] = new["v"] + _heads(dense, cfg.n_kv_head)
        for p, t in new.items():
            stash.raw[p][i] = t

        history = None
        identity_weight = None
        if self.residual_target:
            t = self.residual_target
            # R_n: the history term from the source layers' raw projections (first / previous / mean of all).
            sources = [stash.raw[t][j] for j in self.sources]
            history = sources[0] if len(sources) == 1 else torch.stack(sources).mean(0)
            if self.mapping != "cross_attention":
                a, l = self.mix(x)
                if self.mapping == "attention":
                    # Eq. 7 (ResFormer, a = l = 1/2), Fig. 8 (a = 1, l = λ), Eq. 5 (uniform), Fig. 9 (q/k):
                    # V'_n = a V_n + l R_n, mixed before RoPE and before the cache write.
                    new[t] = a * new[t] + l * history
                else:
                    # Eq. 6 (identity mapping): U_n = A_n (a V_n) + l R_n; the l R_n term is added below.
                    new[t] = a * new[t]
                    identity_weight = l
        if self.sat_gate is not None:
            # SATFormer (arXiv 2605.03953): V'_n = V_n + relu(W_α h_n) V_1, V_1 layer 1's raw projection.
            new["v"] = self.sat_gate(x, new["v"], stash.raw["v"][0])
        if self.ve_mix is not None:
            # Value embeddings, after the residual's mixing and before the cache write.
            new["v"] = self.ve_mix(x, new["v"], stash.value_rows[self.ve_table])

        if self.own["q"]:
            q = rope(new["q"], offset)
            stash.q[i] = q
        else:
            q = stash.q[cfg.producer(i, "q")]
        if self.own["k"]:
            k_new = rope(new["k"], offset)
            stash.keys[i] = cache.write(cache.keys, i, k_new) if cache is not None else k_new
        if self.own["v"]:
            v_new = new["v"]
            v_all = cache.write(cache.values, i, v_new) if cache is not None else v_new
            if self.skip_v1:
                # SkipV1Former (arXiv 2510.16807): V_n = [own heads 1..H/2 ; V_1's heads H/2+1..H]. Only the own
                # half is cached above; layer 1's half is read from its values (cache included).
                half = cfg.n_kv_head // 2
                v_new = torch.cat([v_new, stash.new_values[0][:, half:]], dim=1)
                v_all = torch.cat([v_all, stash.values[0][:, half:]], dim=1)
            stash.new_values[i], stash.values[i] = v_new, v_all
        k, v = stash.keys[cfg.producer(i, "k")], stash.values[cfg.producer(i, "v")]

        blocks = 1
        if self.mapping == "cross_attention":
            # Eq. 2: U_n = softmax(Q_n [K_n; K_m]^T / sqrt(d)) [V_n; V_m], causal in every block. Eq. 3 splits
            # this softmax into two row-weighted blocks; Eq. 4 approximates it by 1/2 A_n (V_n + V_m), ResFormer.
            k = torch.cat([k, *(stash.keys[m] for m in self.sources)], dim=2)
            v = torch.cat([v, *(stash.values[m] for m in self.sources)], dim=2)
            blocks += len(self.sources)
        if trace is not None:
            trace.on_qkv(i, q, k, v)
        on_probs = (lambda p: trace.on_attention(i, p)) if trace is not None and trace.want_attention else None
        u = attention(q, k, v, offset=offset, key_blocks=blocks, impl=cfg.attn_impl, on_probs=on_probs,
                      padding=stash.padding)

        if identity_weight is not None:
            u = u + _repeat_heads(identity_weight * history, cfg.n_head)
        v_used = stash.new_values[cfg.producer(i, "v")]  # the values of the new tokens this layer attended with
        if self.neutreno is not None:
            # NeuTRENO (Appendix A.3): U_n <- U_n + mu (V_1 - V'_n), in head space, KV heads repeated for GQA.
            u = u + self.neutreno * _repeat_heads(stash.new_values[0] - v_used, cfg.n_head)
        if self.xsa is not None:
            # XSA (modded-nanogpt): U <- U - tanh(α) (U·v / ‖v‖²) v, v each token's own value.
            u = self.xsa(x, u, _repeat_heads(v_used, cfg.n_head))
        if self.out_gate is not None:
            # Gated attention (arXiv 2505.06708): Y' = Y ⊙ σ(X W_θ), last before W_O (position G1).
            u = u * self.out_gate(x)
        b, _, t, _ = u.shape
        return self.wo(u.transpose(1, 2).reshape(b, t, cfg.d_model))

    def logged(self) -> dict[str, torch.Tensor]:
        """What this layer's mixing and gating modules (MIX_MODULES) log of their weights, by name."""
        modules = [getattr(self, name) for name in MIX_MODULES]
        return {key: value for module in modules if module is not None for key, value in module.logged().items()}


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, ffn_dim: int):
        super().__init__()
        self.w_gate = nn.Linear(d_model, ffn_dim, bias=False)
        self.w_up = nn.Linear(d_model, ffn_dim, bias=False)
        self.w_down = nn.Linear(ffn_dim, d_model, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.keeps_stream = config.dense_value.enabled  # later layers' dense value connections read h_layer
        self.attn_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.attn = Attention(config, layer)
        self.mlp_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.mlp = SwiGLU(config.d_model, config.ffn_dim)

    def forward(self, x, rope, stash, cache, trace):
        if self.keeps_stream:
            stash.streams[self.layer] = x  # h_{n-1}, the stream handed to block n
        x = x + self.attn(self.attn_norm(x), rope, stash, cache, trace, self.attn_norm)
        return x + self.mlp(self.mlp_norm(x))


class DepthWeightedAverage(nn.Module):
    """DenseFormer's DWA after block i: X_i = sum_j alpha_ij B_j over the raw block outputs B_j (B_0 = embeddings)
    with j <= i and j = i (mod dilation), as epfml/DenseFormer's `DWAModules`; alpha starts at the identity."""

    def __init__(self, block: int, dilation: int):
        super().__init__()
        self.inputs = list(range(block % dilation, block + 1, dilation))
        alpha = torch.zeros(len(self.inputs))
        alpha[-1] = 1.0
        self.alpha = nn.Parameter(alpha)

    def forward(self, raw_outputs: list[torch.Tensor]) -> torch.Tensor:
        return sum(w * raw_outputs[j] for w, j in zip(self.alpha, self.inputs, strict=True))

    def logged(self) -> dict[str, torch.Tensor]:  # the weight of the block's own output
        return {"self": self.alpha[-1].detach()}


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.rope = Rotary(config.head_dim, config.max_seq_len, config.rope_theta)
        # Value-embedding tables, keyed 'shared' or by 1-based layer: vocab_size rows of one value's width.
        self.value_embeds = nn.ModuleDict({
            key: nn.Embedding(config.vocab_size, config.kv_dim)
            for key in sorted({config.value_embed_table(i) for i in config.value_embed_layers()})
        })
        d = config.dwa
        # dwa[b] follows block b (1-based); every `period`-th block gets one.
        self.dwa = nn.ModuleDict({
            str(b): DepthWeightedAverage(b, d.dilation)
            for b in range(1, config.n_layer + 1) if d.enabled and b % d.period == 0
        })
        for module in self.modules():  # the blanket init touches Linear/Embedding only: gates and alphas keep theirs
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=config.init_std)
        # Built and initialised with vocab_size rows (the same weights as an unpadded model of the same seed), then
        # padded with zero rows to padded_vocab_size so the head's matmul has GPU-friendly sizes.
        for module in (self.tok_emb, self.lm_head):
            module.weight = nn.Parameter(_pad_rows(module.weight.detach(), config.padded_vocab_size))
        self.tok_emb.num_embeddings = self.lm_head.out_features = config.padded_vocab_size
        self.register_load_state_dict_pre_hook(_pad_vocab_rows_on_load)

    # ------------------------------------------------------------------ forward
    def forward(self, idx: torch.Tensor, cache: KVCache | None = None, trace: Trace | None = None,
                labels: torch.Tensor | None = None, padding: torch.Tensor | None = None) -> torch.Tensor:
        """idx [B, T] -> logits [B, T, vocab_size]; with `labels` [B, T] the mean next-token loss instead.

        With a cache, idx are the next tokens after cache.pos. The loss goes through `next_token_loss`: chunked
        on a GPU (the logits of the whole batch are never held), plain logits + cross-entropy on the CPU where
        that is faster (ignore_index -100, as `causal_lm_loss`). `padding` [B, cache.pos + T] (1 on real tokens) is
        a batch of left-padded rows, as transformers' attention_mask: no real token attends to a padded one, so each
        row computes what it computes alone (its tokens sit as many positions later, which RoPE, a function of the
        distance between positions, does not see).
        """
        offset = cache.pos if cache is not None else 0
        static = cache is not None and cache.static
        if not static and offset + idx.shape[1] > self.config.max_seq_len:
            raise ValueError(f"sequence of {offset + idx.shape[1]} tokens exceeds max_seq_len={self.config.max_seq_len}")
        stash = _Stash.empty(self.config.n_layer)
        if padding is not None:
            if static:
                raise ValueError("padding needs a cache whose position is a host int (not after make_static())")
            stash.padding = padding.bool()
        stash.value_rows = {key: table(idx) for key, table in self.value_embeds.items()}
        x = self.tok_emb(idx)
        raw_outputs = [x]  # B_0..B_b, kept only for DenseFormer
        if trace is not None:
            trace.on_hidden(-1, x)
        for b, block in enumerate(self.blocks, start=1):
            x = block(x, self.rope, stash, cache, trace)
            if self.dwa:
                x = self._depth_weighted_average(b, x, raw_outputs)
            if trace is not None:
                trace.on_hidden(b - 1, x)
        if cache is not None:
            cache.pos += idx.shape[1]  # in place when the position is a tensor (static decoding)
        x = self.norm(x)
        if labels is not None:
            return next_token_loss(x, self.lm_head.weight, labels, self.config.vocab_size)
        return self.lm_head(x)[..., :self.config.vocab_size]  # padded columns are never seen

    def _depth_weighted_average(self, b: int, output: torch.Tensor, raw_outputs: list[torch.Tensor]) -> torch.Tensor:
        """DenseFormer: store block b's raw output B_b; hand block b+1 its DWA X_b where block b has one, else B_b.
        The average goes only to the next block: later averages still read the raw B_b."""
        raw_outputs.append(output)
        return self.dwa[str(b)](raw_outputs) if str(b) in self.dwa else output

    # ------------------------------------------------------------------ decoding
    def new_cache(self, batch: int, max_seq: int | None = None) -> KVCache:
        p = self.lm_head.weight
        return KVCache(self.config, batch, max_seq or self.config.max_seq_len, device=p.device, dtype=p.dtype)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None,
                 eos_id: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """Greedy (temperature 0) or sampled continuation through the KV cache; returns prompt + new tokens.

        On CUDA the prompt is prefilled eagerly and every further token is one replay of a CUDA graph
        (`GraphedDecodeStep`); elsewhere each token is an eager forward pass over the growing cache.
        """
        cache = self.new_cache(idx.shape[0], idx.shape[1] + max_new_tokens)
        logits = self(idx, cache=cache)[:, -1]
        if max_new_tokens > 1:
            decode = GraphedDecodeStep(self, cache, idx.shape[0]) if idx.is_cuda \
                else (lambda token: self(token, cache=cache)[:, -1])
        tokens = [idx]
        finished = torch.zeros(idx.shape[0], dtype=torch.bool, device=idx.device)
        for step in range(max_new_tokens):
            if temperature == 0.0:
                nxt = logits.argmax(dim=-1)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)
            if eos_id is not None:
                nxt = nxt.masked_fill(finished, eos_id)
                finished |= nxt == eos_id
            tokens.append(nxt[:, None])
            if (eos_id is not None and bool(finished.all())) or step == max_new_tokens - 1:
                break
            logits = decode(nxt[:, None])
        return torch.cat(tokens, dim=1)

    # ------------------------------------------------------------------ accounting
    def mixing_parameters(self) -> list[nn.Parameter]:
        """Learnable residual weights and gates, value-embedding gates and λs, attention-output gates, XSA's α,
        SATFormer's gates, dense value connections' μ networks and DenseFormer alphas: logged every step."""
        return [p for name, p in self.named_parameters() if _in_mix_group(name) or name.startswith("dwa.")]

    def mixing_weights(self) -> dict[str, torch.Tensor]:
        """What the mixing and gating modules and DenseFormer's averages log of their weights (each module's
        `logged()`), as `mix/layer{n}/<name>` (n 1-based) and `dwa/block{b}/<name>`: detached, on the device."""
        values = {f"mix/layer{n}/{key}": value for n, block in enumerate(self.blocks, start=1)
                  for key, value in block.attn.logged().items()}
        values.update({f"dwa/block{b}/{key}": value for b, dwa in self.dwa.items()
                       for key, value in dwa.logged().items()})
        return values

    def param_groups(self, weight_decay: float, decay_embeddings: bool = False,
                     mix_lr: float | None = None) -> list[dict]:
        """AdamW groups: decay on weight matrices (embeddings, value-embedding tables included, optional) and on
        DenseFormer's alphas, as epfml's DenseFormer does; none on norms. The residual's learnable mixing weights
        and gates, the value embeddings' gates and λs, and the gates and mixing weights of gated attention, XSA,
        SATFormer and dense value connections form a third group, never decayed, with learning rate `mix_lr` (None:
        the optimizer's base lr). modded-nanogpt trains XSA's α so (records/track_1_short/2026-05-07_XSAGatedLayers);
        its MUDD matrices it decays, at a quarter of the base lr (train_gpt.py, the `mudd_w1`/`mudd_w2` entries of
        its parameter table), which this grouping does not reproduce."""
        decay, no_decay, residual_mix = [], [], []
        for name, p in self.named_parameters():
            if _in_mix_group(name):
                residual_mix.append(p)
            elif name.startswith("dwa.") or (p.ndim >= 2 and (decay_embeddings or not name.startswith(EMBEDDINGS))):
                decay.append(p)
            else:
                no_decay.append(p)
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if residual_mix:
            groups.append({"params": residual_mix, "weight_decay": 0.0, **({} if mix_lr is None else {"lr": mix_lr})})
        return groups

    def unpadded_state_dict(self) -> dict[str, torch.Tensor]:
        """The state dict with the embedding and head cut back to their vocab_size real rows (for exports)."""
        state = self.state_dict()
        for name in ("tok_emb.weight", "lm_head.weight"):
            state[name] = state[name][:self.config.vocab_size]
        return state

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameters of the model, the zero padding rows of the embedding and head not counted. `non_embedding`
        leaves out the input embedding and the value-embedding tables (lookups, not matmuls)."""
        padding = (self.config.padded_vocab_size - self.config.vocab_size) * self.config.d_model
        n = sum(p.numel() for p in self.parameters()) - 2 * padding
        if not non_embedding:
            return n
        return n - self.config.vocab_size * self.config.d_model - sum(p.numel() for p in self.value_embeds.parameters())

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (fwd + bwd): 6 x matmul params + attention (PaLM appendix B convention).

        The head counts its vocab_size real rows: the padding columns are computed but are not useful work.
        """
        padding = (self.config.padded_vocab_size - self.config.vocab_size) * self.config.d_model
        matmul = sum(p.numel() for n, p in self.named_parameters()
                     if p.ndim >= 2 and not n.startswith(EMBEDDINGS)) - padding
        key_blocks = sum(1 + len(b.attn.sources) if b.attn.mapping == "cross_attention" else 1 for b in self.blocks)
        return 6.0 * matmul + 12.0 * key_blocks * self.config.d_model * seq_len


# Parameters looked up by token, not multiplied: no FLOPs, decayed only with `decay_embeddings`.
EMBEDDINGS = ("tok_emb.", "value_embeds.")


# Attention submodules whose parameters are mixing weights or gates: the residual's (`mix`), the value embeddings'
# (`ve_mix`), gated attention's, XSA's, SATFormer's and the dense value connections'. Each has a `logged()`: what a
# training step logs of its weights (Transformer.mixing_weights).
MIX_MODULES = ("mix", "ve_mix", "out_gate", "xsa", "sat_gate", "dense_value")


def _in_mix_group(name: str) -> bool:
    """Parameters of the mixing and gating submodules (MIX_MODULES): never decayed, their own learning rate."""
    return any(f".{module}." in name for module in MIX_MODULES)


def _pad_rows(weight: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.cat([weight, weight.new_zeros(rows - weight.shape[0], *weight.shape[1:])])


def _pad_vocab_rows_on_load(module: Transformer, state_dict: dict, prefix: str, *_) -> None:
    """A state dict saved before the embedding and head were padded (vocab_size rows) loads with zero rows added."""
    config = module.config
    for name in ("tok_emb.weight", "lm_head.weight"):
        weight = state_dict.get(prefix + name)
        if weight is not None and weight.shape[0] == config.vocab_size < config.padded_vocab_size:
            state_dict[prefix + name] = _pad_rows(weight, config.padded_vocab_size)


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100)

