"""The environment lock: write it from an environment, or check an environment against it.

    python scripts/lock.py write requirements.lock   # every installed distribution, pinned (run in the latest env)
    python scripts/lock.py check requirements.lock   # fail unless the installed versions equal the lock's
    python scripts/lock.py version NAME              # the locked version of one package (for scripts)

The lock pins everything `make install` installs except PyTorch and the packages that come with a particular
PyTorch build (the Makefile's TORCH picks those: a CUDA build brings nvidia-* and triton, the CPU build does not),
the project itself and the installer's own tools. It is written from an environment resolved from pyproject's
ranges (`make lock`), so it is pip's own resolution, frozen. Standard library only: it runs before anything is
installed and in any environment.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
from importlib import metadata
from pathlib import Path

PROJECT = "lit-resformer"
# Chosen per machine, not per project: PyTorch and what its build brings, and the installer's own tools.
UNLOCKED = re.compile(r"^(torch|triton|pytorch-triton(-.*)?|nvidia-.*|cuda-.*|pip|setuptools|wheel|lit-resformer)$")


def canonical(name: str) -> str:
    """A distribution name as package indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """Every distribution of the running environment that the lock covers: canonical name -> version."""
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and not UNLOCKED.match(canonical(name)):
            found[canonical(name)] = dist.version
    return found


def read_lock(path: Path) -> dict[str, str]:
    pins = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not version.strip():
            raise SystemExit(f"{path}:{number}: expected NAME==VERSION, got {line!r}")
        pins[canonical(name.strip())] = version.strip()
    return pins


def write(path: Path) -> None:
    pins = installed()
    header = (
        "# The environment of `make install` / `make test` / `make demo` / CI, pinned: written by `make lock` from\n"
        "# pyproject's ranges (scripts/lock.py). Refresh it only after `make test-latest` passed on the same versions.\n"
        f"# Resolved on Python {platform.python_version()} ({sys.platform}); PyTorch is chosen by TORCH, not here.\n"
    )
    path.write_text(header + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins)))
    print(f"{path}: {len(pins)} packages pinned")


def check(path: Path) -> int:
    """Exit status 0 when every locked package is installed at its locked version. Packages installed beyond the
    lock (a Python version whose markers pull in others) are reported but tolerated."""
    pins, have = read_lock(path), installed()
    wrong = [f"{name} {have[name]} (locked {version})" for name, version in pins.items() if name in have and have[name] != version]
    missing = [f"{name}=={version}" for name, version in pins.items() if name not in have]
    extra = sorted(set(have) - set(pins))
    if extra:
        print(f"{path}: installed but not locked (tolerated): {', '.join(extra)}", file=sys.stderr)
    if wrong or missing:
        for line in wrong:
            print(f"{path}: version differs: {line}", file=sys.stderr)
        for line in missing:
            print(f"{path}: not installed: {line}", file=sys.stderr)
        print(f"{path}: the environment does not match the lock; `make clean install` rebuilds it", file=sys.stderr)
        return 1
    print(f"{path}: all {len(pins)} locked packages installed at their locked versions")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("write", "check"):
        sub.add_parser(command).add_argument("lock", type=Path)
    version = sub.add_parser("version")
    version.add_argument("name")
    version.add_argument("--lock", type=Path, default=Path(__file__).resolve().parent.parent / "requirements.lock")
    args = parser.parse_args(argv)
    if args.command == "write":
        write(args.lock)
        return 0
    if args.command == "check":
        return check(args.lock)
    pins = read_lock(args.lock)
    if canonical(args.name) not in pins:
        raise SystemExit(f"{args.lock}: {args.name} is not locked")
    print(pins[canonical(args.name)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
