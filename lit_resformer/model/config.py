"""ModelConfig: the base Llama-like model plus every variant of the paper and its baselines, as data.

A config is validated when it is constructed; every rejected value names the field and what is allowed,
so a bad grid cell fails before any compute. Layer numbers in configs are 1-based, as in the paper.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin, get_type_hints

# Table 4 of the paper plus CPU presets (>= 6 layers so cross-layer effects can show).
PRESETS: dict[str, dict[str, int]] = {
    "2M": dict(n_layer=4, n_head=2, d_model=16, ffn_dim=56),
    "82M": dict(n_layer=8, n_head=8, d_model=512, ffn_dim=1792),
    "180M": dict(n_layer=12, n_head=12, d_model=768, ffn_dim=2688),
    # Fig. 6 shows a 320M model that Table 4 does not describe: assumed here to be the 468M shape at 14 layers
    # (315.9M parameters with the paper's vocabulary; 15 layers would give 331M).
    "320M": dict(n_layer=14, n_head=16, d_model=1024, ffn_dim=3584),
    "468M": dict(n_layer=24, n_head=16, d_model=1024, ffn_dim=3584),
    "tiny": dict(n_layer=6, n_head=4, d_model=128, ffn_dim=352),
    "mini": dict(n_layer=8, n_head=4, d_model=256, ffn_dim=704),
    # the transfer tier's larger model (configs/grids/transfer/size-x10/): ~9.4x tiny's parameters (21.2M with the
    # 4k vocabulary), tiny's FFN ratio of 2.75, mini's head dimension of 64; trained on a GPU
    "small": dict(n_layer=10, n_head=6, d_model=384, ffn_dim=1056),
}
CPU_PRESETS = ("tiny", "mini", "small")  # the presets of the 4k-BPE corpora, filled with CPU_PRESET_DEFAULTS
PAPER_VOCAB = 50277  # RedPajama-INCITE / GPT-NeoX tokenizer
PRESET_DEFAULTS = dict(vocab_size=PAPER_VOCAB, max_seq_len=2048)
CPU_PRESET_DEFAULTS = dict(vocab_size=4096, max_seq_len=512)
# The embedding and LM head get this many rows at least a multiple of: a head matmul whose size is not a
# multiple of 8 falls back to slow GPU kernels (50,277 -> 50,304). The extra rows are never predicted or scored.
VOCAB_MULTIPLE = 128

Target = Literal["none", "v", "q", "k"]
Source = Literal["first", "previous", "all"]
Mapping = Literal["attention", "identity", "cross_attention"]
# residual.learnable: `none` keeps the weights (a, l) fixed; the other kinds learn them (transformer.py's
# RESIDUAL_MIXES holds the module of each), either from self_weight and lam ...
LearnedFromWeights = Literal["scalar", "head"]
# ... or as weights that sum to 1 and start at 1/2, which leave self_weight and lam at 0.5.
LearnedConvex = Literal["token", "tied"]
Learnable = Literal["none", LearnedFromWeights, LearnedConvex]
GatePer = Literal["head", "channel"]
ValueWeight = Literal["fixed", "learnable"]
Shared = Literal["k", "v", "kv"]
FirstShared = Literal["none", "q", "k", "v"]
AttnImpl = Literal["sdpa", "flash", "explicit"]
AttnGatePer = Literal["none", "head", "element"]
XSAPer = Literal["none", "layer", "head", "token"]
DenseInto = Literal["input", "value"]


def _check_choice(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {list(allowed)}")


def _turned_on(literal, off: str = "none") -> list:
    """The choices of `literal` that switch its variant on."""
    return [choice for choice in get_args(literal) if choice != off]


def _nest(values: dict[str, Any]) -> dict[str, Any]:
    """{"residual.lam": 2, "share": {"svformer": True}} -> nested dicts, later keys merged into groups."""
    tree: dict[str, Any] = {}
    for key, value in values.items():
        *groups, leaf = key.split(".")
        node = tree
        for group in groups:
            node = node.setdefault(group, {})
            if not isinstance(node, dict):
                raise ValueError(f"{key}: {group} is not a group of fields")
        if isinstance(value, dict) and isinstance(node.get(leaf), dict):
            node[leaf].update(value)
        else:
            node[leaf] = dict(value) if isinstance(value, dict) else value
    return tree


@dataclass
class ResidualConfig:
    """A history term R_n mixed into one projection of layers n >= 2 (ResFormer when target='v').

    R_n is built from the source layers' *raw* projections (W_V x of that layer, before its own mixing):
    `first` = V_1, `previous` = V_{n-1}, `all` = the mean of V_1..V_{n-1}. The paper does not say whether
    `previous` means V_{n-1} before or after layer n-1's own mixing; the raw reading keeps every source
    a plain projection, so `previous` at n = 2 is V_1 and it never compounds earlier mixes.

    Mappings (values only, Fig. 10): `attention` V'_n = a V_n + l R_n (Eq. 7 at a = l = 1/2; Eq. 5 with
    source `all` and a = l = 'uniform', i.e. a = 1/n, l = (n-1)/n); `identity` U_n = A_n (a V_n) + l R_n
    (Eq. 6 is a = l = 1 with source `all`); `cross_attention` Eq. 2.

    learnable: `scalar` (a, l per layer), `head` (per KV head), `token` (a sigmoid gate g, (g, 1-g)),
    `tied` (one λ per layer, V' = (1-λ) V_n + λ R_n, init 1/2). `tied` is exactly the learnable λ of the
    modded-nanogpt record of 2024-11-06 (KellerJordan/modded-nanogpt,
    records/track_1_short/2024-11-06_ShortcutsTweaks: `v = (1 - lamb) * v + lamb * v1`, lamb = 0.5).

    The `token` gate g = sigmoid(W x + b) reads the token's normed hidden state x and weighs the layer's own
    projection: X' = g X_n + (1 - g) R_n. `gate_per` gives one gate per head or per channel, `gate_rank` a
    low-rank W = W_up W_down instead of a full one, `gate_bias` a learned offset b. W (W_down when low-rank) and
    b start at zero, so every form starts as ResFormer's 1/2 mix. The published gates:
    - lucidrains/x-transformers (x_transformers.py, `to_value_residual_mix`): per head, full rank, with a bias,
      `v = lerp(v_1, v, g)` = g V_n + (1 - g) V_1: g weighs V_n, as here.
      -> learnable: token, gate_per: head, gate_bias: true.
    - RWKV-7 in fla-org/flash-linear-attention (fla/layers/rwkv7.py, `v_lora`): per channel through a LoRA with
      a bias, `v = lerp(v, v_first, g)` = (1 - g) V_n + g V_1: g weighs V_1. With W and b started at zero the
      side is a sign flip of (W, b) (g -> 1 - g), which Adam follows exactly, so it is not a separate option; the
      reference starts its bias at 0.73 - 0.4 c/(D-1) (channel c) where this one starts at zero.
      -> learnable: token, gate_per: channel, gate_rank: r, gate_bias: true.
    """

    target: Target = "none"
    source: Source = "first"
    mapping: Mapping = "attention"
    # a (self) and l (history) of V'_n = a*V_n + l*R_n. "uniform" = Eq. 5's depth weights a = 1/n.
    self_weight: float | Literal["uniform"] = 0.5
    lam: float | Literal["uniform"] = 0.5
    learnable: Learnable = "none"
    layers: list[int] | None = None  # 1-based; default every layer n >= 2
    gate_per: GatePer = "head"  # learnable='token': one gate per head or per channel
    gate_rank: int | None = None  # learnable='token': rank of the gate's W (None: full rank)
    gate_bias: bool = False  # learnable='token': the gate has a learned offset b

    @property
    def enabled(self) -> bool:
        return self.target != "none"


@dataclass
class ValueEmbedConfig:
    """Value embeddings: per-token tables whose rows are added, through a sigmoid gate, to the values of chosen layers.

    For a chosen layer n with table VE (rows of width n_kv_head * head_dim, looked up by the input token):
        V'_n = w V_n + gate_scale * sigmoid(W_g u) * VE[token]      (one gate per KV head and token)
    where u = x[:gate_width] (the first channels of the layer's normed input x) or, with `gate_reads_table`,
    [x[:gate_width]; VE[token][:gate_width]], and w = 1 (`value_weight: fixed`) or a learned λ per layer
    started at 1/2 (`value_weight: learnable`). The term is added after the value residual's own mixing (V_n
    above is then the mixed value), before the KV-cache write, so the cache holds what attention used and
    costs nothing more. History terms still read the raw projections W_V x. W_g starts at zero.
    - karpathy/nanochat (nanochat/gpt.py, `ve_gate`): `v = v + 3 * sigmoid(W x[:12]) * ve` on every other layer,
      the last included, one table per layer.
      -> layers: alternate, gate_width: 12, gate_scale: 3, value_weight: fixed.
    - KellerJordan/modded-nanogpt (train_gpt.py, `value_embeds`, `ve_gate_bank`, `sa_lambdas`): values
      `λ W_v x + 2 sigmoid(W_g [x[:6]; ve[:6]]) * ve` with λ per layer from 0.5 (it scales the whole QKV
      weight there, but Q and K are normalised after it, so only V feels it), separate tables on 5 of 11 layers.
      -> layers: [...], gate_width: 6, gate_reads_table: true, gate_scale: 2, value_weight: learnable.

    layers: None (off), 1-based layer numbers, or 'alternate' (every other layer counting back from the last,
    nanochat's pattern). shared: one table for every chosen layer instead of one each.
    """

    layers: list[int] | Literal["alternate"] | None = None
    shared: bool = False
    gate_width: int = 12
    gate_reads_table: bool = False
    gate_scale: float = 3.0
    value_weight: ValueWeight = "fixed"

    @property
    def enabled(self) -> bool:
        return self.layers is not None


@dataclass
class DWAConfig:
    """DenseFormer depth-weighted averaging (DWA), with the semantics of epfml/DenseFormer's `DWAModules`.

    Block outputs are numbered B_0 (the embeddings) .. B_L. After block i, when i is a multiple of
    `period`, the stream handed to block i+1 is X_i = sum_j alpha_ij B_j over the *raw* outputs
    B_j with j <= i and j = i (mod `dilation`); other blocks hand on B_i unchanged. The stored B_j are
    never replaced by averages. alpha starts at the identity (alpha_ii = 1, the rest 0).
    The alphas are weight-decayed like the weight matrices, as in the reference (its alphas are
    `nn.Linear` weights, which its optimiser groups decay); they are still logged as mixing weights.
    """

    enabled: bool = False
    dilation: int = 1
    period: int = 1


@dataclass
class ShareConfig:
    """KV-efficient sharing of projections across layers.

    skip_v1 is SkipV1Former (Wu et al. 2025, arXiv 2510.16807): every layer n >= 2 computes only the first half of
    its value heads and takes the other half from layer 1, V_n = [W_V^n x (heads 1..H/2) ; V_1 (heads H/2+1..H)]
    (the paper's Attn(X) = X + Σ_{h<=H/2} W_O^h V_h softmax(K_h^T Q_h) + Σ_{h>H/2} W_O^h V_1^h softmax(K_h^T Q_h)),
    so its W_V and its V cache are half-size: the cache holds (3L+1)/(4L) of the vanilla bytes (~25% saved).
    Under GQA the heads are the KV heads, so n_kv_head must be even.
    """

    svformer: bool = False
    anchors: list[int] | None = None  # with SVFormer: layers (1-based) that compute a fresh V
    num_anchors: int | None = None  # with SVFormer: k anchors at layers 1 + floor(j*n_layer/k), j = 0..k-1
    every: int = 1  # groups of `every` layers share `what` (CLA when what='kv')
    what: Shared = "kv"
    first: FirstShared = "none"  # every layer n >= 2 reuses layer 1's q, k or v
    skip_v1: bool = False  # SkipV1Former: layers n >= 2 take half their value heads from layer 1


@dataclass
class AttnGateConfig:
    """Gated attention (Qiu et al. 2025, arXiv 2505.06708, gate position G1): Y' = Y ⊙ σ(X W_θ) on the attention
    output Y (U_n here, after SDPA and before W_O), X the same normed hidden state that feeds Q, K, V.

    `per: head` gives one gate per head and token (W_θ: d_model -> n_head), `per: element` one per channel
    (d_model -> d_model), the paper's head-wise and element-wise forms. W_θ starts random (init_std), as in the
    reference, where it is extra rows of q_proj (qiuzh20/gated_attention, `headwise_attn_output_gate`): σ ≈ 1/2 at
    init. The gate acts last, after NeuTRENO's and the identity mapping's terms and after XSA, so with ResFormer it
    gates what the layer hands W_O. layers: 1-based, default every layer.
    """

    per: AttnGatePer = "none"
    layers: list[int] | None = None

    @property
    def enabled(self) -> bool:
        return self.per != "none"


@dataclass
class XSAConfig:
    """Exclusive self-attention, the gated form of modded-nanogpt (KellerJordan/modded-nanogpt, train_gpt.py,
    `CausalSelfAttention.forward`, "Gated XSA (arXiv:2603.09078)"): per token and head, with v that token's own value,

        U <- U - tanh(α) (U·v / max(‖v‖², 1e-8)) v

    removes the share of the output that lies along the token's own value (α = 0: vanilla). `per`: one α per layer,
    per head (the record that introduced it, records/track_1_short/2026-05-07_XSAGatedLayers/README.md: one α per
    layer and head, zero-init, Adam without weight decay, on 1-based layers [2, 4, 5, 8, 9, 11] of 11), or per token
    and head from the layer's normed input, α = W x with one row of W per head (train_gpt.py today draws a per-token
    α from a small shared MLP, `unpack_pre_mudd_gate`). α (W) starts at zero. v is the value the layer attended with
    at that token (V'_n after any residual mixing and value embedding; V_1 under SVFormer; KV heads repeated for GQA).
    layers: 1-based, default every layer.
    """

    per: XSAPer = "none"
    layers: list[int] | None = None

    @property
    def enabled(self) -> bool:
        return self.per != "none"


@dataclass
class SATFormerConfig:
    """SATFormer (Gunasekaran et al. 2026, arXiv 2605.03953): selective access to the first layer's values,

        V'_n = V_n + relu(W_α h_n) · V_1      (one gate per KV head and token)

    h_n the layer's normed input, V_1 layer 1's raw value projection (SkyeGunasekaran/SATFormer,
    models/satformer/attn_satformer.py, `ValueResidualMixing`, gate 'relu'). W_α starts random (init_std), as there:
    at zero it would never learn (relu has no gradient at 0). W_α = 0 is the vanilla model exactly.
    layers: 1-based layers n >= 2, default all of them.
    """

    enabled: bool = False
    layers: list[int] | None = None


@dataclass
class DenseValueConfig:
    """Dense value connections: a layer's value path reads a learned, token-dependent mix of earlier hidden states.

    h_0 is the embedding output and h_j the residual stream handed to block j+1 (after DenseFormer's average, when
    on), so layer n can read h_0..h_{n-1}. Per token, μ = W_2 GELU(W_1 RMSNorm(h_{n-1})) gives one weight per source
    (RMSNorm without a scale, as MUDDFormer's `MultiwayDynamicDenseBlock`); W_2 starts at zero, so μ = 0 and the layer
    starts as vanilla.
    - into: input (MUDDFormer, Xiao et al. 2025, arXiv 2502.12170: the V stream of its multiway dense connections,
      `dense_type: qkvr` in its code): V_n = W_V RMSNorm_n(h_{n-1} + Σ_j μ_j h_j), through the layer's own attention
      norm (MUDD's `sepln: false`; its released 2.8B model, `sepln: true`, gives the V stream a norm of its own).
      Only the V stream: Q, K and the residual keep reading h_{n-1}.
    - into: value (KellerJordan/modded-nanogpt, train_gpt.py, `GPT.forward`, last layer: `v_mudd = mu[0]*cache[0] +
      mu[1]*cache[7] + mu[2]*x` added to V as `aux_v`, cache[k] the stream after 0-based block k): V_n = W_V x +
      Σ_j μ_j h_j, the hidden states added in value space as they are, so it needs n_kv_head == n_head.
      -> layers: last, sources: [0, 8, 10] (11 layers), into: value, hidden: 64.
    layers: null (off), 1-based layers n >= 2, 'all' or 'last'. sources: the j of h_j read (default all j < n), each
    below every chosen layer. hidden: width of the μ network.
    """

    layers: list[int] | Literal["all", "last"] | None = None
    sources: list[int] | None = None
    into: DenseInto = "input"
    hidden: int = 64

    @property
    def enabled(self) -> bool:
        return self.layers is not None


# Every group of variant fields: its name in ModelConfig -> its dataclass. The config's parsing and the Llama mapping
# (model/hf.py) read this one table; a Hugging Face export carries this file itself, so its config is this one.
VARIANT_GROUPS: dict[str, type] = {
    "residual": ResidualConfig, "value_embed": ValueEmbedConfig, "dwa": DWAConfig, "share": ShareConfig,
    "attn_gate": AttnGateConfig, "xsa": XSAConfig, "satformer": SATFormerConfig, "dense_value": DenseValueConfig,
}

# The fields that give a model learnable mixing weights or gates (the mixing group of Transformer.param_groups, whose
# modules transformer.py's MIX_MODULES names): a model with each of them at its default has none.
MIXING_FIELDS = ("residual.learnable", "value_embed.layers", "attn_gate.per", "xsa.per", "satformer.enabled",
                 "dense_value.layers")


def _default(dotted: str) -> Any:
    group, name = dotted.split(".")
    return getattr(VARIANT_GROUPS[group](), name)


def mixing_settings(prefix: str = "") -> str:
    """MIXING_FIELDS as a message names them (`prefix` before each), a field of choices with those that turn it on:
    "residual.learnable (one of ['scalar', ...]), ..., satformer.enabled or dense_value.layers"."""
    named = []
    for dotted in MIXING_FIELDS:
        group, name = dotted.split(".")
        kind = get_type_hints(VARIANT_GROUPS[group])[name]
        on = f" (one of {_turned_on(kind, _default(dotted))})" if get_origin(kind) is Literal else ""
        named.append(f"{prefix}{dotted}{on}")
    return f"{', '.join(named[:-1])} or {named[-1]}"


@dataclass
class ModelConfig:
    """All architecture choices. `size` names a preset whose values fill the fields left as None."""

    size: str | None = None
    n_layer: int | None = None
    n_head: int | None = None
    n_kv_head: int | None = None  # None -> n_head (MHA)
    d_model: int | None = None
    ffn_dim: int | None = None
    vocab_size: int | None = None
    max_seq_len: int | None = None
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02
    residual: ResidualConfig = field(default_factory=ResidualConfig)
    value_embed: ValueEmbedConfig = field(default_factory=ValueEmbedConfig)
    neutreno_lambda: float = 0.0
    dwa: DWAConfig = field(default_factory=DWAConfig)
    share: ShareConfig = field(default_factory=ShareConfig)
    attn_gate: AttnGateConfig = field(default_factory=AttnGateConfig)
    xsa: XSAConfig = field(default_factory=XSAConfig)
    satformer: SATFormerConfig = field(default_factory=SATFormerConfig)
    dense_value: DenseValueConfig = field(default_factory=DenseValueConfig)
    attn_impl: AttnImpl = "sdpa"

    # ------------------------------------------------------------------ construction
    @classmethod
    def preset(cls, size: str, **overrides: Any) -> ModelConfig:
        """`ModelConfig.preset("tiny", residual={"target": "v"}, **{"share.svformer": True})`."""
        return cls.from_dict({"size": size, **overrides})

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """Nested dicts or dotted keys ("residual.lam": 2) -> a validated config."""
        return cls(**_nest(values))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **overrides: Any) -> ModelConfig:
        """A copy with some fields changed (nested dicts or dotted keys)."""
        merged = self.to_dict()
        for key, value in _nest(overrides).items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key].update(value)
            else:
                merged[key] = value
        return ModelConfig(**merged)

    def __post_init__(self) -> None:
        for name, kind in VARIANT_GROUPS.items():
            value = getattr(self, name)
            if isinstance(value, dict):
                allowed = [f.name for f in dataclasses.fields(kind)]
                unknown = sorted(set(value) - set(allowed))
                if unknown:
                    raise ValueError(f"unknown field(s) {name}.{unknown[0]}; allowed fields of {name}: {allowed}")
                setattr(self, name, kind(**value))
            elif not isinstance(value, kind):
                raise ValueError(f"{name} must be a mapping of {[f.name for f in dataclasses.fields(kind)]}")
        if self.size is not None:
            if self.size not in PRESETS:
                raise ValueError(f"size={self.size!r} is not a preset; choose one of {list(PRESETS)}")
            filled = {**PRESETS[self.size]}
            filled.update(CPU_PRESET_DEFAULTS if self.size in CPU_PRESETS else PRESET_DEFAULTS)
            for key, value in filled.items():
                if getattr(self, key) is None:
                    setattr(self, key, value)
        if self.n_kv_head is None and self.n_head is not None:
            self.n_kv_head = self.n_head
        self._validate()

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        for name in ("n_layer", "n_head", "n_kv_head", "d_model", "ffn_dim", "vocab_size", "max_seq_len"):
            value = getattr(self, name)
            if value is None:
                raise ValueError(f"{name} is not set; give it or a preset size from {list(PRESETS)}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_head={self.n_head}")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} must be divisible by n_kv_head={self.n_kv_head}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim = d_model/n_head = {self.head_dim} must be even for RoPE")
        _check_choice("attn_impl", self.attn_impl, get_args(AttnImpl))
        for name in ("rope_theta", "norm_eps", "init_std"):
            if not isinstance(getattr(self, name), (int, float)) or getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be a positive number")
        self._validate_residual()
        self._validate_neutreno()
        self._validate_dwa()
        self._validate_share()
        self._validate_value_embed()
        self._validate_attn_gate()
        self._validate_xsa()
        self._validate_satformer()
        self._validate_dense_value()

    def _check_layers(self, name: str, layers: list[int], lowest: int) -> None:
        if not isinstance(layers, (list, tuple)) or not layers:
            raise ValueError(f"{name} must be a non-empty list of layer numbers in [{lowest}, {self.n_layer}]")
        for n in layers:
            if isinstance(n, bool) or not isinstance(n, int) or not lowest <= n <= self.n_layer:
                raise ValueError(f"{name} holds {n!r}; layer numbers are 1-based in [{lowest}, {self.n_layer}]")
        if len(set(layers)) != len(layers):
            raise ValueError(f"{name}={list(layers)} repeats a layer")

    def _validate_residual(self) -> None:
        r = self.residual
        _check_choice("residual.target", r.target, get_args(Target))
        _check_choice("residual.source", r.source, get_args(Source))
        _check_choice("residual.mapping", r.mapping, get_args(Mapping))
        _check_choice("residual.learnable", r.learnable, get_args(Learnable))
        for name in ("self_weight", "lam"):
            value = getattr(r, name)
            if value == "uniform":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"residual.{name}={value!r} must be a number or 'uniform'")
            if value < 0:
                raise ValueError(f"residual.{name}={value} must be >= 0 (a negative mixing weight is not a residual)")
        if (r.self_weight == "uniform") != (r.lam == "uniform"):
            raise ValueError("residual.self_weight and residual.lam must both be 'uniform' (Eq. 5) or both numbers")
        if r.layers is not None:
            self._check_layers("residual.layers", r.layers, 2)
        if not r.enabled:
            changed = [f.name for f in dataclasses.fields(r)
                       if f.name != "target" and getattr(r, f.name) != f.default]
            if changed:
                raise ValueError(f"residual.{changed[0]} is set but residual.target is 'none'; "
                                 f"set residual.target to one of {_turned_on(Target)}")
            return
        if r.mapping != "attention" and r.target != "v":
            raise ValueError(f"residual.mapping={r.mapping!r} applies to values only; with residual.target="
                             f"{r.target!r} use residual.mapping='attention'")
        if r.mapping == "cross_attention":
            if r.learnable != "none":
                raise ValueError("residual.learnable must be 'none' with residual.mapping='cross_attention' "
                                 "(cross-layer attention has no mixing weights)")
            if r.self_weight != 0.5 or r.lam != 0.5:
                raise ValueError("residual.self_weight/lam have no meaning with residual.mapping='cross_attention'; "
                                 "leave them at their defaults")
        if r.learnable in get_args(LearnedConvex) and (r.self_weight != 0.5 or r.lam != 0.5):
            raise ValueError(f"residual.learnable={r.learnable!r} mixes with weights that sum to 1 and start at 1/2; "
                             "residual.self_weight/lam must stay 0.5")
        _check_choice("residual.gate_per", r.gate_per, get_args(GatePer))
        if r.gate_rank is not None and (isinstance(r.gate_rank, bool) or not isinstance(r.gate_rank, int)
                                        or r.gate_rank < 1):
            raise ValueError(f"residual.gate_rank={r.gate_rank!r} must be a positive integer or null (full rank)")
        if not isinstance(r.gate_bias, bool):
            raise ValueError(f"residual.gate_bias={r.gate_bias!r} must be true or false")
        gate_fields = [name for name, default in (("gate_per", "head"), ("gate_rank", None), ("gate_bias", False))
                       if getattr(r, name) != default]
        if gate_fields and r.learnable != "token":
            raise ValueError(f"residual.{gate_fields[0]} shapes the sigmoid gate of residual.learnable='token', but "
                             f"residual.learnable is {r.learnable!r}; set residual.learnable='token' or leave "
                             "residual.gate_per/gate_rank/gate_bias at their defaults ('head', null, false)")

    def _validate_neutreno(self) -> None:
        mu = self.neutreno_lambda
        if isinstance(mu, bool) or not isinstance(mu, (int, float)) or mu < 0:
            raise ValueError(f"neutreno_lambda={mu!r} must be a number >= 0 (0 disables NeuTRENO)")

    def _validate_dwa(self) -> None:
        d = self.dwa
        if not isinstance(d.enabled, bool):
            raise ValueError(f"dwa.enabled={d.enabled!r} must be true or false")
        for name in ("dilation", "period"):
            value = getattr(d, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"dwa.{name}={value!r} must be an integer >= 1")
        if not d.enabled and (d.dilation != 1 or d.period != 1):
            raise ValueError("dwa.dilation/dwa.period are set but dwa.enabled is false")

    def _validate_share(self) -> None:
        s, r = self.share, self.residual
        _check_choice("share.what", s.what, get_args(Shared))
        _check_choice("share.first", s.first, get_args(FirstShared))
        if not isinstance(s.svformer, bool):
            raise ValueError(f"share.svformer={s.svformer!r} must be true or false")
        if isinstance(s.every, bool) or not isinstance(s.every, int) or not 1 <= s.every <= self.n_layer:
            raise ValueError(f"share.every={s.every!r} must be an integer in [1, n_layer={self.n_layer}]")
        if (s.anchors is not None or s.num_anchors is not None) and not s.svformer:
            raise ValueError("share.anchors/share.num_anchors need share.svformer=true")
        if s.anchors is not None and s.num_anchors is not None:
            raise ValueError("give either share.anchors or share.num_anchors, not both")
        if s.anchors is not None:
            self._check_layers("share.anchors", s.anchors, 1)
        if s.num_anchors is not None:
            if isinstance(s.num_anchors, bool) or not isinstance(s.num_anchors, int) \
                    or not 1 <= s.num_anchors <= self.n_layer:
                raise ValueError(f"share.num_anchors={s.num_anchors!r} must be an integer in [1, {self.n_layer}]")
        if s.svformer and s.first == "v":
            raise ValueError("share.first='v' is SVFormer itself; set only share.svformer=true")
        shares_v = s.svformer or s.first == "v" or (s.every > 1 and s.what in ("v", "kv"))
        if not isinstance(s.skip_v1, bool):
            raise ValueError(f"share.skip_v1={s.skip_v1!r} must be true or false")
        if s.skip_v1 and shares_v:
            raise ValueError("share.skip_v1 takes half of each layer's value heads from layer 1 and computes the other "
                             "half; it cannot combine with share.svformer, share.first='v' or share.what in ['v','kv'] "
                             "(those layers compute no V of their own): keep one")
        if s.skip_v1 and self.n_kv_head % 2:
            raise ValueError(f"share.skip_v1 takes half of the value heads from layer 1: n_kv_head={self.n_kv_head} "
                             "must be even (1 is MQA, which has no half to share)")
        shares_k = s.first == "k" or (s.every > 1 and s.what in ("k", "kv"))
        if s.svformer and s.every > 1 and s.what in ("v", "kv"):
            raise ValueError(f"share.svformer already shares V; share.what={s.what!r} with share.every="
                             f"{s.every} conflicts (use share.what='k')")
        if s.first in ("k", "v") and s.every > 1 and s.what in (s.first, "kv"):
            raise ValueError(f"share.first={s.first!r} and share.every={s.every} (what={s.what!r}) both "
                             f"decide where layer {s.first.upper()} comes from; keep one")
        if r.enabled:
            if r.target == "v" and shares_v:
                raise ValueError("residual.target='v' cannot combine with shared values (share.svformer, "
                                 "share.first='v' or share.what in ['v','kv']): those layers have no V_n of "
                                 "their own")
            if r.target == "v" and s.skip_v1:
                raise ValueError("residual.target='v' cannot combine with share.skip_v1: half of every layer's value "
                                 "heads already are layer 1's; keep one")
            if r.target == "k" and shares_k:
                raise ValueError("residual.target='k' cannot combine with shared keys (share.first='k' or "
                                 "share.what in ['k','kv'])")
            if r.target == "q" and s.first == "q":
                raise ValueError("residual.target='q' cannot combine with share.first='q'")
            if r.mapping == "cross_attention" and (shares_v or shares_k):
                raise ValueError("residual.mapping='cross_attention' cannot combine with K/V sharing "
                                 "(share.svformer, share.first, share.every)")

    def _validate_value_embed(self) -> None:
        ve = self.value_embed
        if not ve.enabled:
            changed = [f.name for f in dataclasses.fields(ve) if getattr(ve, f.name) != f.default]
            if changed:
                raise ValueError(f"value_embed.{changed[0]} is set but value_embed.layers is null (no value "
                                 "embeddings); set value_embed.layers to 'alternate' or a list of layer numbers")
            return
        if isinstance(ve.layers, str):
            _check_choice("value_embed.layers", ve.layers, ("alternate",))
        else:
            self._check_layers("value_embed.layers", ve.layers, 1)
        for name in ("shared", "gate_reads_table"):
            if not isinstance(getattr(ve, name), bool):
                raise ValueError(f"value_embed.{name}={getattr(ve, name)!r} must be true or false")
        _check_choice("value_embed.value_weight", ve.value_weight, get_args(ValueWeight))
        widest = min(self.d_model, self.kv_dim) if ve.gate_reads_table else self.d_model
        if isinstance(ve.gate_width, bool) or not isinstance(ve.gate_width, int) or not 1 <= ve.gate_width <= widest:
            reads = "the hidden state and the table row" if ve.gate_reads_table else "the hidden state"
            raise ValueError(f"value_embed.gate_width={ve.gate_width!r} must be an integer in [1, {widest}]: the gate "
                             f"reads that many channels of {reads}")
        if isinstance(ve.gate_scale, bool) or not isinstance(ve.gate_scale, (int, float)) or ve.gate_scale <= 0:
            raise ValueError(f"value_embed.gate_scale={ve.gate_scale!r} must be a number > 0 (the gate's maximum)")
        for i in self.value_embed_layers():
            self._check_own_values("value_embed.layers", "value embeddings", i)

    def _check_own_values(self, name: str, what: str, i: int) -> None:
        """Refuse a variant on layer i (0-based) that does not compute all of its own value heads."""
        if self.producer(i, "v") != i:
            raise ValueError(f"{name} holds layer {i + 1}, which reuses layer {self.producer(i, 'v') + 1}'s values "
                             f"(share.svformer, share.first='v' or share.what in ['v','kv']): {what} need layers "
                             "that compute their own V")
        if self.share.skip_v1 and i > 0:
            raise ValueError(f"{name} holds layer {i + 1}, which takes half its value heads from layer 1 "
                             f"(share.skip_v1): {what} need layers that compute their own V")

    def _validate_attn_gate(self) -> None:
        g = self.attn_gate
        _check_choice("attn_gate.per", g.per, get_args(AttnGatePer))
        if g.layers is not None:
            if not g.enabled:
                raise ValueError("attn_gate.layers is set but attn_gate.per is 'none' (no gate); set attn_gate.per "
                                 f"to one of {_turned_on(AttnGatePer)}")
            self._check_layers("attn_gate.layers", g.layers, 1)

    def _validate_xsa(self) -> None:
        x = self.xsa
        _check_choice("xsa.per", x.per, get_args(XSAPer))
        if x.layers is not None:
            if not x.enabled:
                raise ValueError("xsa.layers is set but xsa.per is 'none' (no XSA); set xsa.per to one of "
                                 f"{_turned_on(XSAPer)}")
            self._check_layers("xsa.layers", x.layers, 1)

    def _validate_satformer(self) -> None:
        t = self.satformer
        if not isinstance(t.enabled, bool):
            raise ValueError(f"satformer.enabled={t.enabled!r} must be true or false")
        if t.layers is not None:
            if not t.enabled:
                raise ValueError("satformer.layers is set but satformer.enabled is false; set satformer.enabled=true")
            self._check_layers("satformer.layers", t.layers, 2)
        if not t.enabled:
            return
        if self.residual.target == "v":
            raise ValueError("satformer.enabled and residual.target='v' both mix layer 1's values into V_n; keep one "
                             "(residual.learnable='token' is ResFormer's own token-gated mix)")
        for i in self.satformer_layers():
            self._check_own_values("satformer.layers", "SATFormer's gate on V_1 and V_n", i)

    def _validate_dense_value(self) -> None:
        dv = self.dense_value
        if not dv.enabled:
            changed = [f.name for f in dataclasses.fields(dv) if getattr(dv, f.name) != f.default]
            if changed:
                raise ValueError(f"dense_value.{changed[0]} is set but dense_value.layers is null (no dense value "
                                 "connections); set dense_value.layers to 'all', 'last' or a list of layer numbers")
            return
        if isinstance(dv.layers, str):
            _check_choice("dense_value.layers", dv.layers, ("all", "last"))
        else:
            self._check_layers("dense_value.layers", dv.layers, 2)
        if self.n_layer < 2:
            raise ValueError("dense_value.layers needs n_layer >= 2: layer 1 has no earlier hidden states to read")
        _check_choice("dense_value.into", dv.into, get_args(DenseInto))
        if isinstance(dv.hidden, bool) or not isinstance(dv.hidden, int) or dv.hidden < 1:
            raise ValueError(f"dense_value.hidden={dv.hidden!r} must be a positive integer (the μ network's width)")
        if dv.sources is not None:
            first = min(self.dense_value_layers()) + 1  # 1-based: it reads h_0..h_{first-1}
            if not isinstance(dv.sources, (list, tuple)) or not dv.sources:
                raise ValueError(f"dense_value.sources must be a non-empty list of hidden-state numbers in [0, "
                                 f"{first - 1}] (0 = the embeddings, j = the stream after block j)")
            for j in dv.sources:
                if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < first:
                    raise ValueError(f"dense_value.sources holds {j!r}; layer {first} (the first of dense_value.layers) "
                                     f"reads h_0..h_{first - 1}, so sources are integers in [0, {first - 1}]")
            if len(set(dv.sources)) != len(dv.sources):
                raise ValueError(f"dense_value.sources={list(dv.sources)} repeats a hidden state")
        if dv.into == "value" and self.n_kv_head != self.n_head:
            raise ValueError(f"dense_value.into='value' adds hidden states (d_model={self.d_model}) to the values "
                             f"(n_kv_head*head_dim={self.kv_dim}): it needs n_kv_head == n_head; use "
                             "dense_value.into='input' under GQA")
        for i in self.dense_value_layers():
            self._check_own_values("dense_value.layers", "dense value connections", i)

    def has_mixing_weights(self) -> bool:
        """Whether the model has learnable mixing weights or gates: one of MIXING_FIELDS off its default."""
        return any(getattr(getattr(self, group), name) != _default(f"{group}.{name}")
                   for group, name in (dotted.split(".") for dotted in MIXING_FIELDS))

    # ------------------------------------------------------------------ derived layout
    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def kv_dim(self) -> int:
        return self.n_kv_head * self.head_dim

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the embedding and LM head: `vocab_size` rounded up to a multiple of VOCAB_MULTIPLE."""
        return -(-self.vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE

    def residual_layers(self) -> list[int]:
        """0-based indices of layers that mix a history term (empty when the residual is off)."""
        if not self.residual.enabled:
            return []
        chosen = self.residual.layers or range(2, self.n_layer + 1)
        return sorted(n - 1 for n in chosen)

    def value_embed_layers(self) -> list[int]:
        """0-based indices of layers that add a value embedding (empty when off). 'alternate' is nanochat's
        pattern: every other layer counting back from the last, so the last layer always has one."""
        layers = self.value_embed.layers
        if layers is None:
            return []
        if layers == "alternate":
            return [i for i in range(self.n_layer) if i % 2 == (self.n_layer - 1) % 2]
        return sorted(n - 1 for n in layers)

    def value_embed_table(self, i: int) -> str:
        """The key of the table layer i (0-based) reads: 'shared', or its own 1-based layer number."""
        return "shared" if self.value_embed.shared else str(i + 1)

    def attn_gate_layers(self) -> list[int]:
        """0-based layers whose attention output is gated (empty when off; default every layer)."""
        if not self.attn_gate.enabled:
            return []
        return sorted(n - 1 for n in (self.attn_gate.layers or range(1, self.n_layer + 1)))

    def xsa_layers(self) -> list[int]:
        """0-based layers with exclusive self-attention (empty when off; default every layer)."""
        if not self.xsa.enabled:
            return []
        return sorted(n - 1 for n in (self.xsa.layers or range(1, self.n_layer + 1)))

    def satformer_layers(self) -> list[int]:
        """0-based layers that add SATFormer's gated V_1 (empty when off; default every layer n >= 2)."""
        if not self.satformer.enabled:
            return []
        return sorted(n - 1 for n in (self.satformer.layers or range(2, self.n_layer + 1)))

    def dense_value_layers(self) -> list[int]:
        """0-based layers whose value path reads earlier hidden states (empty when off)."""
        layers = self.dense_value.layers
        if layers is None:
            return []
        if layers == "all":
            return list(range(1, self.n_layer))
        if layers == "last":
            return [self.n_layer - 1]
        return sorted(n - 1 for n in layers)

    def dense_value_sources(self, i: int) -> list[int]:
        """The j of the hidden states h_j that layer i (0-based) mixes into its values: h_0 = embeddings, h_j = the
        stream handed to block j+1; default all j <= i."""
        return list(self.dense_value.sources) if self.dense_value.sources is not None else list(range(i + 1))

    def residual_sources(self, i: int) -> list[int]:
        """0-based layers whose projections form the history term R of layer i."""
        src = self.residual.source
        return [0] if src == "first" else [i - 1] if src == "previous" else list(range(i))

    def value_anchors(self) -> list[int]:
        """0-based layers that compute their own V under SVFormer (layer 1 always)."""
        s = self.share
        if s.anchors is not None:
            return sorted({0, *(n - 1 for n in s.anchors)})
        if s.num_anchors is not None:
            # Evenly: anchor j sits at the ideal position j*L/k rounded down, so the k groups of layers
            # sharing one value differ in size by at most one, on every depth.
            return [j * self.n_layer // s.num_anchors for j in range(s.num_anchors)]
        return [0]

    def producer(self, i: int, what: str) -> int:
        """Which layer (0-based) computes the q/k/v that layer i attends with."""
        s = self.share
        if i == 0:
            return 0
        if s.first == what:
            return 0
        if what == "v" and s.svformer:
            return max(a for a in self.value_anchors() if a <= i)
        if what in ("k", "v") and s.every > 1 and what in s.what:
            return i - i % s.every
        return i

    def cache_heads(self) -> list[tuple[int, int]]:
        """Per layer: how many K heads and V heads it stores in the KV cache (0: it reuses another layer's).
        SkipV1Former's layers n >= 2 store only the half of their value heads they compute."""
        heads = []
        for i in range(self.n_layer):
            k = self.n_kv_head if self.producer(i, "k") == i else 0
            v = self.n_kv_head if self.producer(i, "v") == i else 0
            heads.append((k, v // 2 if self.share.skip_v1 and i > 0 else v))
        return heads

    def cache_layout(self) -> list[tuple[bool, bool]]:
        """Per layer: (stores K, stores V) in the KV cache."""
        return [(k > 0, v > 0) for k, v in self.cache_heads()]
