"""Deterministic train/val/test split, tokenisation with EOS, packing into fixed-length sequences, and the
on-disk caches they are kept in.

Cache layout (under `cache_dir`, see `default_cache_dir`):

    hub/<snapshot key>.jsonl            documents taken from a hub stream (text, domain), one JSON per line
    tokenizers/bpe-<corpus key>-v<V>.json   byte-level BPE trained on the corpus's train split
    tokens/<corpus key>-<tokenizer key>/    flat token streams, every document followed by EOS
        meta.json, train.bin, val.<d>.bin, test.<d>.bin     (<d> = index of the domain in meta["domains"])
        train_counts.npy    occurrences of every token id in train.bin (the unigram reference, see unigram.py)
    packed/<corpus key>-<tokenizer key>-T<seq_len>/   sequences of seq_len+1 tokens, np.load(mmap_mode="r")
        meta.json, train.npy, val.<d>.npy, test.<d>.npy

Every entry is written under a temporary name and renamed into place, so a killed process leaves either a
complete entry or none. Each entry's meta also records the size and a content hash of each of its files (a trained
tokenizer has them in `<name>.meta.json` beside it); an entry is checked against them when it is opened and rebuilt
when it is damaged (a file truncated, changed or missing, the meta missing).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TextIO

import numpy as np
from tokenizers import Tokenizer

from lit_resformer.corpora.sources import Document, canonical_record, stable_hash

SPLITS = ("train", "val", "test")
_ENCODE_BATCH = 512  # documents per encode_batch call: big enough for the Rust thread pool, small in memory


def digest(*parts: str) -> str:
    hasher = hashlib.blake2b(digest_size=8)
    for part in parts:
        hasher.update(part.encode("utf-8"))
        hasher.update(b"\x00")
    return hasher.hexdigest()


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size < 2**16 else np.uint32)


# ---------------------------------------------------------------------------------------------------------
# atomic cache writes


@contextlib.contextmanager
def atomic_file(path: Path, binary: bool = False) -> Iterator[TextIO | BinaryIO]:
    """Yield a file (text, or bytes if `binary`) to write; it appears at `path` only if the block succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") if binary else os.fdopen(descriptor, "w", encoding="utf-8") as out:
            yield out
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_file(path) as out:
        out.write(text)


# ---------------------------------------------------------------------------------------------------------
# integrity of cache entries

META = "meta.json"
FILES = "files"  # meta key: file name -> {"bytes": size, "blake2b": content hash}


def file_digest(path: Path, chunk: int = 1 << 22) -> str:
    hasher = hashlib.blake2b(digest_size=16)
    with path.open("rb") as data:
        while block := data.read(chunk):
            hasher.update(block)
    return hasher.hexdigest()


def describe_files(directory: Path, names: Iterable[str]) -> dict[str, dict]:
    """What a meta records of the files it vouches for: their sizes and content hashes."""
    return {name: {"bytes": (directory / name).stat().st_size, "blake2b": file_digest(directory / name)}
            for name in names}


