"""Whether what decides each verdict was declared before its data (`lit-resformer claims RESULTS --preconditions`).

A verdict counts only if the fields that decide it were fixed before the data it judges existed. Dated from the
project's git history:
- a grid's first data is the first commit that ever added a run of it (a file under <grid>/<cell>/seed<k>/ in
  docs/results/, docs/unfinished-grids/ or the grid's own folder): a later re-derivation, which rewrites the runs, never
  moves it;
- each comparison a grid declares (`claims:` of its grid file, inherited ones included) is checked on its fields
  DECIDING (and its grid's `select:` block) as they stood at the parent of that commit, against today's: the same ->
  "pre-declared"; otherwise "exploratory", with what changed, the form it had before the data (`earlier`: the board
  judges that form, lit_resformer.verdicts.paper_claims) and the commit that gave it today's form; "confirmed" once
  another grid, declared with the same fields, first has data after that commit (_mark_confirmed);
- each claim of the paper (configs/claims.yaml) likewise on REGISTRY_DECIDING, its first data its comparisons' first;
  one the registry did not hold before its data (the registry came after the first grids) is "registered after its
  data": its comparisons, declared in the grid files, are what decide it, each dated on its own;
- each precondition (configs/claims.yaml `preconditions:`): the commit that introduced its rule (its `needle`); one
  introduced after the data of the claims it applies to carries a `justification:`.
A quote justifies a claim's words, never its timing: a comparison changed after its data is exploratory, quoted or not.
The words of a comparison decide nothing (a rename is no change); an earlier entry is the one of the same words, else
of the same cells and metric. Restoring a field to the value it had before the data is no change.

The report over docs/results is committed as lit_resformer.verdicts.paper_claims.DECLARATIONS (the board reads which comparisons are exploratory from it,
so that it needs no history); tests/board/test_declared.py checks it against git where the history is there. A
shallow clone has none: dating raises DeclarationError, never guesses.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path

import yaml

from lit_resformer.grids.grid import GridError
from lit_resformer.grids.spec import declared_raw_claims, locate_grid_file
from lit_resformer.provenance import REPO_ROOT
from lit_resformer.runs.directory import GridDir, grid_dirs
from lit_resformer.verdicts.paper_claims import grid_tier

DECIDING = ("a", "b", "metric", "direction", "margin", "requires", "at", "over", "target", "paper_claim", "select")
REGISTRY_DECIDING = ("comparisons", "context", "preconditions")
REGISTRY_FILE = "configs/claims.yaml"
RESULTS_FOLDERS = ("docs/results", "docs/unfinished-grids")  # where a grid's runs are committed, finished or not
RUN_FILE = re.compile(r"^(?P<grid>.+)/[^/]+/seed\d+(?:/|$)")  # <grid folder>/<cell>/seed<k>[/...]
STATUSES = ("exploratory", "confirmed", "pre-declared", "registered after its data", "introduced after its data", "no committed data")


class DeclarationError(ValueError):
    pass


def _git(*args: str, text: bool = True, repo: Path = REPO_ROOT):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=text, check=True).stdout


def _require_history(repo: Path) -> None:
    if _git("rev-parse", "--is-shallow-repository", repo=repo).strip() != "false":
        raise DeclarationError(f"{repo}: a shallow clone has no history to date the declarations with (clone it "
                               "whole, or `git fetch --unshallow`)")


@dataclass(frozen=True)
class Commit:
    sha: str
    date: datetime

    def to_dict(self) -> dict:
        return {"commit": self.sha, "date": self.date.isoformat()}


@cache
def _runs_added(repo: Path) -> dict[str, Commit]:
    """{grid folder (relative to the repository): the first commit that added a file of one of its runs}. The
    earliest by commit date: a run added on a branch is dated where it was committed, not where it was merged."""
    _require_history(repo)
    first: dict[str, Commit] = {}
    commit = None
    out = _git("log", "--diff-filter=A", "--name-only", "--no-renames", "--format=@%H %cI", repo=repo)
    for line in out.splitlines():
        if line.startswith("@"):
            sha, date = line[1:].split(" ", 1)
            commit = Commit(sha, datetime.fromisoformat(date))
        elif line and (match := RUN_FILE.match(line)) and commit is not None:
            grid = match["grid"]
            if grid not in first or commit.date < first[grid].date:
                first[grid] = commit
    return first


def first_data(grid: GridDir, repo: Path = REPO_ROOT) -> Commit | None:
    """The first commit that added a run of `grid`: under its own folder, if inside the repository, or under any
    of RESULTS_FOLDERS by its name (a grid committed unfinished and then moved, or shared from another checkout).
    None when no commit has one (results never committed). DeclarationError in a shallow clone."""
    folders = {f"{folder}/{grid.path.name}" for folder in RESULTS_FOLDERS}
    if grid.path.resolve().is_relative_to(repo.resolve()):
        folders.add(grid.path.resolve().relative_to(repo.resolve()).as_posix())
    added = _runs_added(repo)
    return min((added[f] for f in folders if f in added), key=lambda c: c.date, default=None)


@cache
def _parent(sha: str, repo: Path) -> str | None:
    parents = _git("rev-list", "--parents", "-n", "1", sha, repo=repo).split()[1:]
    return parents[0] if parents else None


@cache
def _commit(sha: str, repo: Path) -> Commit:
    full, date = _git("show", "-s", "--format=%H %cI", sha, repo=repo).split()
    return Commit(full, datetime.fromisoformat(date))


GRID_NAME = re.compile(r"^name:\s*['\"]?([^'\"\s#]+)", re.MULTILINE)


@cache
def _checkout_of_configs(commit: str, repo: Path) -> tuple[tempfile.TemporaryDirectory, dict[str, list[Path]]]:
    """The configs as they stood at `commit`, extracted (the folder lives as long as the cache), and {a grid name
    a file there declares: those files}: a grid file is read only when its grid is asked for."""
    archive = _git("archive", "--format=tar", commit, "configs", text=False, repo=repo)
    folder = tempfile.TemporaryDirectory()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder.name, filter="data")
    named: dict[str, list[Path]] = {}
    for path in sorted((Path(folder.name) / "configs").rglob("*.yaml")):
        found = GRID_NAME.search(path.read_text())
        named.setdefault(found.group(1) if found else path.stem, []).append(path)
    return folder, named


@cache
def _grid_claims_at(commit: str, name: str, repo: Path) -> tuple[dict, ...]:
    """Grid `name`'s raw claims as its grid file stood at `commit`, each with its grid's `select` block (() when no
    grid file of that name read there)."""
    for path in _checkout_of_configs(commit, repo)[1].get(name, []):
        try:
            found, claims, select = declared_raw_claims(path)
        except GridError:  # not a grid file (a recipe, a model, a data piece), or one an older format wrote
            continue
        if found == name:
            return tuple({**c, "select": select} for c in claims if isinstance(c, dict))
    return ()


@cache
def _registry_at(commit: str, repo: Path) -> dict[str, dict]:
    """{paper claim id: its registry entry} as configs/claims.yaml stood at `commit` ({} before it existed)."""
    path = Path(_checkout_of_configs(commit, repo)[0].name) / REGISTRY_FILE
    raw = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    return {c["id"]: c for c in raw.get("claims") or [] if isinstance(c, dict) and "id" in c}


def _fields(entry: dict, names: Sequence[str]) -> dict:
    return {name: entry.get(name) for name in names}


def _earlier(now: dict, then: list[dict]) -> dict | None:
    """The entry of `then` that `now` is a later form of: one with its deciding fields, else of its words, else of
    its cells and metric, else of its cells (None: there was none)."""
    keys = (lambda e: _fields(e, DECIDING), lambda e: e.get("claim"), lambda e: (e.get("a"), e.get("b"), e.get("metric")))
    return next((old for key in keys for old in then if key(old) == key(now)), None)


def _change(now: dict, old: dict | None, names: Sequence[str]) -> str:
    """"" when `old` has `now`'s fields, else what differs (or that there was no such entry)."""
    if old is None:
        return "not declared before its data"
    return "; ".join(f"{name}: {old.get(name)!r} -> {now.get(name)!r}" for name in names if old.get(name) != now.get(name))


