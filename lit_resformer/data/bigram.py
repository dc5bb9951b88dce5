"""The bigram reference: how well the previous token alone predicts the validation tokens.

A model that beats the unigram plateau first learns which token follows which; until its loss is below this
reference it has learnt little that a count table of the training split does not know, so an early-training
comparison between architectures measures how fast each climbs toward bigram statistics, not what the paper
is about.

The reference is interpolated Kneser-Ney (Chen & Goodman's best-performing n-gram smoothing), fitted on the
training split:

    P(w | v) = max(c(v,w) - D, 0) / c(v) + D N(v•) / c(v) · P_cont(w)          (c(v) > 0; else P_cont(w))
    P_cont(w) = max(N(•w) - D', 0) / N(••) + D' |{w: N(•w) > 0}| / N(••) · 1/V

with c(v,w) the count of the pair (v, w) in the training stream, c(v) = Σ_w c(v,w), N(v•) the number of distinct
followers of v, N(•w) the number of distinct predecessors of w, N(••) the number of distinct pairs and V the
vocabulary size. The absolute discounts D, D' are Ney's estimate n1 / (n1 + 2 n2) from how many pair types (and
predecessor counts) occur once and twice. Why this and not add-k: at a vocabulary of 4,096 and a few million
training tokens most pairs are never seen, and add-k gives every unseen pair the same share of a context's mass
whatever the next token's frequency, so it over-smooths and the reference would be weaker than a fair count model
(easy to beat). Kneser-Ney backs off to how many contexts a token follows, the best-known lower order for unseen
pairs, and its final interpolation with the uniform keeps every token's probability above zero.

Pairs are consecutive tokens of the training stream, across document boundaries (EOS then the next document's
first token), as the packed training sequences present them; the counts are kept sparse (one int64 id
v·V + w per distinct pair), so vocabularies of 50k cost memory in the distinct pairs, not V².
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_PAIR_CHUNK = 1 << 24  # pairs per np.unique call: a memory-mapped stream is never read whole into memory
# Discount bounds: Ney's estimate is undefined or degenerate on tiny corpora (no pair seen twice gives D = 1, no
# singleton gives D = 0, which would leave unseen pairs of a seen context without probability).
_DISCOUNT_BOUNDS = (0.1, 0.9)


@dataclass(frozen=True)
class BigramCounts:
    """Distinct pairs of a token stream as sorted ids previous · vocab_size + next, with their counts."""

    vocab_size: int
    pairs: np.ndarray  # int64, sorted, unique
    counts: np.ndarray  # int64, same length

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def bigram_counts(tokens: np.ndarray, vocab_size: int) -> BigramCounts:
    """The pairs (tokens[i], tokens[i+1]) of a stream, counted chunk by chunk."""
    pairs, counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    for start in range(0, max(len(tokens) - 1, 0), _PAIR_CHUNK):
        chunk = np.asarray(tokens[start : start + _PAIR_CHUNK + 1], dtype=np.int64)  # overlaps the next by one
        outside = chunk[(chunk < 0) | (chunk >= vocab_size)]
        if outside.size:
            raise ValueError(f"token id {outside[0]} is outside the vocabulary of {vocab_size} ids")
        ids, chunk_counts = np.unique(chunk[:-1] * vocab_size + chunk[1:], return_counts=True)
        merged, inverse = np.unique(np.concatenate([pairs, ids]), return_inverse=True)
        counts = np.bincount(inverse, weights=np.concatenate([counts, chunk_counts]), minlength=len(merged))
        pairs, counts = merged, counts.astype(np.int64)
    return BigramCounts(vocab_size, pairs, counts)


def _discount(count_of_counts: np.ndarray) -> float:
    """Ney's absolute discount n1 / (n1 + 2 n2) from the numbers of counts equal to 1 and 2, kept in bounds."""
    n1, n2 = int((count_of_counts == 1).sum()), int((count_of_counts == 2).sum())
    estimate = n1 / (n1 + 2 * n2) if n1 + n2 else 0.5
    return float(np.clip(estimate, *_DISCOUNT_BOUNDS))


class KneserNeyBigram:
    """Interpolated Kneser-Ney bigram of `BigramCounts` (the formula in the module docstring)."""

    def __init__(self, bigrams: BigramCounts):
        if not len(bigrams.pairs):
            raise ValueError("a bigram model needs a training stream of at least two tokens")
        vocab = bigrams.vocab_size
        self.bigrams = bigrams
        previous, following = np.divmod(bigrams.pairs, vocab)
        self.discount = _discount(bigrams.counts)
        self.context_total = np.bincount(previous, weights=bigrams.counts, minlength=vocab)  # c(v)
        self.context_types = np.bincount(previous, minlength=vocab)  # N(v•)
        predecessors = np.bincount(following, minlength=vocab)  # N(•w)
        lower_discount = _discount(predecessors)
        seen = int((predecessors > 0).sum())
        self.continuation = (
            np.maximum(predecessors - lower_discount, 0) + lower_discount * seen / vocab
        ) / len(bigrams.pairs)

    def probabilities(self, previous: np.ndarray, following: np.ndarray) -> np.ndarray:
        """P(following | previous), elementwise."""
        previous, following = np.asarray(previous, dtype=np.int64), np.asarray(following, dtype=np.int64)
        vocab = self.bigrams.vocab_size
        for name, ids in (("previous", previous), ("following", following)):
            if ids.size and (ids.min() < 0 or ids.max() >= vocab):
                raise ValueError(f"{name}: token id outside the vocabulary of {vocab} ids")
        ids = previous * vocab + following
        where = np.minimum(np.searchsorted(self.bigrams.pairs, ids), len(self.bigrams.pairs) - 1)
        pair_count = np.where(self.bigrams.pairs[where] == ids, self.bigrams.counts[where], 0)
        context = self.context_total[previous]
        lower = self.continuation[following]
        with np.errstate(divide="ignore", invalid="ignore"):  # unseen contexts take the lower order alone
            interpolated = (np.maximum(pair_count - self.discount, 0)
                            + self.discount * self.context_types[previous] * lower) / context
        return np.where(context > 0, interpolated, lower)

    def loss(self, previous: np.ndarray, following: np.ndarray) -> float:
        """Mean cross-entropy (nats) of `following` given `previous`."""
        if np.size(following) == 0:
            raise ValueError("the bigram loss of no tokens is undefined")
        return float(-np.log(self.probabilities(previous, following)).mean())
