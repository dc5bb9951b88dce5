"""Tokenizers: a byte-level BPE trained on the training corpus, any tokenizer.json file, or a hub tokenizer.

All three are `tokenizers.Tokenizer` objects; documents are encoded without special tokens and the data
pipeline appends the EOS token itself.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS_TOKEN = "<|endoftext|>"
# The byte alphabet (256) plus EOS is the smallest vocabulary a byte-level BPE can have.
MIN_BPE_VOCAB_SIZE = 257
# What the paper trains with: RedPajama-INCITE-7B-Base's GPT-NeoX tokenizer (50,277 tokens).
PAPER_TOKENIZER = "togethercomputer/RedPajama-INCITE-7B-Base"

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

TokenizerKind = Literal["bpe", "file", "hub"]


class TokenizerMismatch(ValueError):
    """A checkpoint was trained on other token ids than this run's tokenizer produces."""


def parse_tokenizer_spec(spec: str) -> tuple[TokenizerKind, str]:
    """Classify `data.tokenizer` without loading anything: ("bpe", ""), ("file", path) or ("hub", name)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(
            "data.tokenizer: must be 'bpe', a path to a tokenizer.json, or a hub name 'owner/name'"
        )
    spec = spec.strip()
    if spec == "bpe":
        return "bpe", ""
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "tokenizer.json").is_file():
        return "file", str(path / "tokenizer.json")
    if path.is_file():
        return "file", str(path)
    if spec.endswith(".json") or spec.startswith((".", "/", "~")):
        raise ValueError(f"data.tokenizer: tokenizer file {spec!r} does not exist")
    if _HUB_NAME.match(spec):
        return "hub", spec
    raise ValueError(
        f"data.tokenizer: unknown tokenizer {spec!r}; use 'bpe' (trained on the corpus), a path to a "
        f"tokenizer.json file, or a hub name such as {PAPER_TOKENIZER!r}"
    )


def train_bpe(texts: Iterable[str], vocab_size: int, eos_token: str = EOS_TOKEN) -> Tokenizer:
    """Train a GPT-2-style byte-level BPE (every byte is a token, so any text round-trips exactly)."""
    if vocab_size < MIN_BPE_VOCAB_SIZE:
        raise ValueError(
            f"data.bpe_vocab_size: must be >= {MIN_BPE_VOCAB_SIZE} (256 bytes + EOS), got {vocab_size}"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[eos_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def load_tokenizer(kind: TokenizerKind, value: str) -> Tokenizer:
    """Load a "file" or "hub" tokenizer (see `parse_tokenizer_spec`)."""
    if kind == "file":
        try:
            return Tokenizer.from_file(value)
        except Exception as error:  # tokenizers raises a bare Exception for malformed files
            raise ValueError(f"data.tokenizer: {value!r} is not a valid tokenizer.json ({error})") from None
    if kind == "hub":
        try:
            return Tokenizer.from_pretrained(value)
        except Exception as error:  # network, offline mode, missing repo or gated repo
            raise RuntimeError(
                f"data.tokenizer: could not load hub tokenizer {value!r} ({type(error).__name__}: {error}). "
                "It needs network access to the Hugging Face hub once (or a copy in the local HF cache); "
                "offline, point data.tokenizer at a tokenizer.json file instead"
            ) from None
    raise ValueError(f"load_tokenizer: kind must be 'file' or 'hub', got {kind!r}")


def eos_id_of(tokenizer: Tokenizer, eos_token: str) -> int:
    token_id = tokenizer.token_to_id(eos_token)
    if token_id is None:
        raise ValueError(
            f"data.eos_token: the tokenizer has no token {eos_token!r}; set data.eos_token to its end-of-text token"
        )
    return token_id


def tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    """Hash of the tokenizer's full serialisation: equal fingerprints encode text identically."""
    return hashlib.blake2b(tokenizer.to_str().encode("utf-8"), digest_size=8).hexdigest()
