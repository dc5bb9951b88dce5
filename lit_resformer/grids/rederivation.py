"""Re-derive committed runs: train each again from the config it recorded (its `experiment.yaml`), at this checkout,
and set what it ends with beside what was committed, number by number.

    lit-resformer rederive docs/results/fig7-evidence --cells vanilla --runs-dir rederived --cpu-slots 2 \\
        --threads-per-run 1

A run on the same kind of machine, Python, library versions and thread count is deterministic: its final losses agree
with the committed ones to the last printed digit unless the code that trained it changed what it computes. The table
names both commits, so a difference is either a code change between them (or a dirty tree then) or a machine
difference, which the provenance columns show. Each re-derived run is a normal run directory (`lit-resformer report`,
`analyze` and `claims` read it), written under RUNS_DIR/<grid>/<cell>/seed<k>.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lit_resformer.execution.jobs import RunJob, default_train_command
from lit_resformer.grids.runner import PoolOptions, make_executor
from lit_resformer.provenance import git_state
from lit_resformer.runs.directory import SEED_PREFIX, GridDir
from lit_resformer.runs.run_dir import SUMMARY, RunDir, runs_under
from lit_resformer.writing import atomic_write, atomic_write_json

# What a run ends with, compared (the summary's fields; per-domain ones are expanded from the committed summary).
COMPARED = ("final_val_loss", "best_val_loss", "final_train_loss")
BY_DOMAIN = ("final_val_loss_by_domain",)
# Where each run's machine is recorded: a difference in any of these explains a difference in the numbers.
MACHINE = ("python", "torch", "device", "precision", "threads")


class RederivationError(ValueError):
    pass


@dataclass(frozen=True)
class CommittedRun:
    grid: str
    cell: str
    seed: int
    run: RunDir

    @property
    def name(self) -> str:
        return f"{self.grid}/{self.cell}/seed{self.seed}"


def committed_runs(paths: Iterable[str | Path], cells: Sequence[str] | None = None,
                   seeds: Sequence[int] | None = None) -> list[CommittedRun]:
    """The finished runs under each path (a run directory, a cell's or a grid's), those of `cells` and `seeds` only."""
    found: dict[str, CommittedRun] = {}
    for path in map(Path, paths):
        runs = runs_under(path)
        if not runs:
            raise RederivationError(f"{path}: no run under it (a run directory holds summary.json and experiment.yaml)")
        for run in runs:
            summary = run.read_summary()
            if summary.get("status") != "done" or not run.experiment_file.is_file():
                continue
            committed = CommittedRun(summary["grid"], summary["cell"], int(summary["seed"]), run)
            if (cells is None or committed.cell in cells) and (seeds is None or committed.seed in seeds):
                found.setdefault(committed.name, committed)
    if not found:
        raise RederivationError(f"no finished run under {[str(p) for p in paths]} matches cells={cells} seeds={seeds}")
    # seed by seed, so that a re-derivation stopped part-way leaves whole seeds of every cell to compare
    return sorted(found.values(), key=lambda r: (r.grid, r.seed, r.cell))


def rederive(runs: Sequence[CommittedRun], runs_dir: str | Path, pool: PoolOptions | None = None,
             post_training: Sequence[str] = (), allow_dirty: bool = False,
             train_command: Sequence[str] | None = None) -> list[dict]:
    """Train every run again into RUNS_DIR/<grid>/<cell>/seed<k> (resuming or skipping what is already there, like a
    grid) and return one comparison row per run."""
    commit, dirty = git_state()
    if dirty and not allow_dirty:
        raise RederivationError("the checkout has uncommitted changes: a re-derived run must name the code that "
                                "trained it (commit them, or pass --allow-dirty and say so)")
    command = list(train_command) if train_command is not None else default_train_command()
    jobs = []
    for committed in runs:
        # the committed grid's manifest beside the runs, so that `report` and `claims` read them as that grid
        committed_grid, grid = GridDir(committed.run.path.parent.parent), GridDir.of(runs_dir, committed.grid)
        if committed_grid.is_grid() and not grid.is_grid():
            grid.path.mkdir(parents=True, exist_ok=True)
            atomic_write(grid.manifest_file, committed_grid.manifest_file.read_text())
        target = grid.run_dir(committed.cell, committed.seed)
        recorded = committed.run.read_experiment()
        if target.experiment_file.is_file() and target.read_experiment() != recorded:
            raise RederivationError(f"{target.path} holds another config than {committed.run.experiment_file}; "
                                    f"choose another --runs-dir")
        target.path.mkdir(parents=True, exist_ok=True)
        target.write_experiment(recorded)
        # `execute` skips what is finished (training, analysis), so a second call only completes the first one
        jobs.append(RunJob(committed.grid, committed.cell, committed.seed, target.path, command,
                           post_training=tuple(post_training)))
    errors: dict[str, str] = {}
    make_executor(pool or PoolOptions()).run(
        jobs, lambda job, summary, error: errors.update({job.name: error}) if error else None)
    rows = [compare(committed, RunDir(job.run_dir), errors.get(job.name)) for committed, job in zip(runs, jobs, strict=True)]
    write_comparison(rows, Path(runs_dir), commit, dirty)
    return rows


def compare(committed: CommittedRun, again: RunDir, error: str | None = None) -> dict:
    """The committed and the re-derived numbers of one run side by side, with their difference."""
    before, after = committed.run.read_summary(), again.read_summary() or {}
    values = {key: (before.get(key), after.get(key)) for key in COMPARED}
    for key in BY_DOMAIN:
        for domain, value in (before.get(key) or {}).items():
            values[f"{key.removesuffix('_by_domain')}/{domain}"] = (value, (after.get(key) or {}).get(domain))
    old, new = before.get("provenance") or {}, after.get("provenance") or {}
    return {
        "run": committed.name,
        "committed": str(committed.run.path),
        "rederived": str(again.path),
        "status": after.get("status", "missing") if error is None else f"error: {error}",
        "values": {key: {"committed": a, "rederived": b, "difference": _difference(a, b)}
                   for key, (a, b) in values.items()},
        "identical": after.get("status") == "done" and all(a == b for a, b in values.values()),
        "commits": {"committed": old.get("git_commit"), "committed_dirty": old.get("git_dirty"),
                    "rederived": new.get("git_commit"), "rederived_dirty": new.get("git_dirty")},
        "machine_differences": {key: [old.get(key), new.get(key)] for key in MACHINE if old.get(key) != new.get(key)},
    }


def _difference(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return None
    return b - a


def markdown(rows: Sequence[dict], commit: str | None, dirty: bool | None) -> str:
    """The comparison as a table: one row per run, the final validation loss first."""
    keys = list(dict.fromkeys(key for row in rows for key in row["values"]))
    identical = sum(row["identical"] for row in rows)
    lines = [f"# Re-derived runs: {identical} of {len(rows)} identical to the last digit",
             "",
             f"Written at {commit or 'an unknown commit'}{' with uncommitted changes' if dirty else ''}; a run "
             f"re-derived by an earlier call keeps the commit it was re-derived at. Each cell: committed -> re-derived "
             f"(difference).",
             "",
             "| run | trained at | re-derived at | " + " | ".join(keys) + " | machine differences |",
             "|---|---|---|" + "---|" * len(keys) + "---|"]
    for row in rows:
        commits = row["commits"]
        trained, rederived = (f"{(commits[side] or '?')[:10]}{' (dirty)' if commits[f'{side}_dirty'] else ''}"
                              for side in ("committed", "rederived"))
        cells = []
        for key in keys:
            v = row["values"].get(key) or {}
            if v.get("rederived") is None:
                cells.append(f"{_number(v.get('committed'))} -> {row['status']}")
            elif v["difference"] == 0:
                cells.append(f"{_number(v['committed'])} (same)")
            else:
                cells.append(f"{_number(v['committed'])} -> {_number(v['rederived'])} ({v['difference']:+.2e})")
        machine = "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in row["machine_differences"].items()) or "none"
        lines.append(f"| {row['run']} | {trained} | {rederived} | " + " | ".join(cells) + f" | {machine} |")
    return "\n".join(lines) + "\n"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def write_comparison(rows: Sequence[dict], runs_dir: Path, commit: str | None, dirty: bool | None) -> None:
    runs_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(runs_dir / "rederivation.json", {"commit": commit, "dirty": dirty, "runs": list(rows)})
    atomic_write(runs_dir / "rederivation.md", markdown(rows, commit, dirty))


PENDING = "pending"  # docs/rederivation/pending.{json,md}: the committed runs still to be re-derived


def unrecorded_dirty_runs(results_root: str | Path) -> list[dict]:
    """Every committed run under `results_root` (each once: a shared run's links are skipped) that trained from a
    checkout with uncommitted changes and kept no record of them (no `git_diff_sha256`): what it ran is unknown, so
    it is to be re-derived from a clean commit (`lit-resformer rederive`), and until then its comparisons say so."""
    found = []
    for summary_file in sorted(Path(results_root).glob(f"*/*/{SEED_PREFIX}*/{SUMMARY}")):
        run = RunDir(summary_file.parent)
        if run.path.is_symlink():
            continue
        summary = run.read_summary() or {}
        provenance = summary.get("provenance") or {}
        if provenance.get("git_dirty") and not provenance.get("git_diff_sha256"):
            found.append({"run": f"{summary['grid']}/{summary['cell']}/seed{summary['seed']}",
                          "trained_at": provenance.get("git_commit"), "device": provenance.get("device")})
    return found


def runs_without_provenance(results_root: str | Path) -> list[dict]:
    """Every committed run under `results_root` (each once: a shared run's links are skipped) whose summary has no
    provenance block (trained before runs recorded one): what it ran on is unknown, and its comparisons say so."""
    found = []
    for summary_file in sorted(Path(results_root).glob(f"*/*/{SEED_PREFIX}*/{SUMMARY}")):
        run = RunDir(summary_file.parent)
        summary = {} if run.path.is_symlink() else (run.read_summary() or {})
        if summary and not summary.get("provenance"):
            found.append({"run": run.path.relative_to(Path(results_root)).as_posix(),
                          "started_at": summary.get("started_at")})
    return found


def write_pending(results_root: str | Path, out_dir: str | Path) -> list[dict]:
    """docs/rederivation/pending.json and .md: the unrecorded dirty runs, by grid, with the command that re-derives
    each grid's share (a GPU's where they trained on one)."""
    pending = unrecorded_dirty_runs(results_root)
    out_dir = Path(out_dir)
    atomic_write_json(out_dir / f"{PENDING}.json", pending)
    by_grid: dict[str, list[dict]] = {}
    for run in pending:
        by_grid.setdefault(run["run"].split("/")[0], []).append(run)
    lines = [f"# Runs to re-derive: {len(pending)} committed runs trained from a dirty tree without a record of it", "",
             "Generated by `lit_resformer.grids.rederivation.write_pending` (a test compares it with docs/results). "
             "Each comparison resting on one of these says so in its row; re-derive them from a clean commit on the "
             "kind of machine they trained on, then replace them (as docs/rederivation/*.md record):", ""]
    for grid, runs in by_grid.items():
        devices = sorted({str(r["device"]) for r in runs})
        paths = " ".join(f"{Path(results_root).as_posix()}/{r['run']}" for r in runs)
        lines += [f"- **{grid}**: {len(runs)} runs ({', '.join(devices)}; trained at "
                  f"{', '.join(sorted({str(r['trained_at'])[:10] for r in runs}))})", "",
                  f"      lit-resformer rederive {paths} --runs-dir rederived", ""]
    unknown = runs_without_provenance(results_root)
    lines += [f"## Provenance unknown: {len(unknown)} committed runs without a provenance block", "",
              "Trained before runs recorded what they ran on (device, versions, commit); each comparison resting on "
              "one says \"provenance unknown\" in its row. Re-derive those behind a counted comparison on the CPU; "
              "the rest wait or leave the count.", ""]
    for grid in dict.fromkeys(r["run"].split("/")[0] for r in unknown):
        runs = [r["run"].split("/", 1)[1] for r in unknown if r["run"].startswith(f"{grid}/")]
        lines += [f"- **{grid}**: {len(runs)} runs: {', '.join(runs)}"]
    atomic_write(out_dir / f"{PENDING}.md", "\n".join(lines) + "\n")
    return pending
