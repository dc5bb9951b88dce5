"""Judged grids kept between calls, so that the board (`lit-resformer claims`) reads in seconds: a grid's verdicts on
its own runs, before any adjustment (lit_resformer.verdicts.judgements.Graded), stored under a key that is the content
of everything they are computed from. The key hashes the package's source (a change to how anything is judged), the
grid's manifest (its claims included: what `refresh_claims` writes) and its results' provenance, and every result
file of every run it reads (lit_resformer.runs.run_dir.RunDir.result_files, through the links of shared runs):
any change to any of them is a new key, and a stale entry is never read. Entries live in LIT_RESFORMER_VERDICT_CACHE,
by default the data cache's verdicts/ (LIT_RESFORMER_CACHE, ~/.cache/lit-resformer), one JSON file each, written
atomically."""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

from lit_resformer.corpora.data_cache import default_cache_dir
from lit_resformer.runs.directory import GridDir
from lit_resformer.writing import atomic_write

PACKAGE = Path(__file__).resolve().parents[1]
VERDICT_CACHE_ENV = "LIT_RESFORMER_VERDICT_CACHE"


@cache
def code_fingerprint() -> str:
    """The package's source, hashed once a process: a judge that changes is a new key."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def grid_key(grid: GridDir) -> str:
    """The content of what a grid's verdicts are computed from (the module docstring), hashed."""
    digest = hashlib.sha256(code_fingerprint().encode())
    files = [grid.manifest_file, grid.export_history_file]
    files += [file for _, _, run in grid.all_runs() for file in run.result_files()]
    for file in files:
        if file.is_file():
            digest.update(file.relative_to(grid.path).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


class VerdictCache:
    """Graded grids by key, in `folder` (default: LIT_RESFORMER_VERDICT_CACHE, else the data cache's verdicts/)."""

    def __init__(self, folder: str | Path | None = None):
        folder = folder or os.environ.get(VERDICT_CACHE_ENV)
        self.folder = Path(folder) if folder else default_cache_dir() / "verdicts"

    def load(self, key: str) -> dict | None:
        path = self.folder / f"{key}.json"
        if not path.is_file():
            return None
        entry = json.loads(path.read_text())
        return entry if entry.get("key") == key else None

    def store(self, key: str, entry: dict) -> None:
        atomic_write(self.folder / f"{key}.json", json.dumps({**entry, "key": key}))
