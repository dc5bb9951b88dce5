"""Data layer: corpora (embedded, local, hub, pinned), tokenizers, packing + caches, and the resumable LMDataModule."""

from lit_resformer.corpora.data_cache import CACHE_ENV, default_cache_dir
from lit_resformer.corpora.sources import (
    SLIMPAJAMA,
    SLIMPAJAMA_DOMAIN_FIELD,
    TABLE2_MIXTURE,
    Document,
    canonical_record,
    embedded_documents,
    hub_documents,
    local_documents,
    stdlib_code_documents,
    wiki_documents,
)

from .bigram import BigramCounts, KneserNeyBigram, bigram_counts
from .datamodule import LMDataModule, PackedSequences
from .packing import CorpusScan, pack_sequences, scan_corpus
from .tokenizer import EOS_TOKEN, PAPER_TOKENIZER, load_tokenizer, parse_tokenizer_spec, train_bpe
from .unigram import token_counts, unigram_loss

__all__ = [
    "BigramCounts",
    "CACHE_ENV",
    "EOS_TOKEN",
    "PAPER_TOKENIZER",
    "SLIMPAJAMA",
    "SLIMPAJAMA_DOMAIN_FIELD",
    "TABLE2_MIXTURE",
    "CorpusScan",
    "Document",
    "KneserNeyBigram",
    "LMDataModule",
    "PackedSequences",
    "bigram_counts",
    "canonical_record",
    "default_cache_dir",
    "embedded_documents",
    "hub_documents",
    "load_tokenizer",
    "local_documents",
    "pack_sequences",
    "parse_tokenizer_spec",
    "scan_corpus",
    "stdlib_code_documents",
    "token_counts",
    "train_bpe",
    "unigram_loss",
    "wiki_documents",
]
