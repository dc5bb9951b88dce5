"""`LMDataModule`: corpus -> tokenizer -> packed, cached, memory-mapped sequences -> resumable loaders."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args

import lightning as L
import numpy as np
import torch
from filelock import FileLock
from tokenizers import Tokenizer
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

from lit_resformer.corpora.data_cache import atomic_directory, default_cache_dir
from lit_resformer.corpora.sources import (
    DEFAULT_ENCODING,
    SLIMPAJAMA,
    SLIMPAJAMA_DOMAIN_FIELD,
    TABLE2_MIXTURE,
    Document,
    MixtureUnit,
    check_mixture,
    embedded_documents,
    hub_documents,
    local_documents,
    local_files,
    utf8_bytes,
)

from .bigram import BigramCounts, KneserNeyBigram, bigram_counts
from .packing import (
    FILES,
    META,
    SPLITS,
    CorpusScan,
    atomic_file,
    atomic_write_text,
    describe_files,
    digest,
    entry_problem,
    files_problem,
    read_json,
    read_token_stream,
    scan_corpus,
    stream_name,
    token_dtype,
    write_meta,
    write_packed,
    write_token_streams,
)
from .tokenizer import (
    EOS_TOKEN,
    MIN_BPE_VOCAB_SIZE,
    TokenizerMismatch,
    eos_id_of,
    load_tokenizer,
    parse_tokenizer_spec,
    tokenizer_fingerprint,
    train_bpe,
)
from .unigram import token_counts, unigram_loss

log = logging.getLogger(__name__)

Source = Literal["embedded", "local", "hub", "pinned"]
# Used only to size the hub snapshot when the tokenizer (a BPE trained on that snapshot) does not exist yet:
# byte-level BPEs of a few thousand tokens average about 4 bytes of English text per token.
BYTES_PER_TOKEN_ESTIMATE = 4
RUN_SEED_ENV = "PL_GLOBAL_SEED"  # where Lightning's seed_everything leaves the run's seed (also for DDP ranks)
DATA_SEED = "data_seed"  # checkpoint state: the seed of the training order
BIGRAMS_FILE = "train_bigrams.npz"  # in the token cache: the training split's pair counts


def _cached_tokenizer_problem(path: Path, meta_path: Path) -> str | None:
    """Why a cached trained tokenizer cannot be used (its meta missing, the file changed or truncated), or None."""
    try:
        files = read_json(meta_path)[FILES]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{meta_path.name} is missing or unreadable"
    return files_problem(path.parent, files)


def _remove_if_damaged(entry: Path, what: str) -> None:
    """Delete a cache directory that fails its check (the caller, holding the entry's lock, builds it again)."""
    if entry.is_dir() and (problem := entry_problem(entry)) is not None:
        log.warning("%s %s is damaged (%s); building it again", what, entry, problem)
        shutil.rmtree(entry)


def _read_counts(path: Path) -> np.ndarray | None:
    try:
        return np.load(path)
    except (OSError, ValueError, EOFError):  # missing, truncated or not an array
        return None


class PackedSequences(Dataset):
    """Rows of a packed .npy file as {"input_ids": row[:-1], "labels": row[1:]} (int64).

    The file is memory-mapped on first access in each process, so DataLoader workers share the page cache
    instead of receiving a pickled copy of the array.
    """

    def __init__(self, path: Path, limit: int | None = None):
        self.path = path
        rows = len(np.load(path, mmap_mode="r"))
        self.length = rows if limit is None else min(rows, limit)
        self._rows: np.ndarray | None = None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if self._rows is None:
            self._rows = np.load(self.path, mmap_mode="r")
        if not 0 <= index < self.length:
            raise IndexError(index)
        row = torch.from_numpy(self._rows[index].astype(np.int64))
        return {"input_ids": row[:-1], "labels": row[1:]}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_rows": None}


class EpochShuffleSampler(StatefulDistributedSampler):
    """StatefulDistributedSampler whose saved position applies only to the epoch it was saved in.

    A checkpoint taken on the last batch of an epoch holds "all of this epoch yielded". Resuming from it,
    Lightning finishes that (now empty) epoch without drawing from the sampler, so the plain sampler would carry
    the pending skip into the next epoch and skip it whole. Remembering the epoch of the position avoids that.
    """

    _EPOCH = "epoch"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.position_epoch: int | None = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), self._EPOCH: self.epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.position_epoch = state_dict.get(self._EPOCH)

    def __iter__(self) -> Iterator[int]:
        # Runs at the first draw, after Lightning's set_epoch() for the epoch being iterated.
        if self.next_yielded is not None and self.position_epoch not in (None, self.epoch):
            self.next_yielded = None
        self.position_epoch = None
        yield from super().__iter__()


