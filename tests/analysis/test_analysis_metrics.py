"""Analysis metrics on constructed inputs with known answers (paper Eq. 2-13, Fig. 4, 21)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lit_resformer.analysis import metrics as M


def uniform_causal_probs(batch: int, heads: int, t: int) -> torch.Tensor:
    rows = torch.ones(t, t).tril()
    return (rows / rows.sum(-1, keepdim=True)).expand(batch, heads, t, t).clone()


def test_uniform_causal_attention_gives_closed_form_importance_and_entropy():
    t = 12
    importance = M.token_importance(uniform_causal_probs(2, 3, t))
    # a_j = (1/T) sum_{t >= j} 1/(t+1), written out term by term.
    expected = [sum(1.0 / (row + 1) for row in range(j, t)) / t for j in range(t)]
    assert torch.allclose(importance, torch.tensor([expected, expected], dtype=torch.float64), atol=1e-12)
    entropy = -sum(a * math.log(a) for a in expected)
    assert torch.allclose(M.importance_entropy(importance), torch.tensor([entropy, entropy], dtype=torch.float64))
    assert M.entropy_of_uniform_causal(t) == pytest.approx(entropy)
    assert entropy < math.log(t)  # causal masking already concentrates importance on early tokens


def test_all_attention_on_first_token_gives_zero_entropy():
    t = 9
    probs = torch.zeros(1, 2, t, t)
    probs[..., 0] = 1.0
    importance = M.token_importance(probs)
    assert torch.equal(importance[0], torch.nn.functional.one_hot(torch.tensor(0), t).double())
    assert M.importance_entropy(importance).item() == 0.0
    assert torch.allclose(M.top_i_share(importance, 4), torch.ones(1, 4, dtype=torch.float64))


def test_top_i_share_and_first_token_ratio():
    importance = torch.tensor([0.2, 0.5, 0.1, 0.2])
    assert torch.allclose(M.top_i_share(importance, 3), torch.tensor([0.5, 0.7, 0.9]))
    assert M.first_to_others(importance).item() == pytest.approx(0.2 / (0.8 / 3))
    with pytest.raises(ValueError, match="top_i"):
        M.top_i_share(importance, 5)


def test_cross_layer_attention_blocks_fold_onto_token_positions():
    """Keys of block 2 are another layer's keys at the same positions: their attention counts for that token."""
    t = 6
    half = uniform_causal_probs(1, 2, t) / 2
    probs = torch.cat([half, half], dim=-1)  # every row still sums to 1 over both blocks
    assert torch.allclose(M.token_importance(probs, key_blocks=2), M.token_importance(2 * half))


def test_similarity_identical_orthogonal_and_brute_force():
    same = torch.randn(1, 1, 16).expand(2, 7, 16)
    assert torch.allclose(M.mean_pairwise_cosine(same), torch.ones(2, dtype=torch.float64))
    orthogonal = torch.eye(5)[None] * torch.arange(1.0, 6.0)[None, :, None]  # different norms, orthogonal
    assert M.mean_pairwise_cosine(orthogonal).abs().item() < 1e-12
    h = torch.randn(3, 8, 4)
    cos = torch.nn.functional.cosine_similarity(h[:, :, None], h[:, None, :], dim=-1)
    off_diagonal = (cos.sum((1, 2)) - cos.diagonal(dim1=1, dim2=2).sum(-1)) / (8 * 7)
    assert torch.allclose(M.mean_pairwise_cosine(h), off_diagonal.double(), atol=1e-6)


def test_norms_concatenate_heads():
    values = torch.randn(2, 3, 5, 4)  # [B, Hkv, T, d]
    by_hand = values.permute(0, 2, 1, 3).reshape(2, 5, 12).norm(dim=-1)
    assert torch.allclose(M.norms_by_position(values), by_hand.double(), atol=1e-6)
    hidden = torch.tensor([[[3.0, 4.0], [0.0, 1.0], [0.0, 2.0]]])
    assert M.norms_by_position(hidden).tolist() == [[5.0, 1.0, 2.0]]
    assert M.first_to_others(M.norms_by_position(hidden)).item() == pytest.approx(5.0 / 1.5)


