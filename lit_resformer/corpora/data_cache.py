"""Where corpora, tokenizers and packed splits are cached, and how an entry is written: into a temporary sibling
folder renamed into place only when it is complete, so that a killed build never leaves a half entry behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

CACHE_ENV = "LIT_RESFORMER_CACHE"


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "lit-resformer").expanduser()


@contextlib.contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling directory to fill; rename it to `final` only if the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield temporary
        try:
            os.rename(temporary, final)
        except OSError:
            if not final.is_dir():  # not a lost race with another process writing the same entry
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
