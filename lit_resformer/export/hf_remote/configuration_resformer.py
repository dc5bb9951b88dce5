"""Configuration of an exported lit-resformer model: the Llama-like base plus every variant field, as data.

Self-contained (torch and transformers only): it travels inside the exported folder and is loaded with
`trust_remote_code=True`. The variant groups (GROUP_DEFAULTS: `residual`, `value_embed`, `dwa`, `share`, `attn_gate`,
`xsa`, `satformer`, `dense_value`) are stored as the same nested dictionaries as the training config, so `config.json`
reads like the run's own config.
Layer numbers in the variant fields are 1-based, as in the paper; the methods return 0-based indices.

`config.json` also records the transformers release the folder was exported with and the major versions this code
was tested under; loading it with another major version logs one warning.
"""

from __future__ import annotations

import transformers
from transformers import PretrainedConfig
from transformers.utils import logging

logger = logging.get_logger(__name__)

# The transformers major versions this code is tested under (with the project's locked release and the newest one).
# Generation goes through parts of transformers that change between releases (5.24 renamed the cache argument).
TESTED_TRANSFORMERS_MAJORS = (5,)
_untested_versions_warned: set[str] = set()  # one warning per process and transformers version

RESIDUAL_DEFAULTS = dict(target="none", source="first", mapping="attention", self_weight=0.5, lam=0.5,
                         learnable="none", layers=None, gate_per="head", gate_rank=None, gate_bias=False)
VALUE_EMBED_DEFAULTS = dict(layers=None, shared=False, gate_width=12, gate_reads_table=False, gate_scale=3.0,
                            value_weight="fixed")
DWA_DEFAULTS = dict(enabled=False, dilation=1, period=1)
SHARE_DEFAULTS = dict(svformer=False, anchors=None, num_anchors=None, every=1, what="kv", first="none", skip_v1=False)
ATTN_GATE_DEFAULTS = dict(per="none", layers=None)
XSA_DEFAULTS = dict(per="none", layers=None)
SATFORMER_DEFAULTS = dict(enabled=False, layers=None)
DENSE_VALUE_DEFAULTS = dict(layers=None, sources=None, into="input", hidden=64)
# Every variant group: its name (a keyword of ResFormerConfig and a key of config.json) -> its fields' defaults. The
# training code's ModelConfig has the same groups (lit_resformer.model.config.VARIANT_GROUPS); its tests hold the two equal.
GROUP_DEFAULTS = {
    "residual": RESIDUAL_DEFAULTS, "value_embed": VALUE_EMBED_DEFAULTS, "dwa": DWA_DEFAULTS, "share": SHARE_DEFAULTS,
    "attn_gate": ATTN_GATE_DEFAULTS, "xsa": XSA_DEFAULTS, "satformer": SATFORMER_DEFAULTS,
    "dense_value": DENSE_VALUE_DEFAULTS,
}
CHOICES = {
    "residual.target": ("none", "v", "q", "k"),
    "residual.source": ("first", "previous", "all"),
    "residual.mapping": ("attention", "identity", "cross_attention"),
    "residual.learnable": ("none", "scalar", "head", "token", "tied"),
    "residual.gate_per": ("head", "channel"),
    "value_embed.value_weight": ("fixed", "learnable"),
    "share.what": ("k", "v", "kv"),
    "share.first": ("none", "q", "k", "v"),
    "attn_gate.per": ("none", "head", "element"),
    "xsa.per": ("none", "layer", "head", "token"),
    "dense_value.into": ("input", "value"),
}


def _group(name: str, values: dict | None, defaults: dict) -> dict:
    values = dict(values or {})
    unknown = sorted(set(values) - set(defaults))
    if unknown:
        raise ValueError(f"unknown field {name}.{unknown[0]}; the fields of {name} are {list(defaults)}")
    group = {**defaults, **values}
    for field, value in group.items():
        allowed = CHOICES.get(f"{name}.{field}")
        if allowed is not None and value not in allowed:
            raise ValueError(f"{name}.{field}={value!r} is not allowed; choose one of {list(allowed)}")
    return group


