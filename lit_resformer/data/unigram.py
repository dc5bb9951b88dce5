"""The unigram reference: how well a model that ignores context entirely predicts the validation tokens.

A language model first learns token frequencies and sits near this loss (the "unigram plateau") until it
starts using context; a run whose validation loss is not clearly below it has not learnt language yet. The
reference distribution is the training split's add-k smoothed unigram (add-one, Laplace, by default):

    p(t) = (c_t + k) / (N + k V)

with c_t the count of token t in the training split, N = Σ c_t and V the vocabulary size, so tokens never seen
in training keep a finite loss. The reference loss of a set of tokens x_1..x_M is -1/M Σ log p(x_i).
"""

from __future__ import annotations

import numpy as np

ADD_K = 1.0  # Laplace smoothing
_COUNT_CHUNK = 1 << 24  # tokens per bincount call: a memory-mapped stream is never read whole into memory


def token_counts(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Occurrences of every id 0..vocab_size-1 in `tokens` (int64, length vocab_size)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(tokens), _COUNT_CHUNK):
        chunk = np.bincount(tokens[start : start + _COUNT_CHUNK], minlength=vocab_size)
        if len(chunk) > vocab_size:
            raise ValueError(f"token id {len(chunk) - 1} is outside the vocabulary of {vocab_size} ids")
        counts += chunk
    return counts


def unigram_loss(train_counts: np.ndarray, tokens: np.ndarray, add_k: float = ADD_K) -> float:
    """Mean cross-entropy (nats) of `tokens` under the add-k smoothed unigram of `train_counts`."""
    if len(tokens) == 0:
        raise ValueError("the unigram loss of no tokens is undefined")
    if add_k <= 0:
        raise ValueError(f"add_k must be > 0 so that unseen tokens keep a finite loss, got {add_k}")
    log_probs = np.log(train_counts + add_k) - np.log(train_counts.sum() + add_k * len(train_counts))
    counts = token_counts(tokens, len(train_counts))
    return float(-(counts * log_probs).sum() / counts.sum())
