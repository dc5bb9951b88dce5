"""Whether what decides each verdict was written before its results were seen (`lit-resformer claims RESULTS
--preconditions`).

A verdict can be cited only if the fields that decide it were fixed before the runs it judges had results. Checked,
from the project's git history:
- each comparison a grid declares (`claims:` of its grid file, inherited ones included): the fields DECIDING;
- each claim of the paper (configs/claims.yaml): the fields REGISTRY_DECIDING;
- each precondition (configs/claims.yaml `preconditions:`): the commit that introduced its rule (its `needle`); one
  introduced after the results of the claims it applies to carries a `justification:` beside the paper's sentence it
  cites.
A comparison's results are seen when the first run of each of its two sides has finished (a run's `started_at` plus
its `wall_time_sec`; a shared run counts when it trained, wherever that was); a paper claim's when its earliest
comparison's are. The configs are read at the last commit before that moment (`git archive`) and compared field by
field with today's: the same -> "fixed before its results"; otherwise the change is listed with what changed, and it
must carry a `quote:` (the paper's sentence, from its text or PAPER_FACTS, that the changed form states; for a claim
beyond the paper, its source's) or it is "unjustified", which tests/verdicts/test_paper_claims.py does not allow.
Restoring a field to the value it had when the results came is no change.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

import yaml

from lit_resformer.grids.grid import GridError
from lit_resformer.grids.spec import declared_raw_claims, locate_grid_file
from lit_resformer.provenance import REPO_ROOT
from lit_resformer.runs.directory import GridDir, grid_dirs

DECIDING = ("claim", "a", "b", "metric", "direction", "margin", "requires", "at", "over", "target")
REGISTRY_DECIDING = ("statement", "reading", "comparisons", "context", "preconditions")
REGISTRY_FILE = "configs/claims.yaml"


class DeclarationError(ValueError):
    pass


def _git(*args: str, text: bool = True, repo: Path = REPO_ROOT):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=text, check=True).stdout


def finished_at(summary: dict) -> datetime | None:
    """When a run's results existed: its start plus its training time (None when the summary records neither)."""
    started, wall = summary.get("started_at"), summary.get("wall_time_sec")
    if not started or wall is None:
        return None
    return datetime.fromisoformat(str(started)) + timedelta(seconds=float(wall))


def side_seen(grid: GridDir, side: str) -> datetime | None:
    """The first moment a run of `side` (a cell, or a `cells` entry of a matrix grid: all its cells) had finished."""
    cells = [c["name"] for c in grid.read_manifest()["cells"] if side in (c["name"], c.get("family"))]
    times = [t for _, _, run in grid.runs(cells) if (t := finished_at(run.read_summary() or {})) is not None]
    return min(times, default=None)


def comparison_seen(grid: GridDir, a: str, b: str) -> datetime | None:
    """When a comparison's results were first seen: both of its sides had a finished run (None: one has none)."""
    sides = [side_seen(grid, a), side_seen(grid, b)]
    return None if None in sides else max(sides)


@cache
def _commit_before(moment: str, repo: Path) -> str | None:
    out = _git("rev-list", "-1", f"--before={moment}", "HEAD", repo=repo).strip()
    return out or None


@cache
def _configs_at(commit: str, repo: Path) -> tuple[dict[str, list], dict[str, dict]]:
    """({grid name: its raw claims}, {paper claim id: its registry entry}) as the configs stood at `commit`."""
    archive = _git("archive", "--format=tar", commit, "configs", text=False, repo=repo)
    grids: dict[str, list] = {}
    registry: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp, filter="data")
        root = Path(tmp)
        for path in sorted((root / "configs").rglob("*.yaml")):
            if path.relative_to(root).as_posix() == REGISTRY_FILE:
                raw = yaml.safe_load(path.read_text()) or {}
                registry = {c["id"]: c for c in raw.get("claims") or [] if isinstance(c, dict) and "id" in c}
                continue
            try:
                name, claims = declared_raw_claims(path)
            except GridError:  # not a grid file (a recipe, a model, a data piece), or one an older format wrote
                continue
            grids.setdefault(name, claims)
    return grids, registry


def _fields(entry: dict, names: Sequence[str]) -> dict:
    return {name: entry.get(name) for name in names}


def _change(now: dict, then: list[dict], names: Sequence[str], key: str) -> str:
    """"" when one entry of `then` has `now`'s fields, else what differs from the entry of the same `key` (or that
    there was none)."""
    fields = _fields(now, names)
    if any(_fields(old, names) == fields for old in then):
        return ""
    same = next((old for old in then if old.get(key) == now.get(key)), None)
    if same is None:
        return "not declared"
    return "; ".join(f"{name}: {same.get(name)!r} -> {now.get(name)!r}" for name in names
                     if same.get(name) != now.get(name))


def _row(kind: str, ident: str, seen: datetime | None, commit: str | None, change: str, quote: str,
         decides: bool = True) -> dict:
    if seen is None:
        status = "no results yet"
    elif not change:
        status = "fixed before its results"
    elif quote:
        status = "changed after its results, quoted"
    else:
        status = "unjustified" if decides else "unjustified, shown only"
    return {"kind": kind, "id": ident, "results_seen": seen.isoformat() if seen else "", "checked_at": commit or "",
            "change": change, "quote": quote, "status": status, "decides": decides}