def _declared_in(now: dict, first: Commit, entry_at: Callable[[str], dict | None], names: Sequence[str],
                 paths: Sequence[str], repo: Path) -> str:
    """The commit from which an entry changed after its data has had today's fields (`entry_at(commit)`: the entry
    at a commit, None when absent): the oldest of the commits since its first data that touched `paths` after which
    it never differed. "uncommitted" when the working tree's differs from HEAD's."""
    since = f"{first.sha}^..HEAD" if _parent(first.sha, repo) else "HEAD"
    commits = _git("rev-list", since, "--", *paths, repo=repo).split()  # newest first
    declared = "uncommitted"
    for sha in commits:
        entry = entry_at(sha)
        if entry is None or _fields(entry, names) != _fields(now, names):
            break
        declared = sha
    return declared


def _row(kind: str, ident: str, first: Commit | None, declared: str | None, change: str, repo: Path,
         earlier: dict | None = None, **extra) -> dict:
    if first is None:
        status = "no committed data"
    elif not change:
        status = "pre-declared"
    else:
        status = ("introduced after its data" if kind == "precondition" else
                  "registered after its data" if kind == "paper claim" and earlier is None else "exploratory")
    when = _commit(declared, repo).to_dict() if declared and declared != "uncommitted" else {
        "commit": declared or "", "date": ""}
    return {"kind": kind, "id": ident, "status": status, "first_data": first.to_dict() if first else None,
            "declared": when, "change": change, "earlier": earlier if change else None, **extra}


