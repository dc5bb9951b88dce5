"""`AnalysisTrace`: reduces a model's per-layer internals to the analysis metrics during the forward pass.

Memory stays bounded for long sequences: the model keeps its fast SDPA path, and `on_qkv` recomputes the
layer's attention probabilities from the layer's own post-RoPE q and full k/v with the model's explicit
kernel, a chunk of query rows at a time (a chunk holds at most `attention_budget` probabilities). Each chunk
is reduced to column sums at once, so at most one chunk of one layer's attention matrix exists at any time;
what the trace keeps across layers is O(layers x (T + Hkv*d)) numbers.

Layers are 0-based here as in the model code; the runner reports them 1-based as in the paper.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from lit_resformer.analysis import metrics
from lit_resformer.model import Trace
from lit_resformer.model.kernels import attention

DEFAULT_ATTENTION_BUDGET = 1 << 24  # probabilities per chunk (64 MiB in fp32)


class AnalysisTrace(Trace):
    """Accumulates, per layer and over every sequence passed through the model:
    token importance (Eq. 11) and its entropy and top-i shares, hidden-state similarity (Eq. 13), value and
    hidden norms by position, the value spectrum (Eq. 12) and the Fig. 4 cosines.

    `fig4` compares layer n with m = n-1 (the paper's reading, "with respect to the previous one") and with
    m = 1; K/V of the first and of the previous layer are held for the duration of one forward pass.
    """

    def __init__(self, top_i: int, attention_budget: int = DEFAULT_ATTENTION_BUDGET, fig4: bool = True):
        if attention_budget < 1:
            raise ValueError(f"attention_budget={attention_budget} must be a positive number of probabilities")
        self.top_i = top_i
        self.attention_budget = attention_budget
        self.fig4 = fig4
        self.num_seqs = 0  # sequences whose attention has been reduced (counted at layer 0)
        self.largest_attention_block = 0  # numel of the biggest probability tensor seen (for the memory check)
        # Per-layer sums over sequences (divide by num_seqs, or by the token count for fig4).
        self.importance_sum: dict[int, torch.Tensor] = {}
        self.entropy_sum: dict[int, float] = defaultdict(float)
        self.top_i_sum: dict[int, torch.Tensor] = {}
        self.similarity_sum: dict[int, float] = defaultdict(float)
        self.hidden_norm_sum: dict[int, torch.Tensor] = {}
        self.value_norm_sum: dict[int, torch.Tensor] = {}
        self.value_spectrum_sum: dict[int, torch.Tensor] = {}  # Eq. 12 eigenvalues, summed over sequences
        # The layer's own projection V_n = W_V x before any mixing (fed by a hook on W_V; see add_raw_values).
        self.raw_value_norm_sum: dict[int, torch.Tensor] = {}
        self.raw_value_spectrum_sum: dict[int, torch.Tensor] = {}
        self.fig4_cos_sum: dict[int, dict[str, float]] = {}
        self.fig4_tokens: dict[int, int] = defaultdict(int)
        # Within one forward pass only.
        self._column_mass: torch.Tensor | None = None
        self._first_kv: tuple[torch.Tensor, torch.Tensor] | None = None
        self._previous_kv: tuple[torch.Tensor, torch.Tensor] | None = None

    # ------------------------------------------------------------------ model hooks
    def on_qkv(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        b, h, t, _ = q.shape
        s = k.shape[2]
        if s % t:
            raise ValueError("AnalysisTrace analyses whole sequences; run the model without a KV cache")
        key_blocks = s // t
        own_k, own_v = k[:, :, :t], v[:, :, :t]  # cross-layer attention appends other layers' blocks after these
        self._add_values(layer, own_v)
        if layer == 0 and self.fig4:
            self._first_kv = (own_k, own_v)

        rows = max(1, self.attention_budget // (b * h * s))
        for first_row in range(0, t, rows):
            q_rows = q[:, :, first_row:first_row + rows]
            attention(q_rows, k, v, offset=first_row, key_blocks=key_blocks, impl="explicit",
                      on_probs=lambda probs: self.add_attention_rows(layer, probs, key_blocks))
            if self.fig4 and layer > 0:
                self._add_fig4(layer, q_rows, own_k, own_v, first_row)
        self.close_attention(layer)
        if self.fig4:
            self._previous_kv = (own_k, own_v)

    def on_hidden(self, layer: int, hidden: torch.Tensor) -> None:
        if layer < 0:  # the embeddings: not a layer's output
            return
        self.similarity_sum[layer] += metrics.mean_pairwise_cosine(hidden).sum().item()
        _add(self.hidden_norm_sum, layer, metrics.norms_by_position(hidden).sum(0).cpu())

    # ------------------------------------------------------------------ attention reduction
    def add_attention_rows(self, layer: int, probs: torch.Tensor, key_blocks: int = 1) -> None:
        """Reduce a block of attention rows [B, H, rows, S] of `layer` to per-token column mass."""
        self.largest_attention_block = max(self.largest_attention_block, probs.numel())
        mass = metrics.attention_column_mass(probs, key_blocks)
        self._column_mass = mass if self._column_mass is None else self._column_mass + mass

    def close_attention(self, layer: int) -> None:
        """All rows of `layer` have been added: turn the column mass into importance statistics."""
        importance = metrics.normalise(self._column_mass).cpu()  # [B, T]
        self._column_mass = None
        if layer == 0:
            self.num_seqs += importance.shape[0]
        _add(self.importance_sum, layer, importance.sum(0))
        self.entropy_sum[layer] += metrics.importance_entropy(importance).sum().item()
        _add(self.top_i_sum, layer, metrics.top_i_share(importance, self.top_i).sum(0))

    # ------------------------------------------------------------------ values and Fig. 4
    def _add_values(self, layer: int, values: torch.Tensor) -> None:
        _add(self.value_norm_sum, layer, metrics.norms_by_position(values).sum(0).cpu())
        _add(self.value_spectrum_sum, layer, metrics.value_spectrum(metrics.heads_as_features(values)).sum(0).cpu())

    def add_raw_values(self, layer: int, values: torch.Tensor) -> None:
        """The output of layer's W_V, [B, T, Hkv*d]: V_n before residual mixing (equal to the used values in a
        vanilla layer)."""
        _add(self.raw_value_norm_sum, layer, metrics.norms_by_position(values).sum(0).cpu())
        _add(self.raw_value_spectrum_sum, layer, metrics.value_spectrum(values).sum(0).cpu())

    def _add_fig4(self, layer: int, q_rows, k_n, v_n, first_row: int) -> None:
        sums = self.fig4_cos_sum.setdefault(layer, defaultdict(float))
        for reference, (k_m, v_m) in (("previous", self._previous_kv), ("first", self._first_kv)):
            out = metrics.cross_layer_outputs(q_rows, k_n, v_n, k_m, v_m, offset=first_row)
            for eq in ("eq4", "eq6"):
                sums[reference, eq] += metrics.token_cosine(out["eq2"], out[eq]).sum().item()
        self.fig4_tokens[layer] += q_rows.shape[0] * q_rows.shape[2]

    def end_sequence_batch(self) -> None:
        """Forget what was held for one forward pass (the first and previous layers' K/V)."""
        self._first_kv = self._previous_kv = None

    # ------------------------------------------------------------------ results
    def summary(self, spectrum_layer: int | None = None) -> dict:
        """Per-layer means as JSON-ready lists (index i = layer i+1); see `runner` for the schema.

        `spectrum_layer` (1-based, default the middle layer) picks the layer whose full value spectrum is kept.
        Value and Fig. 4 entries exist only when the q/k/v hook ran (not for Hugging Face models).
        """
        if self.num_seqs == 0:
            raise ValueError("no sequences were analysed")
        n, layers = self.num_seqs, sorted(self.importance_sum)
        importance = [self.importance_sum[i] / n for i in layers]
        out = {
            "n_layer": len(layers),
            "num_seqs": n,
            "seq_len": importance[0].shape[0],
            "entropy": [self.entropy_sum[i] / n for i in layers],
            "entropy_uniform_causal": metrics.entropy_of_uniform_causal(importance[0].shape[0]),
            "importance_by_position": [a.tolist() for a in importance],
            "importance_first": [a[0].item() for a in importance],
            "importance_others": [a[1:].mean().item() for a in importance],
            "top_i_importance": [(self.top_i_sum[i] / n).tolist() for i in layers],
            "similarity": [self.similarity_sum[i] / n for i in layers],
        }
        out.update(_norm_entries("hidden", [self.hidden_norm_sum[i] / n for i in layers]))
        if self.value_spectrum_sum:
            out.update(_norm_entries("value", [self.value_norm_sum[i] / n for i in layers]))
            spectra = {i: self.value_spectrum_sum[i] / n for i in layers}
            chosen = len(layers) // 2 + 1 if spectrum_layer is None else spectrum_layer
            if not 1 <= chosen <= len(layers):
                raise ValueError(f"spectrum_layer={spectrum_layer} must be a layer number in [1, {len(layers)}]")
            out["top_eigenvalue"] = [spectra[i][0].item() for i in layers]
            out["top_eigenvalue_share"] = [_top_share(spectra[i]) for i in layers]
            out["value_spectrum_layer"] = chosen
            out["value_spectrum"] = spectra[chosen - 1].tolist()
        if self.raw_value_spectrum_sum:  # null for layers without their own W_V (SVFormer, CLA)
            raw = {i: self.raw_value_norm_sum[i] / n for i in self.raw_value_spectrum_sum}
            out["raw_value_norm_first"] = [raw[i][0].item() if i in raw else None for i in layers]
            out["raw_value_norm_others"] = [raw[i][1:].mean().item() if i in raw else None for i in layers]
            out["raw_value_top_eigenvalue"] = [
                (self.raw_value_spectrum_sum[i][0] / n).item() if i in raw else None for i in layers
            ]
            out["raw_value_top_eigenvalue_share"] = [
                _top_share(self.raw_value_spectrum_sum[i]) if i in raw else None for i in layers
            ]
        if self.fig4:
            for reference, prefix in (("previous", "fig4_cos"), ("first", "fig4_first_cos")):
                for eq in ("eq4", "eq6"):
                    out[f"{prefix}_{eq}"] = [
                        self.fig4_cos_sum[i][reference, eq] / self.fig4_tokens[i] if i in self.fig4_cos_sum else None
                        for i in layers
                    ]
        return out


def _top_share(spectrum: torch.Tensor) -> float:
    """The leading eigenvalue's share of the second moment's trace (the sum of all eigenvalues): how much of the
    values' energy lies along one direction, whatever their scale. The largest eigenvalue alone grows with the
    values' norm, which a residual that adds V_1 changes by itself (Fig. 12's comparison confounds the two)."""
    return (spectrum[0] / spectrum.sum()).item()


def _norm_entries(kind: str, by_position: list[torch.Tensor]) -> dict:
    return {
        f"{kind}_norm_by_position": [x.tolist() for x in by_position],
        f"{kind}_norm_first": [x[0].item() for x in by_position],
        f"{kind}_norm_others": [x[1:].mean().item() for x in by_position],
    }


def _add(store: dict[int, torch.Tensor], layer: int, value: torch.Tensor) -> None:
    store[layer] = value if layer not in store else store[layer] + value
