"""Tokenizers: a byte-level BPE trained on the training corpus, any tokenizer.json file, or a hub tokenizer.

All three are `tokenizers.Tokenizer` objects; documents are encoded without special tokens and the data
pipeline appends the EOS token itself.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import numpy as np
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


def _byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE's character for every byte -> the byte (GPT-2's `bytes_to_unicode`, which the `tokenizers`
    ByteLevel pre-tokenizer and decoder use): printable Latin-1 bytes stand for themselves, the other 68 bytes for the
    characters from U+0100 up, in byte order (so b' ' is 'Ġ', b'\\n' is 'Ċ')."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [byte for byte in range(256) if byte not in printable]
    return {**{chr(byte): byte for byte in printable}, **{chr(256 + n): byte for n, byte in enumerate(shifted)}}


def _decoder_types(spec: dict | None) -> set[str]:
    """The `type`s of a tokenizer.json decoder, sequences included."""
    return {spec.get("type"), *(t for part in spec.get("decoders") or [] for t in _decoder_types(part))} if spec else set()


def token_bytes(tokenizer: Tokenizer) -> list[bytes]:
    """The UTF-8 bytes that every token id stands for in decoded text: a byte-level token's characters mapped back to
    their bytes (one byte each: 'Ġ' is b' ', 'Ã©' is 'é'), a non-special added token's content encoded, and b"" for a
    special token such as EOS, which is no text. ValueError for a tokenizer that is not byte-level."""
    decoder = _decoder_types(json.loads(tokenizer.to_str()).get("decoder"))
    if "ByteLevel" not in decoder:
        raise ValueError(f"bits per byte need a byte-level BPE tokenizer (its decoder is {sorted(map(str, decoder))})")
    alphabet, added = _byte_level_alphabet(), tokenizer.get_added_tokens_decoder()
    out = []
    for token_id in range(tokenizer.get_vocab_size(with_added_tokens=True)):
        token = added[token_id].content if token_id in added else tokenizer.id_to_token(token_id)
        if token is None or (token_id in added and added[token_id].special):
            out.append(b"")  # a special token, or a hole in the ids (never produced)
        elif token_id in added:
            out.append(token.encode("utf-8"))
        elif any(char not in alphabet for char in token):
            raise ValueError(f"token {token_id} ({token!r}) is not made of byte-level characters: the tokenizer is "
                             "not a byte-level BPE")
        else:
            out.append(bytes(alphabet[char] for char in token))
    return out


def token_byte_lengths(tokenizer: Tokenizer) -> np.ndarray:
    """UTF-8 bytes of every token id (`token_bytes`; int64, one per id of the vocabulary with added tokens), for bits
    per byte: the bytes that ids decode to are the sum of their entries (special tokens such as EOS count 0)."""
    return np.array([len(b) for b in token_bytes(tokenizer)], dtype=np.int64)