def counted_comparisons(claims: Iterable) -> set[tuple[str, str]]:
    """(grid, words) of every comparison counted for a claim of the board (lit_resformer.verdicts.paper_claims):
    the comparisons whose verdicts decide claims. Words without a matrix point's " [...]"."""
    return {(grid, re.sub(r" \[[^\]]*\]$", "", e.row.claim.claim)) for c in claims for e in c.evidence if e.counted
            for grid in (e.row.grids or (e.row.grid,))}


def declaration_report(results_roots: Sequence[str | Path], repo: Path = REPO_ROOT) -> list[dict]:
    """One row per comparison of every grid under `results_roots` (grid run directories or folders of them, as the
    board reads them), per paper claim of the registry and per precondition: its status (STATUSES), its first data
    and the commit that declared its present form (for a pre-declared one: the last commit before its data, which
    had it already), what changed after its data and the form it had before (`earlier`). DeclarationError in a
    shallow clone or where a grid file is not in the checkout."""
    _require_history(repo)
    rows = []
    first_by_text: dict[str, Commit] = {}  # a comparison's words -> its grid's first data, the earliest anywhere
    for grid in grid_dirs(results_roots):
        manifest = grid.read_manifest()
        path = locate_grid_file(manifest.get("grid_file"), grid.path)
        if path is None:
            raise DeclarationError(f"{grid.path}: its grid file {manifest.get('grid_file')} is not in the checkout "
                                   "around these results: the declarations cannot be dated")
        name, claims, select = declared_raw_claims(path)
        first = first_data(grid, repo)
        before = _parent(first.sha, repo) if first else None
        then = list(_grid_claims_at(before, name, repo)) if before else []
        for raw in claims:
            claim = {**raw, "select": select}
            old = _earlier(claim, then) if first else None
            change = _change(claim, old, DECIDING) if first else ""
            if first is None:
                declared = None
            elif change:
                declared = _declared_in(claim, first, lambda sha, c=claim, n=name: _earlier(c, list(_grid_claims_at(sha, n, repo))),
                                        DECIDING, ["configs"], repo)
            else:
                declared = before
            rows.append(_row("comparison", f"{name}: {claim['claim']}", first, declared, change, repo,
                             _fields(old, DECIDING) if old else None, grid=name, claim=claim["claim"],
                             fields=_fields(claim, DECIDING)))
            if first:
                text = claim["claim"]
                first_by_text[text] = min(first, first_by_text.get(text, first), key=lambda c: c.date)
    _mark_confirmed(rows)
    registry = yaml.safe_load((repo / REGISTRY_FILE).read_text()) or {}
    claim_first: dict[str, Commit | None] = {}
    for entry in registry.get("claims") or []:
        times = [first_by_text[t] for t in entry.get("comparisons") or [] if t in first_by_text]
        first = claim_first[entry["id"]] = min(times, key=lambda c: c.date, default=None)
        before = _parent(first.sha, repo) if first else None
        old = _registry_at(before, repo).get(entry["id"]) if before else None
        change = _change(entry, old, REGISTRY_DECIDING) if first else ""
        if first is None:
            declared = None
        elif change:
            declared = _declared_in(entry, first, lambda sha, i=entry["id"]: _registry_at(sha, repo).get(i),
                                    REGISTRY_DECIDING, [REGISTRY_FILE], repo)
        else:
            declared = before
        rows.append(_row("paper claim", entry["id"], first, declared, change, repo,
                         _fields(old, REGISTRY_DECIDING) if old else None))
    for pid, pre in (registry.get("preconditions") or {}).items():
        times = [t for cid in pre.get("applies_to") or claim_first if (t := claim_first.get(cid)) is not None]
        first = min(times, key=lambda c: c.date, default=None)
        sha, date = introduced(pre["needle"], pre.get("paths") or ["."], repo)
        after = first is not None and (sha == "uncommitted" or datetime.fromisoformat(date) > first.date)
        rows.append(_row("precondition", pid, first, sha, f"introduced {date[:16] or 'uncommitted'}" if after else "",
                         repo, justification=pre.get("justification", ""), cites=pre["cites"]))
    return rows


