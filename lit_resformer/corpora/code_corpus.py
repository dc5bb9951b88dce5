"""A large offline corpus from the Python sources installed on this machine.

The embedded corpus holds ~3M tokens: enough for CPU runs, far too little for 82M-parameter runs of ~30M tokens
each. A GPU machine without network still has gigabytes of installed Python packages, so this module writes their
sources into one local corpus (`data.source: local`, `data.path: <out>/python.jsonl`):

    <out>/python.jsonl     one record per source file: {"text": ..., "path": ...}; the file stem is the domain
    <out>/manifest.json    characters, bytes, files, skipped files by reason, content hash, roots, interpreter

One document per file, so the datamodule's hash-ranked holdout is a split by file: no file is partly in training
and partly in validation. Test folders, caches, non-UTF-8, very large (generated) and duplicate files are
skipped; files are taken in a stable order (root, then relative path) until `max_chars`.

This is a *code* corpus, unlike SlimPajama: results on it say how the variants model Python, not web text.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import site
import sys
import sysconfig
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from lit_resformer.corpora.data_cache import atomic_directory
from lit_resformer.options import OptionParser

CORPUS_FILE = "python.jsonl"
MANIFEST_FILE = "manifest.json"
DEFAULT_MIN_CHARS = 100_000_000
DEFAULT_MAX_CHARS = 150_000_000
# Generated tables, vendored bundles and data modules are large and not representative of written code.
MAX_FILE_BYTES = 512_000
SKIP_DIRS = frozenset({"test", "tests", "testing", "idle_test", "__pycache__", "node_modules"})


def default_roots() -> list[Path]:
    """The interpreter's standard library and every site-packages folder it imports from, deduplicated."""
    candidates = [sysconfig.get_path("stdlib"), *site.getsitepackages(), site.getusersitepackages()]
    candidates += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    roots: list[Path] = []
    for candidate in candidates:
        path = Path(candidate).resolve()
        if path.is_dir() and path not in roots:
            roots.append(path)
    return roots


def _source_files(root: Path, skip: Counter) -> Iterator[Path]:
    """`.py` files under root in sorted relative-path order, skipping tests, caches, hidden and nested roots."""
    for dirpath, dirnames, filenames in os.walk(root):
        kept = []
        for name in sorted(dirnames):
            if name in SKIP_DIRS or name.startswith(".") or name in ("site-packages", "dist-packages"):
                skip["skipped folder (tests, caches, nested site-packages)"] += 1
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            if name.endswith(".py") and not name.startswith(("test_", ".")) and not name.endswith("_test.py"):
                yield Path(dirpath, name)


def collect_sources(roots: Sequence[Path], max_chars: int) -> tuple[list[dict], Counter]:
    """Records {"text", "path"} in stable order, until `max_chars`; and the skipped files counted by reason."""
    records: list[dict] = []
    seen: set[bytes] = set()
    skip: Counter = Counter()
    chars = 0
    for index, root in enumerate(roots):
        for file in _source_files(root, skip):
            try:
                raw = file.read_bytes()
            except OSError:
                skip["unreadable"] += 1
                continue
            if len(raw) > MAX_FILE_BYTES:
                skip[f"larger than {MAX_FILE_BYTES} bytes"] += 1
                continue
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                skip["not UTF-8"] += 1
                continue
            if not text:
                skip["empty"] += 1
                continue
            fingerprint = hashlib.blake2b(raw, digest_size=16).digest()
            if fingerprint in seen:  # vendored copies of the same module
                skip["duplicate content"] += 1
                continue
            if chars + len(text) > max_chars:
                return records, skip
            seen.add(fingerprint)
            chars += len(text)
            records.append({"text": text, "path": f"{index}:{file.relative_to(root).as_posix()}"})
    return records, skip


def read_manifest(out_dir: str | Path) -> dict | None:
    """The manifest of a finished corpus whose data file still has the recorded hash, else None."""
    out_dir = Path(out_dir)
    try:
        manifest = json.loads((out_dir / MANIFEST_FILE).read_text())
        data = out_dir / CORPUS_FILE
        if data.stat().st_size != manifest["bytes_on_disk"] or _file_hash(data) != manifest["sha256"]:
            return None
        return manifest
    except (OSError, ValueError, KeyError):
        return None


def _file_hash(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def prepare_code_corpus(
    out_dir: str | Path,
    roots: Sequence[str | Path] | None = None,
    min_chars: int = DEFAULT_MIN_CHARS,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> dict:
    """Write the corpus into `out_dir` (atomically) and return its manifest; an intact one is reused as it is."""
    if not 0 < min_chars <= max_chars:
        raise ValueError(f"min_chars={min_chars} and max_chars={max_chars}: need 0 < min_chars <= max_chars")
    existing = read_manifest(out_dir)
    if existing is not None:
        return existing
    root_paths = [Path(r).resolve() for r in roots] if roots else default_roots()
    missing = [str(r) for r in root_paths if not r.is_dir()]
    if missing:
        raise ValueError(f"roots: {missing} are not folders")
    records, skipped = collect_sources(root_paths, max_chars)
    chars = sum(len(r["text"]) for r in records)
    if chars < min_chars:
        raise ValueError(
            f"the installed Python sources under {[str(r) for r in root_paths]} hold {chars:,} usable characters "
            f"({len(records)} files), fewer than min_chars={min_chars:,}; add roots or lower min_chars")
    out_dir = Path(out_dir)
    if out_dir.exists():
        leftovers = sorted(p.name for p in out_dir.iterdir())
        if set(leftovers) - {CORPUS_FILE, MANIFEST_FILE}:
            raise ValueError(f"out_dir: {out_dir} holds other files ({leftovers[:5]}); choose an empty folder")
        shutil.rmtree(out_dir)  # a damaged or interrupted corpus of ours: rebuilt whole
    with atomic_directory(out_dir) as tmp:
        data = tmp / CORPUS_FILE
        with data.open("w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        manifest = {
            "kind": "installed Python sources (a code corpus, not SlimPajama)",
            "files": len(records),
            "characters": chars,
            "bytes_on_disk": data.stat().st_size,
            "sha256": _file_hash(data),
            "skipped": dict(sorted(skipped.items())),
            "roots": [str(r) for r in root_paths],
            "python": platform.python_version(),
            "split": "one document per file; validation/test files chosen by the datamodule's hash ranking",
        }
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: Sequence[str] | None = None) -> None:
    parser = OptionParser(
        prog="lit-resformer prepare-corpus",
        description="Write a local code corpus from this machine's installed Python sources (offline GPU tier).")
    parser.add_argument("out_dir", help="output folder (python.jsonl + manifest.json); reused when intact")
    parser.add_argument("--root", action="append", help="a folder of Python sources (repeat; default: "
                        "the standard library and every site-packages folder)")
    parser.add_argument("--min-chars", type=int, default=DEFAULT_MIN_CHARS)
    parser.add_argument("--max-chars", type=int, default=DEFAULT_MAX_CHARS)
    args = parser.parse_args(argv)
    manifest = prepare_code_corpus(args.out_dir, args.root, args.min_chars, args.max_chars)
    print(f"{args.out_dir}: {manifest['files']:,} files, {manifest['characters']:,} characters, "
          f"sha256 {manifest['sha256'][:16]}")


if __name__ == "__main__":
    main()