def files_problem(directory: Path, files: dict[str, dict]) -> str | None:
    """Why the files under `directory` are not the ones `files` (from `describe_files`) describes, or None."""
    for name, expected in files.items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != expected["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, not {expected['bytes']}"
        if file_digest(path) != expected["blake2b"]:
            return f"{name} does not match its content hash"
    return None


def entry_problem(directory: Path) -> str | None:
    """Why a cache directory cannot be used (its meta.json missing or unreadable, a file missing, truncated or
    changed), or None when it is intact."""
    try:
        meta = read_json(directory / META)
        files = meta[FILES]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"{META} is missing or unreadable ({type(error).__name__})"
    return files_problem(directory, files)


def write_meta(directory: Path, meta: dict, names: Iterable[str]) -> None:
    """meta.json of a cache entry, vouching for the files `names` in it."""
    atomic_write_text(directory / META, json.dumps({**meta, FILES: describe_files(directory, names)}, indent=1))


# ---------------------------------------------------------------------------------------------------------
# split


@dataclass
class CorpusScan:
    """One pass over a corpus: its fingerprint and which documents are held out for validation and test.

    In every domain the documents are ranked by a stable hash of their text; the first k (k = round(fraction *
    documents), at least 1) are validation, the next k test, the rest train. The split therefore does not depend
    on the file order or the seed, and every domain has validation and test documents.
    """

    fingerprint: str
    holdout_fraction: float
    documents: dict[str, int] = field(default_factory=dict)  # domain -> number of documents
    held_out: dict[str, dict[int, str]] = field(default_factory=dict)  # domain -> {index in domain: split}
    # sha256 of the canonical document stream (`canonical_record`): the corpus's name in run summaries
    content_sha256: str = ""

    @property
    def domains(self) -> list[str]:
        return sorted(self.documents)

    @property
    def key(self) -> str:
        """Identifies the corpus and its split (what the tokenizer is trained on and the token caches hold)."""
        return digest(self.fingerprint, repr(self.holdout_fraction))

    def assign(self, documents: Iterable[Document]) -> Iterator[tuple[str, Document]]:
        """Pair each document of the same corpus (same order as scanned) with its split."""
        seen: dict[str, int] = {}
        for document in documents:
            index = seen.get(document.domain, 0)
            seen[document.domain] = index + 1
            yield self.held_out[document.domain].get(index, "train"), document


def scan_corpus(documents: Iterable[Document], holdout_fraction: float) -> CorpusScan:
    hasher = hashlib.blake2b(digest_size=16)
    content = hashlib.sha256()
    ranks: dict[str, list[tuple[int, int]]] = {}
    for document in documents:
        hasher.update(document.domain.encode("utf-8") + b"\x00" + document.text.encode("utf-8") + b"\x01")
        content.update(canonical_record(document.domain, document.text))
        in_domain = ranks.setdefault(document.domain, [])
        in_domain.append((stable_hash(document.text), len(in_domain)))
    if not ranks:
        raise ValueError("data: the corpus has no documents (every document was empty)")
    scan = CorpusScan(fingerprint=hasher.hexdigest(), holdout_fraction=holdout_fraction,
                      content_sha256=content.hexdigest())
    for domain, in_domain in ranks.items():
        count = len(in_domain)
        held_out = max(1, round(holdout_fraction * count))
        if count < 2 * held_out + 1:
            raise ValueError(
                f"data: domain {domain!r} has {count} document(s); it needs at least {2 * held_out + 1} "
                "(validation, test and training documents). Add documents to it or merge it into another domain"
            )
        in_domain.sort()
        scan.documents[domain] = count
        scan.held_out[domain] = {index: "val" for _, index in in_domain[:held_out]}
        scan.held_out[domain].update({index: "test" for _, index in in_domain[held_out : 2 * held_out]})
    return scan


# ---------------------------------------------------------------------------------------------------------
# tokenise + pack


def stream_name(split: str, domain_index: int | None = None) -> str:
    """File stem of one token stream: train is one stream of all domains, val/test one per domain."""
    return split if split == "train" else f"{split}.{domain_index}"


def write_token_streams(
    assigned: Iterable[tuple[str, Document]],
    tokenizer: Tokenizer,
    eos_id: int,
    domains: list[str],
    out_dir: Path,
) -> dict[str, int]:
    """Encode every document, append EOS, and append the ids to `<stream>.bin` files; returns their lengths."""
    dtype = token_dtype(tokenizer.get_vocab_size())
    domain_index = {domain: index for index, domain in enumerate(domains)}
    lengths: dict[str, int] = {}
    files = {}
    try:

        def flush(batch: list[tuple[str, Document]]) -> None:
            encodings = tokenizer.encode_batch([doc.text for _, doc in batch], add_special_tokens=False)
            for (split, doc), encoding in zip(batch, encodings, strict=True):
                name = stream_name(split, domain_index[doc.domain])
                if name not in files:
                    files[name] = (out_dir / f"{name}.bin").open("wb")
                ids = np.asarray(encoding.ids + [eos_id], dtype=dtype)
                files[name].write(ids.tobytes())
                lengths[name] = lengths.get(name, 0) + len(ids)

        batch: list[tuple[str, Document]] = []
        for item in assigned:
            batch.append(item)
            if len(batch) == _ENCODE_BATCH:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
    finally:
        for file in files.values():
            file.close()
    return lengths


def read_token_stream(tokens_dir: Path, name: str, length: int, dtype: np.dtype) -> np.ndarray:
    if length == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(tokens_dir / f"{name}.bin", dtype=dtype, mode="r", shape=(length,))


def pack_sequences(tokens: np.ndarray, seq_len: int) -> np.ndarray:
    """View a token stream as rows of seq_len + 1 tokens, row i = tokens[i*seq_len : i*seq_len + seq_len + 1].

    Consecutive rows share one token (the last label of a row is the first input of the next), so every
    next-token pair of the stream is trained on exactly once; the tail that does not fill a row is dropped.
    """
    rows = (len(tokens) - 1) // seq_len if len(tokens) > seq_len else 0
    if rows == 0:
        return np.zeros((0, seq_len + 1), dtype=tokens.dtype)
    return np.lib.stride_tricks.sliding_window_view(tokens[: rows * seq_len + 1], seq_len + 1)[::seq_len]


def write_packed(tokens: np.ndarray, seq_len: int, path: Path, rows_per_copy: int = 4096) -> int:
    """Write `pack_sequences(tokens, seq_len)` to a .npy file without holding it in memory; returns its rows."""
    packed = pack_sequences(tokens, seq_len)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=tokens.dtype, shape=packed.shape)
    for start in range(0, len(packed), rows_per_copy):
        out[start : start + rows_per_copy] = packed[start : start + rows_per_copy]
    out.flush()
    del out
    return len(packed)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))