def _mark_confirmed(rows: list[dict]) -> None:
    """An exploratory comparison is confirmed where another grid declares it with the same deciding fields,
    pre-declared there, and that grid's first data came after the commit that declared the form (its seeds first ran
    after the change): a confirmation grid (e.g. configs/grids/evidence/fig9-confirm.yaml). It is counted there; the
    exploratory row stays shown and uncounted."""
    declared_ok = [r for r in rows if r["kind"] == "comparison" and r["status"] == "pre-declared"
                   and grid_tier(r["grid"]) != "transfer"]  # another regime replicates nothing of the paper's
    for r in rows:
        if r["kind"] != "comparison" or r["status"] != "exploratory" or not r["declared"]["date"]:
            continue
        after = datetime.fromisoformat(r["declared"]["date"])
        by = next((w for w in declared_ok if w["grid"] != r["grid"] and w["fields"] == r["fields"]
                   and datetime.fromisoformat(w["first_data"]["date"]) > after), None)
        if by is not None:
            r.update(status="confirmed", confirmed_by={"grid": by["grid"], **by["first_data"]})


def introduced(needle: str, paths: Sequence[str], repo: Path = REPO_ROOT) -> tuple[str, str]:
    """(commit, ISO date) of the first commit whose diff adds `needle` under `paths` (git log -S); ("uncommitted",
    "") when no commit has it yet."""
    out = _git("log", "-S", needle, "--reverse", "--format=%H %cI", "--", *paths, repo=repo).split("\n")[0].strip()
    return tuple(out.split(" ", 1)) if out else ("uncommitted", "")


def _when(entry: dict | None) -> str:
    return f"{entry['date'][:16]} ({entry['commit'][:7]})" if entry and entry.get("date") else (
        (entry or {}).get("commit") or "–")


def counts(rows: Sequence[dict]) -> dict[str, dict[str, int]]:
    """{kind: {status: how many}} over the report's rows."""
    return {kind: {s: n for s in STATUSES if (n := sum(r["kind"] == kind and r["status"] == s for r in rows))}
            for kind in dict.fromkeys(r["kind"] for r in rows)}


def markdown(rows: Sequence[dict]) -> str:
    """The report as a table, the exploratory first, then its counts by kind."""
    lines = ["| status | kind | what | first data | declared | change after the data |", "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (STATUSES.index(r["status"]), r["kind"], r["id"])):
        cells = [r["status"], r["kind"], r["id"], _when(r["first_data"]), _when(r["declared"]), r["change"] or "–"]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    tally = "; ".join(f"{kind}s: " + ", ".join(f"{n} {s}" for s, n in by_status.items())
                      for kind, by_status in counts(rows).items())
    return "\n".join(lines) + "\n\n" + tally + "\n"


def as_json(rows: Sequence[dict]) -> str:
    return json.dumps(list(rows), indent=2) + "\n"