def counted_comparisons(claims: Iterable) -> set[tuple[str, str]]:
    """(grid, words) of every comparison counted for a claim of the board (lit_resformer.verdicts.paper_claims):
    the comparisons whose verdicts decide claims. Words without a matrix point's " [...]"."""
    return {(grid, re.sub(r" \[[^\]]*\]$", "", e.row.claim.claim)) for c in claims for e in c.evidence if e.counted
            for grid in (e.row.grids or (e.row.grid,))}


def declaration_report(results_roots: Sequence[str | Path], counted: set[tuple[str, str]] | None = None,
                       repo: Path = REPO_ROOT) -> list[dict]:
    """One row per comparison of every grid under `results_roots` (grid run directories or folders of them, as the
    board reads them), per paper claim of the registry and per precondition: its results' first moment, the commit
    its fields were checked at, what changed since (or ""), its quote and its status. `counted`
    (counted_comparisons): the comparisons that decide a claim; a change after the results of one that does not is
    "unjustified, shown only" (None: every comparison decides)."""
    if _git("rev-parse", "--is-shallow-repository", repo=repo).strip() != "false":
        raise DeclarationError(f"{repo}: a shallow clone has no history to date the claims with")
    rows = []
    seen_by_text: dict[str, datetime] = {}  # a comparison's words -> when its results were first seen, anywhere
    for grid in grid_dirs(results_roots):
        manifest = grid.read_manifest()
        path = locate_grid_file(manifest.get("grid_file"), grid.path)
        if path is None:
            raise DeclarationError(f"{grid.path}: its grid file {manifest.get('grid_file')} is not in the checkout "
                                   "around these results: the declarations cannot be dated")
        name, claims = declared_raw_claims(path)
        for claim in claims:
            seen = comparison_seen(grid, claim["a"], claim["b"])
            commit = _commit_before(seen.isoformat(), repo) if seen else None
            then = _configs_at(commit, repo)[0].get(name, []) if commit else []
            change = _change(claim, then, DECIDING, "claim") if seen else ""
            decides = counted is None or (name, claim["claim"]) in counted
            rows.append(_row("comparison", f"{name}: {claim['claim']}", seen, commit, change, claim.get("quote", ""),
                             decides))
            if seen:
                text = claim["claim"]
                seen_by_text[text] = min(seen, seen_by_text.get(text, seen))
    registry = yaml.safe_load((repo / REGISTRY_FILE).read_text()) or {}
    claim_seen: dict[str, datetime | None] = {}
    for entry in registry.get("claims") or []:
        times = [seen_by_text[t] for t in entry.get("comparisons") or [] if t in seen_by_text]
        seen = claim_seen[entry["id"]] = min(times, default=None)
        commit = _commit_before(seen.isoformat(), repo) if seen else None
        then = list(_configs_at(commit, repo)[1].values()) if commit else []
        change = _change(entry, then, REGISTRY_DECIDING, "id") if seen else ""
        rows.append(_row("paper claim", entry["id"], seen, commit, change, entry.get("quote", "")))
    for pid, pre in (registry.get("preconditions") or {}).items():
        times = [t for cid in pre.get("applies_to") or claim_seen if (t := claim_seen.get(cid)) is not None]
        seen = min(times, default=None)
        commit, date = introduced(pre["needle"], pre.get("paths") or ["."], repo)
        after = seen is not None and (commit == "uncommitted" or datetime.fromisoformat(date) > seen)
        row = _row("precondition", pid, seen, commit, f"introduced {date[:16] or 'uncommitted'}" if after else "",
                   pre.get("justification", ""))
        rows.append({**row, "cites": pre["cites"]})
    return rows


def introduced(needle: str, paths: Sequence[str], repo: Path = REPO_ROOT) -> tuple[str, str]:
    """(commit, ISO date) of the first commit whose diff adds `needle` under `paths` (git log -S); ("uncommitted",
    "") when no commit has it yet."""
    out = _git("log", "-S", needle, "--reverse", "--format=%h %aI", "--", *paths, repo=repo).split("\n")[0].strip()
    return tuple(out.split(" ", 1)) if out else ("uncommitted", "")


def unjustified(rows: Sequence[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "unjustified"]


def markdown(rows: Sequence[dict]) -> str:
    """The report as a table, the changes after their results first."""
    order = {"unjustified": 0, "changed after its results, quoted": 1, "unjustified, shown only": 2,
             "fixed before its results": 3, "no results yet": 4}
    lines = ["| status | kind | what | results first seen | checked at | change | quote |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (order[r["status"]], r["kind"], r["id"])):
        cells = [r["status"], r["kind"], r["id"], r["results_seen"][:16], r["checked_at"][:10], r["change"] or "–",
                 r["quote"] or "–"]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    counts = {s: sum(r["status"] == s for r in rows) for s in order}
    return "\n".join(lines) + "\n\n" + ", ".join(f"{n} {s}" for s, n in counts.items()) + "\n"


def as_json(rows: Sequence[dict]) -> str:
    return json.dumps(list(rows), indent=2) + "\n"