def _naive_value_spectra(values):
    """Eq. 12 by hand: for each sequence, (1/l) sum_t v_t v_t^T built token by token, then its eigenvalues."""
    spectra = []
    for sequence in values.double():
        second_moment = sum(torch.outer(v, v) for v in sequence) / len(sequence)
        spectra.append(sorted(np.linalg.eigvalsh(second_moment.numpy()).tolist(), reverse=True))
    return torch.tensor(spectra, dtype=torch.float64)


def test_value_spectrum_is_uncentred_per_sequence():
    values = torch.randn(3, 9, 5, generator=torch.Generator().manual_seed(0)) + 2.0  # a shared offset
    assert torch.allclose(M.value_spectrum(values), _naive_value_spectra(values), atol=1e-10)
    # Uncentred: tokens that all equal one vector c give c c^T, whose top eigenvalue is |c|^2 (a covariance gives 0).
    c = torch.tensor([3.0, 4.0, 0.0])
    spectrum = M.value_spectrum(c.expand(1, 6, 3))
    assert spectrum[0].tolist() == pytest.approx([25.0, 0.0, 0.0], abs=1e-9)
    # Per sequence, not pooled: two sequences along orthogonal axes each have top eigenvalue 1;
    # pooling their tokens first would give 1/2 on both axes.
    pair = torch.stack([torch.tensor([[1.0, 0.0]]).expand(4, 2), torch.tensor([[0.0, 1.0]]).expand(4, 2)])
    assert torch.allclose(M.value_spectrum(pair), torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64))
    features = M.heads_as_features(torch.arange(24.0).view(1, 2, 3, 4))  # [B, Hkv, T, d] -> [B, T, Hkv*d]
    assert features.shape == (1, 3, 8) and features[0, 1].tolist() == [4, 5, 6, 7, 16, 17, 18, 19]


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2)])
def test_fig4_equal_keys_make_eq4_exact(heads, kv_heads):
    """Eq. 2 with K_1 = K_n splits into two equal softmax blocks: exactly 1/2 A_n (V_n + V_1) (Eq. 4)."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, heads, 10, 8, generator=g)
    k, v_n, v_1 = (torch.randn(2, kv_heads, 10, 8, generator=g) for _ in range(3))
    same = M.cross_layer_outputs(q, k, v_n, k, v_n)  # V_1 = V_n and K_1 = K_n
    assert torch.allclose(M.token_cosine(same["eq2"], same["eq4"]), torch.ones(2, 10, dtype=torch.float64))
    out = M.cross_layer_outputs(q, k, v_n, k, v_1)  # only the keys equal: still exact
    assert torch.allclose(out["eq2"], out["eq4"], atol=1e-6)
    assert M.token_cosine(out["eq2"], out["eq6"]).mean() < 0.99  # identity mapping is not the same thing
    rows = M.cross_layer_outputs(q[:, :, 4:7], k, v_n, k, v_1, offset=4)  # a chunk of query rows
    for name in ("eq2", "eq4", "eq6"):
        assert torch.allclose(rows[name], out[name][:, :, 4:7], atol=1e-6)


def test_fig4_eq6_is_attention_plus_first_value():
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, 5, 4, generator=g)
    k_n, v_n, k_1, v_1 = (torch.randn(1, 1, 5, 4, generator=g) for _ in range(4))
    probs = (q @ k_n.transpose(-2, -1) / 2).masked_fill(~torch.ones(5, 5).tril().bool(), -math.inf).softmax(-1)
    out = M.cross_layer_outputs(q, k_n, v_n, k_1, v_1)
    assert torch.allclose(out["eq6"], probs @ v_n + v_1, atol=1e-6)
    assert torch.allclose(out["eq4"], 0.5 * probs @ (v_n + v_1), atol=1e-6)