class ResFormerConfig(PretrainedConfig):
    model_type = "lit_resformer"
    # The names other tools (lm-eval, generation utilities) look for.
    attribute_map = {
        "hidden_size": "d_model", "num_hidden_layers": "n_layer", "num_attention_heads": "n_head",
        "num_key_value_heads": "n_kv_head", "intermediate_size": "ffn_dim", "max_position_embeddings": "max_seq_len",
    }

    def __init__(self, vocab_size: int = 4096, n_layer: int = 6, n_head: int = 4, n_kv_head: int | None = None,
                 d_model: int = 128, ffn_dim: int = 352, max_seq_len: int = 512, rope_theta: float = 10000.0,
                 norm_eps: float = 1e-5, init_std: float = 0.02, neutreno_lambda: float = 0.0,
                 use_cache: bool = True, exported_with_transformers: str | None = None,
                 tested_transformers_majors: list[int] | None = None, **kwargs):
        """The variant groups of GROUP_DEFAULTS come as keyword arguments of their names (dicts; missing fields take
        their defaults), e.g. `ResFormerConfig(residual={"target": "v"}, attn_gate={"per": "head"})`."""
        self.vocab_size, self.n_layer, self.n_head = vocab_size, n_layer, n_head
        self.n_kv_head = n_head if n_kv_head is None else n_kv_head
        self.d_model, self.ffn_dim, self.max_seq_len = d_model, ffn_dim, max_seq_len
        self.rope_theta, self.norm_eps, self.init_std = float(rope_theta), float(norm_eps), float(init_std)
        for name, defaults in GROUP_DEFAULTS.items():
            setattr(self, name, _group(name, kwargs.pop(name, None), defaults))
        self.neutreno_lambda = float(neutreno_lambda)
        self.use_cache = use_cache  # forward returns its ResFormerCache unless told otherwise
        self.exported_with_transformers = exported_with_transformers
        majors = list(TESTED_TRANSFORMERS_MAJORS if tested_transformers_majors is None else tested_transformers_majors)
        if not majors or not all(isinstance(m, int) and not isinstance(m, bool) for m in majors):
            raise ValueError(f"tested_transformers_majors={tested_transformers_majors!r}: give a non-empty list of "
                             f"major versions, e.g. {list(TESTED_TRANSFORMERS_MAJORS)}")
        self.tested_transformers_majors = majors
        warn_if_untested_transformers(majors, exported_with_transformers)
        if d_model % n_head or n_head % self.n_kv_head:
            raise ValueError(f"d_model={d_model}, n_head={n_head}, n_kv_head={self.n_kv_head}: d_model must be "
                             f"divisible by n_head and n_head by n_kv_head")
        kwargs["tie_word_embeddings"] = False  # the paper's models have separate input and output embeddings
        super().__init__(**kwargs)

    # ------------------------------------------------------------------ derived layout
    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def residual_layers(self) -> list[int]:
        """Layers that mix a history term into a projection (every layer n >= 2 unless `residual.layers`)."""
        if self.residual["target"] == "none":
            return []
        return sorted(n - 1 for n in (self.residual["layers"] or range(2, self.n_layer + 1)))

    def value_embed_layers(self) -> list[int]:
        """Layers that add a value embedding: the listed ones, or with 'alternate' every other layer counting back
        from the last."""
        layers = self.value_embed["layers"]
        if layers is None:
            return []
        if layers == "alternate":
            return [i for i in range(self.n_layer) if i % 2 == (self.n_layer - 1) % 2]
        return sorted(n - 1 for n in layers)

    def value_embed_table(self, i: int) -> str:
        """The key of the value-embedding table layer i reads: 'shared', or its own 1-based layer number."""
        return "shared" if self.value_embed["shared"] else str(i + 1)

    def attn_gate_layers(self) -> list[int]:
        """Layers whose attention output is gated (every layer unless `attn_gate.layers`)."""
        if self.attn_gate["per"] == "none":
            return []
        return sorted(n - 1 for n in (self.attn_gate["layers"] or range(1, self.n_layer + 1)))

    def xsa_layers(self) -> list[int]:
        """Layers with exclusive self-attention (every layer unless `xsa.layers`)."""
        if self.xsa["per"] == "none":
            return []
        return sorted(n - 1 for n in (self.xsa["layers"] or range(1, self.n_layer + 1)))

    def satformer_layers(self) -> list[int]:
        """Layers that add SATFormer's gated V_1 (every layer n >= 2 unless `satformer.layers`)."""
        if not self.satformer["enabled"]:
            return []
        return sorted(n - 1 for n in (self.satformer["layers"] or range(2, self.n_layer + 1)))

    def dense_value_layers(self) -> list[int]:
        """Layers whose value path reads earlier hidden states: the listed ones, 'all' (n >= 2) or 'last'."""
        layers = self.dense_value["layers"]
        if layers is None:
            return []
        if layers == "all":
            return list(range(1, self.n_layer))
        if layers == "last":
            return [self.n_layer - 1]
        return sorted(n - 1 for n in layers)

    def dense_value_sources(self, i: int) -> list[int]:
        """The j of the hidden states h_j layer i mixes into its values (h_0 = embeddings); default every j <= i."""
        sources = self.dense_value["sources"]
        return list(sources) if sources is not None else list(range(i + 1))

    def residual_sources(self, i: int) -> list[int]:
        """Layers whose projections form the history term R of layer i: {1}, {n-1} or {1..n-1}."""
        source = self.residual["source"]
        return [0] if source == "first" else [i - 1] if source == "previous" else list(range(i))

    def value_anchors(self) -> list[int]:
        """Layers that compute their own V under SVFormer: layer 1, plus the listed or evenly spaced anchors."""
        share = self.share
        if share["anchors"] is not None:
            return sorted({0, *(n - 1 for n in share["anchors"])})
        if share["num_anchors"] is not None:  # anchor j at layer 1 + floor(j L / k)
            return [j * self.n_layer // share["num_anchors"] for j in range(share["num_anchors"])]
        return [0]

    def producer(self, i: int, what: str) -> int:
        """The layer that computes the q, k or v that layer i attends with."""
        share = self.share
        if i == 0 or share["first"] == what:
            return 0
        if what == "v" and share["svformer"]:
            return max(a for a in self.value_anchors() if a <= i)
        if what in ("k", "v") and share["every"] > 1 and what in share["what"]:
            return i - i % share["every"]
        return i


def warn_if_untested_transformers(tested_majors: list[int], exported_with: str | None) -> None:
    """One line, once per process, when the installed transformers is of a major version this code was not tested on."""
    installed = transformers.__version__
    if int(installed.split(".")[0]) in tested_majors or installed in _untested_versions_warned:
        return
    _untested_versions_warned.add(installed)
    exported = f" (exported with {exported_with})" if exported_with else ""
    tested = " or ".join(f"{major}.x" for major in tested_majors)
    logger.warning(f"this lit-resformer model's code was tested with transformers {tested}{exported}, but transformers "
                   f"{installed} is installed: loading or generation may fail or give different results")
