"""Small models for the model tests: one configuration, its variants' overrides, seeded weights and token batches,
and the reference the chunked loss is checked against."""

from __future__ import annotations

from typing import get_args

import torch
import torch.nn.functional as F

from lit_resformer.model import ModelConfig, Transformer
from lit_resformer.model import loss as loss_module
from lit_resformer.model.config import AttnGatePer, DenseInto, GatePer, Learnable, ValueWeight, XSAPer

SMALL = dict(n_layer=6, n_head=4, d_model=64, ffn_dim=128, vocab_size=97, max_seq_len=64)


def small(**overrides) -> ModelConfig:
    return ModelConfig.from_dict({**SMALL, **overrides})


def build(config: ModelConfig, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(config).eval()


def tokens(batch=2, length=20, vocab=97, seed=1):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


DECODE_VARIANTS = {
    "vanilla": {},
    "gqa": dict(n_kv_head=2),
    "mqa": dict(n_kv_head=1),
    "resformer": dict(residual={"target": "v"}),
    "resformer+gqa": dict(residual={"target": "v"}, n_kv_head=2),
    "lambda-2": dict(residual={"target": "v", "self_weight": 1.0, "lam": 2.0}),
    "source-previous": dict(residual={"target": "v", "source": "previous"}),
    "source-all-uniform": dict(residual={"target": "v", "source": "all", "self_weight": "uniform", "lam": "uniform"}),
    "query-residual": dict(residual={"target": "q"}),
    "key-residual": dict(residual={"target": "k"}, n_kv_head=2),
    "identity-mapping": dict(residual={"target": "v", "mapping": "identity"}),
    "identity-mapping-eq6": dict(residual={"target": "v", "mapping": "identity", "source": "all", "self_weight": 1.0,
                                           "lam": 1.0}),
    "cross-attention": dict(residual={"target": "v", "mapping": "cross_attention"}),
    "cross-attention-all+gqa": dict(residual={"target": "v", "mapping": "cross_attention", "source": "all"},
                                    n_kv_head=2),
    "learnable-scalar": dict(residual={"target": "v", "learnable": "scalar"}),
    "learnable-head+gqa": dict(residual={"target": "v", "learnable": "head"}, n_kv_head=2),
    "learnable-token": dict(residual={"target": "v", "learnable": "token"}),
    "learnable-tied": dict(residual={"target": "v", "learnable": "tied"}),
    "learnable-tied+gqa+previous": dict(residual={"target": "v", "learnable": "tied", "source": "previous"}, n_kv_head=2),
    "token-gate+identity": dict(residual={"target": "v", "learnable": "token", "mapping": "identity"}),
    "sparse-layers": dict(residual={"target": "v", "layers": [4, 5, 6]}),
    "neutreno": dict(neutreno_lambda=0.4),
    "resformer+neutreno": dict(residual={"target": "v"}, neutreno_lambda=0.2),
    "neutreno+gqa": dict(neutreno_lambda=0.4, n_kv_head=2),
    "denseformer": dict(dwa={"enabled": True}),
    "denseformer-dilated": dict(dwa={"enabled": True, "dilation": 2, "period": 2}),
    "denseformer-dilation-3-period-2": dict(dwa={"enabled": True, "dilation": 3, "period": 2}),
    "resformer+denseformer": dict(residual={"target": "v"}, dwa={"enabled": True}),
    "svformer": dict(share={"svformer": True}),
    "svformer+gqa": dict(share={"svformer": True}, n_kv_head=1),
    "svformer-anchors": dict(share={"svformer": True, "anchors": [3, 5]}),
    "svformer-num-anchors": dict(share={"svformer": True, "num_anchors": 3}),
    "svformer+share-k": dict(share={"svformer": True, "every": 2, "what": "k"}),
    "svformer+neutreno": dict(share={"svformer": True}, neutreno_lambda=0.4),
    "cla2": dict(share={"every": 2, "what": "kv"}),
    "cla3+gqa": dict(share={"every": 3, "what": "kv"}, n_kv_head=2),
    "share-k-every-2": dict(share={"every": 2, "what": "k"}),
    "share-v-every-2": dict(share={"every": 2, "what": "v"}),
    "first-q": dict(share={"first": "q"}),
    "first-k": dict(share={"first": "k"}),
    "explicit-kernel+resformer": dict(residual={"target": "v"}, attn_impl="explicit"),
}



def _learnable_choices() -> dict[str, dict]:
    """One config per choice of every variant Literal whose choices build learnable weights, the choices read with
    get_args (each from the setting that switches its group on), plus the two groups switched on by a boolean; a
    choice that gives the same config as an earlier one is left out."""
    token_gate = {"target": "v", "learnable": "token"}
    fields = {
        "residual.learnable": (Learnable, lambda kind: {"residual": {"target": "v", "learnable": kind}}),
        "residual.gate_per": (GatePer, lambda per: {"residual": {**token_gate, "gate_per": per}}),
        "value_embed.value_weight": (ValueWeight, lambda weight: {"value_embed": {"layers": "alternate",
                                                                                  "value_weight": weight}}),
        "attn_gate.per": (AttnGatePer, lambda per: {"attn_gate": {"per": per}}),
        "xsa.per": (XSAPer, lambda per: {"xsa": {"per": per}}),
        "dense_value.into": (DenseInto, lambda into: {"dense_value": {"layers": "all", "into": into}}),
    }
    cases = {f"{field}={choice}": overrides(choice) for field, (literal, overrides) in fields.items()
             for choice in get_args(literal) if choice != "none"}
    cases["satformer.enabled=true"] = {"satformer": {"enabled": True}}
    cases["dwa.enabled=true"] = {"dwa": {"enabled": True}}
    distinct, seen = {}, []
    for name, overrides in cases.items():
        if small(**overrides) not in seen:
            seen.append(small(**overrides))
            distinct[name] = overrides
    return distinct


# Model overrides that build learnable mixing weights, gates or DenseFormer alphas, one case per choice (see
# _learnable_choices): a choice added to one of these Literals is trained and logged (tests/training/test_training.py),
# differentiated (tests/model/test_attention_variants.py) and exported (tests/export/test_export.py) with no edit.
LEARNABLE_CHOICES = _learnable_choices()


@torch.no_grad()
def argmax_without_cache(model: Transformer, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding by a full forward pass for every new token: what generate through the cache must equal."""
    seq = prompt
    for _ in range(new_tokens):
        seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], 1)
    return seq


def loss_inputs(vocab=100, rows=50, padded=128, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, d, generator=g)
    weight = torch.randn(padded, d, generator=g) / 2
    weight[vocab:] = 50.0  # padding rows that would win every softmax if they were not masked
    labels = torch.randint(0, vocab, (rows,), generator=g)
    labels[::7] = -100  # ignored positions
    return hidden.requires_grad_(), weight.requires_grad_(), labels


def reference(hidden, weight, labels, vocab):
    """fp32 logits of the real rows, then PyTorch's own cross-entropy."""
    logits = F.linear(hidden, weight[:vocab]).float()
    return F.cross_entropy(logits, labels, ignore_index=-100)


def spy_on_loss_paths(monkeypatch) -> list[str]:
    """The names of the loss paths `next_token_loss` calls, in order."""
    taken = []
    for name in ("linear_cross_entropy", "plain_cross_entropy"):
        original = getattr(loss_module, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            taken.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(loss_module, name, spy)
    return taken
