"""Attention-concentration metrics of the paper (§4.1.3-4.5), as small functions on tensors.

Shapes follow the model: attention probabilities [B, H, T, S] (S = key_blocks * T for cross-layer attention),
values [B, Hkv, T, d], hidden states [B, T, D]. Each function reduces one thing and knows nothing about
models or files; `trace.py` feeds them one layer (and one chunk of query rows) at a time.
"""

from __future__ import annotations

import torch

from lit_resformer.model.kernels import attention


# ------------------------------------------------------------------ token importance (Eq. 11, Fig. 1, 21)
def attention_column_mass(probs: torch.Tensor, key_blocks: int = 1) -> torch.Tensor:
    """[B, H, rows, key_blocks*T] -> [B, T]: attention each key token receives, summed over heads and rows.

    With cross-layer attention the k-th block holds the keys of another layer at the same positions, so the
    blocks are folded: token j's mass is what all its keys receive.
    """
    b, _, _, s = probs.shape
    if s % key_blocks:
        raise ValueError(f"key_blocks={key_blocks} does not divide the {s} attended keys")
    return probs.sum(dim=(1, 2), dtype=torch.float64).view(b, key_blocks, s // key_blocks).sum(1)


def normalise(mass: torch.Tensor) -> torch.Tensor:
    return mass / mass.sum(dim=-1, keepdim=True)


def token_importance(probs: torch.Tensor, key_blocks: int = 1) -> torch.Tensor:
    """Eq. 11's a_j: column means of the causal attention matrix, averaged over heads, normalised to sum 1.

    Rows of a causal attention matrix sum to 1, so the column means already sum to 1; normalising only
    guards against rounding and folds the key blocks of cross-layer attention.
    """
    return normalise(attention_column_mass(probs, key_blocks))


def importance_entropy(importance: torch.Tensor) -> torch.Tensor:
    """E = -sum_j a_j log a_j over the last dimension (0 log 0 = 0). Lower = attention more concentrated."""
    return -torch.special.xlogy(importance, importance).sum(dim=-1)


def uniform_causal_importance(seq_len: int) -> torch.Tensor:
    """Importance under uniform causal attention (row t spreads 1/(t+1) over tokens 0..t), in closed form:
    a_j = (1/T) sum_{t>=j} 1/(t+1). A reference level for the entropy plots."""
    inverse = 1.0 / torch.arange(1, seq_len + 1, dtype=torch.float64)
    return inverse.flip(0).cumsum(0).flip(0) / seq_len


def top_i_share(importance: torch.Tensor, top_i: int) -> torch.Tensor:
    """[..., T] -> [..., top_i]: share of the total importance held by the i most important tokens, i = 1..top_i."""
    if not 1 <= top_i <= importance.shape[-1]:
        raise ValueError(f"top_i={top_i} must be in [1, {importance.shape[-1]}] (the sequence length)")
    return importance.topk(top_i, dim=-1).values.cumsum(dim=-1) / importance.sum(dim=-1, keepdim=True)


def first_to_others(by_position: torch.Tensor) -> torch.Tensor:
    """[..., T] -> [...]: value at position 0 divided by the mean over positions 1..T-1 (needs T >= 2)."""
    if by_position.shape[-1] < 2:
        raise ValueError("first-token ratios need sequences of at least 2 tokens")
    return by_position[..., 0] / by_position[..., 1:].mean(dim=-1)


# ------------------------------------------------------------------ hidden states (Eq. 13, Fig. 19)
def mean_pairwise_cosine(hidden: torch.Tensor) -> torch.Tensor:
    """Eq. 13: [B, T, D] -> [B]: average cosine similarity over all pairs of distinct tokens of a sequence.

    sum_{i,j} cos(h_i, h_j) = |sum_i h_i/|h_i||^2, so the T x T similarity matrix is never formed.
    """
    t = hidden.shape[1]
    if t < 2:
        raise ValueError("pairwise similarity needs sequences of at least 2 tokens")
    unit = torch.nn.functional.normalize(hidden.double(), dim=-1)
    all_pairs = unit.sum(dim=1).pow(2).sum(dim=-1)
    return (all_pairs - t) / (t * (t - 1))


def norms_by_position(states: torch.Tensor) -> torch.Tensor:
    """L2 norm of each token's state: hidden [B, T, D] or per-head values [B, Hkv, T, d] (heads concatenated)
    -> [B, T]."""
    if states.dim() == 4:
        states = states.transpose(1, 2).flatten(2)
    return states.double().norm(dim=-1)


# ------------------------------------------------------------------ value spectrum (Eq. 12, Fig. 12)
def heads_as_features(values: torch.Tensor) -> torch.Tensor:
    """[B, Hkv, T, d] -> [B, T, Hkv*d]: one feature vector per token, heads concatenated."""
    return values.transpose(1, 2).flatten(2)


def value_spectrum(features: torch.Tensor) -> torch.Tensor:
    """Eq. 12: [B, T, D] -> [B, D]: eigenvalues (descending) of each sequence's uncentred (1/l) sum_t v_t v_t^T.

    One matrix per sequence, not a covariance over pooled tokens: the mean is not subtracted, so a
    common direction shared by all tokens shows as a large leading eigenvalue, as in the paper.
    """
    x = features.detach().double()
    second_moment = x.transpose(1, 2) @ x / x.shape[1]
    return torch.linalg.eigvalsh(second_moment).flip(-1)


# ------------------------------------------------------------------ the Fig. 4 check (Eq. 2, 4, 6)
def cross_layer_outputs(q, k_n, v_n, k_m, v_m, *, offset: int = 0) -> dict[str, torch.Tensor]:
    """The three outputs compared in Fig. 4 for layer n against an earlier layer m, for query rows starting at
    `offset` (q [B,H,rows,d], keys/values [B,Hkv,T,d] for all T positions):
      eq2: softmax(Q_n [K_n; K_m]^T / sqrt d) [V_n; V_m]  (cross-layer attention, both blocks causal)
      eq4: 1/2 A_n (V_n + V_m)                             (ResFormer's approximation)
      eq6: A_n V_n + V_m                                    (identity mapping, Eq. 6 with the one source m)
    Returns [B, H, rows, d] each. GQA is handled by the kernel (and by repeating V_m's heads for eq6)."""
    eq2 = attention(q, torch.cat([k_n, k_m], dim=2), torch.cat([v_n, v_m], dim=2), offset=offset, key_blocks=2)
    eq4 = 0.5 * attention(q, k_n, v_n + v_m, offset=offset)
    rows = q.shape[2]
    v_m_rows = v_m[:, :, offset:offset + rows].repeat_interleave(q.shape[1] // v_m.shape[1], dim=1)
    eq6 = attention(q, k_n, v_n, offset=offset) + v_m_rows
    return {"eq2": eq2, "eq4": eq4, "eq6": eq6}


def token_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity per token of two per-head outputs [B, H, T, d] (heads concatenated) -> [B, T]."""
    a, b = (x.transpose(1, 2).flatten(2).double() for x in (a, b))
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)


def entropy_of_uniform_causal(seq_len: int) -> float:
    """Entropy of `uniform_causal_importance(seq_len)`; log(T) would be the unattainable uniform maximum."""
    return float(importance_entropy(uniform_causal_importance(seq_len)))


__all__ = [
    "attention_column_mass", "cross_layer_outputs", "entropy_of_uniform_causal",
    "first_to_others", "heads_as_features", "importance_entropy", "mean_pairwise_cosine", "normalise",
    "norms_by_position", "token_cosine", "token_importance", "top_i_share", "uniform_causal_importance",
    "value_spectrum",
]