class LMDataModule(L.LightningDataModule):
    """Language-model data: a corpus packed into sequences of `seq_len` inputs + next-token labels.

    Args:
        source: "embedded" (Python stdlib code + Wikipedia leads, offline), "local" (files under `path`),
            "hub" (a `datasets` dataset streamed from the hub, SlimPajama by default) or "pinned" (English prose +
            Python code built from pinned registry artifacts, the same bytes on every machine: `pinned_corpus.py`).
        path: local source: a .txt/.jsonl/.parquet file or a folder of them. pinned source (optional): the corpus
            shard (`python -m lit_resformer.corpora.pinned_corpus build --out FILE`) or a folder holding it; without
            it the shard is taken from the cache, built there on first use (downloading the artifacts once).
        pinned_manifest: pinned source: the manifest naming the artifacts and the expected content hash
            (default: the package's `pinned_corpus.json`).
        domain_field: field of a .jsonl/.parquet/hub record holding its domain (dotted for nested records);
            local default: the file name; hub default: "meta.redpajama_set_name".
        encoding: the text encoding of local .txt/.jsonl files; a file that does not decode in it is refused.
        hub_name: dataset name for `datasets.load_dataset` (also a builder such as "json" with hub_data_files).
        hub_config: dataset configuration name, if the dataset has several.
        hub_split: split to stream.
        hub_data_files: data files for builders such as "json"/"parquet".
        hub_mixture: domain value -> weight; documents are drawn from each domain with these probabilities.
            None = the paper's Table 2 SlimPajama mixture; {} = the stream's own order, no mixing.
        hub_mixture_unit: what the mixture weights are shares of: "documents" (drawn at random with these
            probabilities) or "tokens" (each next document from the domain furthest below its token share;
            Table 2's shares are token shares, so the SlimPajama recipe uses this).
        max_hub_tokens: tokens taken from the hub stream (then cached); counted with the tokenizer, or as
            UTF-8 bytes / 4 when the tokenizer is a BPE still to be trained on that very snapshot.
        hub_seed: seeds the random draws of a "documents" mixture; kept apart from `seed` so that runs with
            different seeds train on the same snapshot.
        tokenizer: "bpe" (trained on the train split, cached), a path to a tokenizer.json, or a hub name.
        bpe_vocab_size: vocabulary size of the trained BPE.
        eos_token: the end-of-document token (appended to every document).
        seq_len: tokens per training sequence (each sample holds seq_len + 1 tokens).
        micro_batch_size: sequences per batch on each device.
        holdout_fraction: share of each domain's documents held out for validation, and the same again for test.
        val_sequences_per_domain: cap on the validation/test sequences evaluated per domain (None = all).
        num_workers: DataLoader worker processes.
        seed: seeds the training order (the shuffle of every epoch). None (the default) = the run's seed, the one
            LightningCLI's `seed_everything` set (Lightning's PL_GLOBAL_SEED; 0 when no seed was set), so that seeds
            of a grid vary the data order as well as the initialisation. An integer fixes the order whatever the
            run's seed: seeds then vary only the initialisation.
        cache_dir: where tokenizers and token caches live; default $LIT_RESFORMER_CACHE or ~/.cache/lit-resformer.
    """

    def __init__(
        self,
        source: Source = "embedded",
        path: str | None = None,
        domain_field: str | None = None,
        encoding: str = DEFAULT_ENCODING,
        hub_name: str = SLIMPAJAMA,
        hub_config: str | None = None,
        hub_split: str = "train",
        hub_data_files: str | list[str] | None = None,
        hub_mixture: dict[str, float] | None = None,
        hub_mixture_unit: MixtureUnit = "documents",
        max_hub_tokens: int = 100_000_000,
        hub_seed: int = 0,
        pinned_manifest: str | None = None,
        tokenizer: str = "bpe",
        bpe_vocab_size: int = 8192,
        eos_token: str = EOS_TOKEN,
        seq_len: int = 256,
        micro_batch_size: int = 8,
        holdout_fraction: float = 0.02,
        val_sequences_per_domain: int | None = 64,
        num_workers: int = 0,
        seed: int | None = None,
        cache_dir: str | None = None,
    ):
        super().__init__()
        self.save_hyperparameters()
        # Every check that needs no reading of the corpus happens here, before any compute.
        if source not in get_args(Source):
            raise ValueError(
                f"data.source: unknown source {source!r}; allowed: {', '.join(get_args(Source))}"
            )
        for name, value, minimum in [
            ("seq_len", seq_len, 1),
            ("micro_batch_size", micro_batch_size, 1),
            ("max_hub_tokens", max_hub_tokens, 1),
            ("num_workers", num_workers, 0),
            ("bpe_vocab_size", bpe_vocab_size, MIN_BPE_VOCAB_SIZE),
        ]:
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"data.{name}: must be an integer >= {minimum}, got {value!r}")
        if val_sequences_per_domain is not None and (
            not isinstance(val_sequences_per_domain, int) or val_sequences_per_domain < 1
        ):
            raise ValueError(
                f"data.val_sequences_per_domain: must be an integer >= 1 or null, got {val_sequences_per_domain!r}"
            )
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"data.seed: must be an integer >= 0 or null (the run's seed), got {seed!r}")
        if not 0 < holdout_fraction < 0.5:
            raise ValueError(f"data.holdout_fraction: must be in (0, 0.5), got {holdout_fraction!r}")
        if not eos_token:
            raise ValueError("data.eos_token: must be a non-empty token string")
        self.tokenizer_kind, self.tokenizer_value = parse_tokenizer_spec(tokenizer)
        if source == "local":
            local_files(path, domain_field, encoding)
        if source == "pinned":
            from lit_resformer.corpora.pinned_corpus import load_manifest

            load_manifest(pinned_manifest)  # a ValueError naming data.pinned_manifest when it is not one
            if path is not None and str(path).strip() and not Path(path).expanduser().exists():
                raise ValueError(f"data.path: {path!r} does not exist (the pinned corpus's shard, or a folder "
                                 "holding it; leave data.path unset to use the cache)")
        if source == "hub":
            if not hub_name:
                raise ValueError("data.hub_name: required when source is 'hub'")
            check_mixture(self.mixture)
            if hub_mixture_unit not in get_args(MixtureUnit):
                raise ValueError(
                    f"data.hub_mixture_unit: must be one of {get_args(MixtureUnit)}, got {hub_mixture_unit!r}"
                )

        self.source = source
        self.seq_len = seq_len
        self.micro_batch_size = micro_batch_size
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self._scan: CorpusScan | None = None
        self._tokenizer: Tokenizer | None = None
        self._packed: dict[str, Any] | None = None
        self._unigram_val_losses: dict[str, float] | None = None
        self._bigram_val_losses: dict[str, float] | None = None
        self._train_loader: StatefulDataLoader | None = None
        self._train_loader_state: dict[str, Any] | None = None
        self._checkpoint_data_seed: int | None = None  # the data seed of the checkpoint being resumed
        self._packed_checked = False  # the packed cache was checked against its meta (once per data module)

    # ---------------------------------------------------------------------------------------------------
    # corpus

    @property
    def mixture(self) -> dict[str, float]:
        mixture = self.hparams.hub_mixture
        return dict(TABLE2_MIXTURE) if mixture is None else dict(mixture)

    def documents(self) -> Iterator[Document]:
        """The corpus in its fixed order (for the hub: the cached snapshot of the stream)."""
        if self.source == "embedded":
            return embedded_documents()
        if self.source == "local":
            return local_documents(self.hparams.path, self.hparams.domain_field, self.hparams.encoding)
        if self.source == "pinned":
            from lit_resformer.corpora.pinned_corpus import pinned_documents

            return pinned_documents(self.cache_dir, self.hparams.pinned_manifest, self.hparams.path)
        return self._snapshot_documents(self._hub_snapshot())

    def corpus_scan(self) -> CorpusScan:
        if self._scan is None:
            self._scan = scan_corpus(self.documents(), self.hparams.holdout_fraction)
        return self._scan

    @property
    def corpus_hash(self) -> str:
        """The corpus's content hash: sha256 of its canonical document stream (`sources.canonical_record`), for
        every source; for "pinned" it equals the manifest's `content_sha256`. Runs of different hashes are
        different corpora. Costs one pass over the corpus (the scan every run makes anyway)."""
        return self.corpus_scan().content_sha256

    def _lock(self, key: str) -> FileLock:
        (self.cache_dir / "locks").mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.cache_dir / "locks" / f"{key}.lock"))

    def _hub_snapshot(self) -> Path:
        """Take documents from the hub stream until `max_hub_tokens`, once; later runs read the file."""
        hp = self.hparams
        data_files = (
            [hp.hub_data_files] if isinstance(hp.hub_data_files, str) else list(hp.hub_data_files or [])
        )
        # Local data files are part of the key by size and mtime so that editing them takes a new snapshot.
        file_stats = [
            (f, os.path.getsize(f), os.path.getmtime(f)) if os.path.isfile(f) else f for f in data_files
        ]
        counter = None if self.tokenizer_kind == "bpe" else self._load_fixed_tokenizer()
        if counter is None:
            counting = f"bytes/{BYTES_PER_TOKEN_ESTIMATE}"

            def count_tokens(text: str) -> int:
                return math.ceil(utf8_bytes(text) / BYTES_PER_TOKEN_ESTIMATE)
        else:
            counting = tokenizer_fingerprint(counter)

            @functools.lru_cache(maxsize=1)  # the mixer and the budget both count the same document in turn
            def count_tokens(text: str) -> int:
                return len(counter.encode(text, add_special_tokens=False).ids)

        key = digest(
            json.dumps([hp.hub_name, hp.hub_config, hp.hub_split, file_stats, self._hub_domain_field]),
            json.dumps(sorted(self.mixture.items())),
            hp.hub_mixture_unit,
            str(hp.hub_seed),
            str(hp.max_hub_tokens),
            counting,
        )
        path = self.cache_dir / "hub" / f"{key}.jsonl"
        with self._lock(f"hub-{key}"):
            if path.is_file():
                return path
            log.info("taking %d tokens from %s into %s", hp.max_hub_tokens, hp.hub_name, path)
            documents = hub_documents(
                hp.hub_name,
                config=hp.hub_config,
                split=hp.hub_split,
                data_files=hp.hub_data_files,
                domain_field=self._hub_domain_field,
                mixture=self.mixture,
                mixture_unit=hp.hub_mixture_unit,
                measure=count_tokens,
                seed=hp.hub_seed,
            )
            taken = 0
            with atomic_file(path) as out:
                for document in documents:
                    out.write(
                        json.dumps({"text": document.text, "domain": document.domain}, ensure_ascii=False)
                    )
                    out.write("\n")
                    taken += count_tokens(document.text) + 1  # + EOS
                    if taken >= hp.max_hub_tokens:
                        break
                else:
                    log.warning("%s ran out after %d of %d tokens", hp.hub_name, taken, hp.max_hub_tokens)
        return path

    @property
    def _hub_domain_field(self) -> str:
        return self.hparams.domain_field or SLIMPAJAMA_DOMAIN_FIELD

    @staticmethod
    def _snapshot_documents(path: Path) -> Iterator[Document]:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    record = json.loads(line)
                    yield Document(record["text"], record["domain"])

    # ---------------------------------------------------------------------------------------------------
    # tokenizer

    def _load_fixed_tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_kind, self.tokenizer_value)
            eos_id_of(self._tokenizer, self.hparams.eos_token)
        return self._tokenizer

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer; a "bpe" one is trained on the train split on first use, then read from the cache."""
        if self._tokenizer is not None:
            return self._tokenizer
        if self.tokenizer_kind != "bpe":
            return self._load_fixed_tokenizer()
        scan = self.corpus_scan()
        path = self.cache_dir / "tokenizers" / f"bpe-{scan.key}-v{self.hparams.bpe_vocab_size}.json"
        meta_path = path.with_name(f"{path.stem}.{META}")
        with self._lock(path.stem):
            problem = _cached_tokenizer_problem(path, meta_path) if path.exists() else "missing"
            if problem != "missing" and problem is not None:
                log.warning("cached tokenizer %s is damaged (%s); training it again", path, problem)
            if problem is not None:
                log.info("training a byte-level BPE (vocab %d) -> %s", self.hparams.bpe_vocab_size, path)
                train_texts = (doc.text for split, doc in scan.assign(self.documents()) if split == "train")
                trained = train_bpe(train_texts, self.hparams.bpe_vocab_size, self.hparams.eos_token)
                atomic_write_text(path, trained.to_str())
                atomic_write_text(meta_path, json.dumps({FILES: describe_files(path.parent, [path.name])}))
        self._tokenizer = Tokenizer.from_file(str(path))
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_id(self) -> int:
        return eos_id_of(self.tokenizer, self.hparams.eos_token)

    @property
    def domains(self) -> list[str]:
        """Validation/test domains, in the order of the loaders of val_dataloader() and test_dataloader()."""
        return self.corpus_scan().domains

    # ---------------------------------------------------------------------------------------------------
    # token caches

    def _tokens_key(self) -> str:
        """Names the token streams of this corpus, split and tokenizer."""
        return f"{self.corpus_scan().key}-{digest(tokenizer_fingerprint(self.tokenizer), self.hparams.eos_token)}"

    def _tokens_dir(self) -> Path:
        """Flat token streams of every split (every document followed by EOS); built once per corpus+tokenizer."""
        scan, tokenizer, key = self.corpus_scan(), self.tokenizer, self._tokens_key()
        final = self.cache_dir / "tokens" / key
        with self._lock(f"tokens-{key}"):
            _remove_if_damaged(final, "token cache")
            if not final.is_dir():
                log.info("tokenising the corpus -> %s", final)
                with atomic_directory(final) as building:
                    lengths = write_token_streams(
                        scan.assign(self.documents()), tokenizer, self.eos_id, scan.domains, building
                    )
                    meta = {
                        "dtype": token_dtype(tokenizer.get_vocab_size()).name,
                        "eos_id": self.eos_id,
                        "vocab_size": tokenizer.get_vocab_size(),
                        "domains": scan.domains,
                        "documents": scan.documents,
                        "lengths": lengths,
                    }
                    write_meta(building, meta, [f"{name}.bin" for name in lengths])
        return final

    def _packed_dir(self) -> Path:
        """Sequences of seq_len + 1 tokens per split (and per domain for val/test), as .npy files; checked against
        its meta once per data module (the token streams only when the sequences are built from them)."""
        final = self.cache_dir / "packed" / f"{self._tokens_key()}-T{self.seq_len}"
        if self._packed_checked:
            return final
        with self._lock(f"packed-{final.name}"):
            _remove_if_damaged(final, "packed-sequence cache")
            if not final.is_dir():
                tokens_dir = self._tokens_dir()
                meta = {k: v for k, v in read_json(tokens_dir / META).items() if k != FILES}
                dtype = np.dtype(meta["dtype"])
                names = ["train"] + [
                    stream_name(s, d) for s in SPLITS[1:] for d in range(len(meta["domains"]))
                ]
                with atomic_directory(final) as building:
                    rows = {}
                    for name in names:
                        tokens = read_token_stream(tokens_dir, name, meta["lengths"].get(name, 0), dtype)
                        rows[name] = write_packed(tokens, self.seq_len, building / f"{name}.npy")
                    write_meta(building, {**meta, "seq_len": self.seq_len, "rows": rows}, [f"{n}.npy" for n in names])
        self._packed_checked = True
        return final

    def train_token_counts(self) -> np.ndarray:
        """Occurrences of every token id in the training split: counted once per token cache, kept in it."""
        tokens_dir = self._tokens_dir()
        path = tokens_dir / "train_counts.npy"
        with self._lock(f"counts-{tokens_dir.name}"):
            meta = read_json(tokens_dir / META)
            train_tokens = meta["lengths"].get("train", 0)
            counts = _read_counts(path)
            if counts is not None and (counts.shape != (self.vocab_size,) or counts.sum() != train_tokens):
                log.warning("cached token counts %s do not match the token cache; counting again", path)
                counts = None
            if counts is None:
                train = read_token_stream(tokens_dir, "train", train_tokens, np.dtype(meta["dtype"]))
                counts = token_counts(train, self.vocab_size)
                with atomic_file(path, binary=True) as out:
                    np.save(out, counts)
        return counts

    def train_bigram_counts(self) -> BigramCounts:
        """The pairs of consecutive tokens of the training split, counted once per token cache and kept in it
        (train_bigrams.npz, vouched for by train_bigrams.json: its content hash and the hash of the training
        stream it was counted from, so a damaged file or a changed stream is counted again)."""
        tokens_dir = self._tokens_dir()
        path, meta_path = tokens_dir / BIGRAMS_FILE, tokens_dir / f"{Path(BIGRAMS_FILE).stem}.json"
        with self._lock(f"bigrams-{tokens_dir.name}"):
            meta = read_json(tokens_dir / META)
            source = meta[FILES]["train.bin"]["blake2b"] if "train.bin" in meta[FILES] else None
            problem = "missing"
            if meta_path.is_file():
                try:
                    saved = read_json(meta_path)
                    problem = (files_problem(tokens_dir, saved[FILES]) if saved.get("source") == source
                               else "counted from another training stream")
                except (OSError, ValueError, KeyError, TypeError):
                    problem = f"{meta_path.name} is unreadable"
            if problem is None:
                with np.load(path) as saved_counts:
                    return BigramCounts(self.vocab_size, saved_counts["pairs"], saved_counts["counts"])
            if problem != "missing":
                log.warning("cached bigram counts %s: %s; counting again", path, problem)
            train_tokens = meta["lengths"].get("train", 0)
            train = read_token_stream(tokens_dir, "train", train_tokens, np.dtype(meta["dtype"]))
            counts = bigram_counts(train, self.vocab_size)
            with atomic_file(path, binary=True) as out:
                np.savez(out, pairs=counts.pairs, counts=counts.counts)
            atomic_write_text(meta_path, json.dumps({"source": source, FILES: describe_files(tokens_dir, [BIGRAMS_FILE])}))
        return counts

    def _val_rows(self) -> Iterator[tuple[str, np.ndarray]]:
        """Per domain, the validated sequences (seq_len + 1 tokens each: the inputs and, shifted by one, the labels)."""
        for index, domain in enumerate(self.domains):
            dataset = self._dataset("val", index)
            yield domain, np.load(dataset.path, mmap_mode="r")[: len(dataset)]

    def unigram_val_losses(self) -> dict[str, float]:
        """Per domain, the loss of the training split's add-one unigram (`unigram.py`) on exactly the tokens the
        validation loss is computed on (the labels of the validated sequences): the plateau reference."""
        if self._unigram_val_losses is None:
            counts = self.train_token_counts()
            self._unigram_val_losses = {
                domain: unigram_loss(counts, rows[:, 1:].reshape(-1)) for domain, rows in self._val_rows()
            }
        return self._unigram_val_losses

    def bigram_val_losses(self) -> dict[str, float]:
        """Per domain, the loss of the training split's Kneser-Ney bigram (`bigram.py`) on the validation labels,
        each predicted from the token before it: the reference a model must beat to show more than pair statistics."""
        if self._bigram_val_losses is None:
            model = KneserNeyBigram(self.train_bigram_counts())
            self._bigram_val_losses = {
                domain: model.loss(rows[:, :-1].reshape(-1), rows[:, 1:].reshape(-1))
                for domain, rows in self._val_rows()
            }
        return self._bigram_val_losses

    def prepare_data(self) -> None:
        """Build (or find) the tokenizer and token caches; Lightning calls this on one process per node."""
        self._packed_dir()

    def setup(self, stage: str | None = None) -> None:
        if self._packed is not None:
            return
        directory = self._packed_dir()
        meta = read_json(directory / META)
        for split in SPLITS[1:]:
            for index, domain in enumerate(meta["domains"]):
                if meta["rows"][stream_name(split, index)] == 0:
                    raise ValueError(
                        f"data: domain {domain!r} has too few {split} tokens for one sequence of seq_len+1 = "
                        f"{self.seq_len + 1} tokens ({meta['lengths'].get(stream_name(split, index), 0)} tokens); "
                        "raise data.holdout_fraction, lower data.seq_len or add documents to that domain"
                    )
        world_size = self.trainer.world_size if self.trainer is not None else 1
        if meta["rows"]["train"] < self.micro_batch_size * world_size:
            raise ValueError(
                f"data: the train split has {meta['rows']['train']} sequences of seq_len+1 = {self.seq_len + 1} "
                f"tokens, fewer than one batch (data.micro_batch_size {self.micro_batch_size} x {world_size} devices)"
            )
        self._packed = {"dir": directory, **meta}

    # ---------------------------------------------------------------------------------------------------
    # loaders

    def _dataset(self, split: str, domain_index: int | None = None) -> PackedSequences:
        self.setup()
        limit = None if split == "train" else self.hparams.val_sequences_per_domain
        return PackedSequences(self._packed["dir"] / f"{stream_name(split, domain_index)}.npy", limit)

    @property
    def data_seed(self) -> int:
        """The seed of the training order: the resumed checkpoint's, else the built train loader's, else `seed`, else
        the run's seed. Once the loader is built its seed holds, whatever the process seeds later: a process that
        trains several runs (lit_resformer.stacking) seeds each in turn."""
        if self._checkpoint_data_seed is not None:
            return self._checkpoint_data_seed
        if self._train_loader is not None:
            return self._train_loader.sampler.seed
        if self.hparams.seed is not None:
            return self.hparams.seed
        # read when the loader is built, after LightningCLI (or the user) called seed_everything
        return int(os.environ.get(RUN_SEED_ENV, 0))

    def train_dataloader(self) -> StatefulDataLoader:
        """Shuffled packed train sequences; its state_dict() makes resuming continue the same order.

        The order of epoch e is a permutation seeded by (data_seed, e) and each rank takes its own disjoint share of
        it (`EpochShuffleSampler`, also with one process). Lightning calls set_epoch() at every epoch start
        and restores the epoch when resuming, so the order after a resume is exact across epoch boundaries too.
        (torchdata's own shuffle=True sampler chains one generator through the epochs and does not continue
        that chain after a resume.) Outside a Trainer, call `loader.sampler.set_epoch(e)` to reshuffle.
        """
        dataset = self._dataset("train")
        trainer = self.trainer
        world_size, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        sampler = EpochShuffleSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=self.data_seed, drop_last=True
        )
        loader = StatefulDataLoader(
            dataset,
            batch_size=self.micro_batch_size,
            sampler=sampler,
            drop_last=True,
            num_workers=self.hparams.num_workers,
            # page-locked batches copy to the GPU asynchronously (Lightning moves them with non_blocking=True)
            pin_memory=torch.cuda.is_available(),
        )
        if self._train_loader_state is not None:
            loader.load_state_dict(self._train_loader_state)
            self._train_loader_state = None
        self._train_loader = loader
        return loader

    def _eval_loaders(self, split: str) -> list[DataLoader]:
        self.setup()
        return [
            DataLoader(
                self._dataset(split, index),
                batch_size=self.micro_batch_size,
                shuffle=False,
                num_workers=self.hparams.num_workers,
            )
            for index in range(len(self._packed["domains"]))
        ]

    def val_dataloader(self) -> list[DataLoader]:
        """One loader per domain, in the order of `domains`."""
        return self._eval_loaders("val")

    def test_dataloader(self) -> list[DataLoader]:
        """One loader per domain, in the order of `domains` (documents disjoint from train and val)."""
        return self._eval_loaders("test")

    # ---------------------------------------------------------------------------------------------------
    # checkpoint state

    def state_dict(self) -> dict[str, Any]:
        """Saved in every checkpoint: the tokenizer (checkpoints stay usable without the cache), the seed of the
        training order and the position of the train loader in it."""
        state: dict[str, Any] = {
            "tokenizer_json": self.tokenizer.to_str(),
            "eos_token": self.hparams.eos_token,
            DATA_SEED: self.data_seed,
        }
        if self._train_loader is not None:
            state["train_loader"] = self._train_loader.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("tokenizer_json")
        if saved is not None:
            saved_hash, this_hash = tokenizer_fingerprint(Tokenizer.from_str(saved)), tokenizer_fingerprint(self.tokenizer)
            if saved_hash != this_hash:
                raise TokenizerMismatch(
                    f"data.tokenizer: the checkpoint was trained with tokenizer {saved_hash}, but this run's tokenizer "
                    f"({self.hparams.tokenizer!r}) is {this_hash}: its token ids mean other text; use the checkpoint's "
                    "tokenizer or train a new run")
        # Lightning's fit loop restores the train loader from its own copy of this state, except when the loader
        # was created before the checkpoint was read (e.g. trainer.estimated_stepping_batches called in
        # configure_optimizers, Lightning issue #20550); applying it again here is harmless in the normal case.
        # The saved position counts batches of the checkpoint's order, so a resume keeps that order even if the
        # run's seed or data.seed changed since (checkpoints written before the seed was saved used data.seed).
        saved_seed = state_dict.get(DATA_SEED, self.hparams.seed if self.hparams.seed is not None else 0)
        if saved_seed != self.data_seed:
            log.warning("resuming with the checkpoint's data seed %d (this run's would be %d): a resumed run "
                        "continues its training order", saved_seed, self.data_seed)
        self._checkpoint_data_seed = saved_seed
        if self._train_loader is not None:
            self._train_loader.sampler.seed = saved_seed
        self._train_loader_state = state_dict.get("train_loader")
        if self._train_loader is not None and self._train_loader_state is not None:
            self._train_loader.load_state_dict(self._train_loader_state)
            self._train_loader_state = None
