"""Moving a grid's finished results between machines: export on the machine that trained, merge where they are kept.

A grid may be trained in time-bounded slices on machines that start bare and hand back only a few small files (a
lent GPU for ten minutes at a time, a Slurm job with a wall-time limit). Each slice runs the same command with
`--time-limit`; afterwards

    lit-resformer export-results RUNS/<grid> --out OUT --note "device: NVIDIA H100"
    lit-resformer merge-results OUT/<grid>.tar.gz docs/results/            # on the machine that keeps them

The archive holds the grid manifest and, for every finished run (done or diverged), the files of
`RunDir.result_files` (configs, summary, metrics gzip-compressed; no checkpoints); a run shared from another grid
travels as files and is stored once where it is merged (`link_shared_runs`). Runs that did not finish are left out: the
next slice starts them again. Merging never replaces a finished run by a different one, and a folder of merged
results is itself a runs folder: copying it under the next slice's `--runs-dir` makes the runner skip every run
it holds, so nothing is trained twice, and `lit-resformer report` / `claims` / `scaling` read it as they read
any grid run directory.
"""

from __future__ import annotations

import filecmp
import io
import json
import shutil
import tarfile
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from lit_resformer.runs.directory import EXPORT_HISTORY, MANIFEST, GridDir, run_state
from lit_resformer.runs.run_dir import FINISHED, RunDir, compressed_metrics, open_metrics
from lit_resformer.writing import atomic_write, atomic_write_json


class SliceError(ValueError):
    """An export or merge that cannot be done as asked; the message says why."""


def export_grid(grid_dir: str | Path, archive: str | Path, note: str = "") -> dict:
    """Write the finished runs of RUNS/<grid> into a .tar.gz; returns what it holds."""
    grid = GridDir(grid_dir)
    grid_dir = grid.path
    if not grid.is_grid():
        raise SliceError(f"{grid_dir} is not a grid run directory (no {MANIFEST})")
    grid.check_links()  # an export without a shared run would merge as a grid that never trained it
    runs = grid.finished_runs()
    provenance = {"grid": grid.name, "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "runs": [grid.relative(run) for _, _, run in runs], "note": note}
    archive = Path(archive)
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=archive.parent, suffix=".tmp", delete=False) as tmp:
        with tarfile.open(fileobj=tmp, mode="w:gz") as tar:
            tar.add(grid.manifest_file, arcname=f"{grid_dir.name}/{MANIFEST}")
            for _, _, run in runs:
                metrics = set(run.metric_files())
                for file in run.result_files():
                    if file in metrics:
                        name, data = compressed_metrics(file)
                        _add_bytes(tar, f"{grid_dir.name}/{file.parent.relative_to(grid_dir)}/{name}", data)
                    else:
                        tar.add(file, arcname=f"{grid_dir.name}/{file.relative_to(grid_dir)}")
            _add_bytes(tar, f"{grid_dir.name}/{EXPORT_HISTORY}", json.dumps(provenance, indent=2).encode())
    Path(tmp.name).replace(archive)
    return provenance


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), int(datetime.now().timestamp())
    tar.addfile(info, io.BytesIO(data))


def _same_results(run: RunDir, existing: RunDir) -> bool:
    """Whether `existing` holds the results of `run`: every result file with the same content, metrics compared
    as the rows they hold (results merged before exports compressed them keep a plain metrics.csv)."""
    if [f.parent.name for f in run.metric_files()] != [f.parent.name for f in existing.metric_files()]:
        return False
    for file, other in zip(run.metric_files(), existing.metric_files(), strict=True):
        with open_metrics(file) as a, open_metrics(other) as b:
            if a.read() != b.read():
                return False
    metrics = set(run.metric_files())
    return all((existing.path / f.relative_to(run.path)).is_file()
               and filecmp.cmp(f, existing.path / f.relative_to(run.path), shallow=False)
               for f in run.result_files() if f not in metrics)


def merge_export(archive: str | Path, results_dir: str | Path) -> dict:
    """Unpack an export into RESULTS_DIR/<grid>/: new finished runs are added, identical ones kept, and a run
    that is already there with other results is an error (nothing is changed then). Returns what was merged."""
    results_dir = Path(results_dir)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(tmp, filter="data")  # refuses absolute paths, links out of the folder, devices
        grids = [GridDir(d) for d in tmp.iterdir() if d.is_dir()]
        if len(grids) != 1 or not grids[0].is_grid():
            raise SliceError(f"{archive} is not an export of one grid (expected <grid>/{MANIFEST} inside)")
        source_grid = grids[0]
        source = source_grid.path
        target_grid = GridDir(results_dir / source.name)
        target = target_grid.path
        if target_grid.is_grid() and not _extends(source_grid.read_manifest(), target_grid.read_manifest()):
            raise SliceError(f"{target / MANIFEST} describes another version of grid {source.name} (cells, seeds "
                             f"or overrides differ); merge into another folder")
        added, kept_same, conflicts = [], [], []
        for cell, seed, run in source_grid.finished_runs():
            relative = source_grid.relative(run)
            existing = target_grid.run_dir(cell, seed)
            if run_state(existing) in FINISHED:
                (kept_same if _same_results(run, existing) else conflicts).append(relative)
            else:
                added.append((run, existing))
        if conflicts:
            raise SliceError(f"{target} already holds other results for {', '.join(conflicts)}; nothing was merged")
        target.mkdir(parents=True, exist_ok=True)
        atomic_write(target_grid.manifest_file, source_grid.manifest_file.read_text())
        for run, into in added:
            destination = into.path
            if destination.is_symlink():  # shared from a grid that has since left this folder: its files come here
                destination.unlink()
            elif destination.exists():
                shutil.rmtree(destination)  # an unfinished attempt from an earlier merge: the finished one wins
            for file in run.result_files():
                (destination / file.relative_to(run.path)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, destination / file.relative_to(run.path))
        link_shared_runs(results_dir)
        exported = source_grid.export_history_file
        provenance = json.loads(exported.read_text()) if exported.is_file() else {}
        history = json.loads(target_grid.export_history_file.read_text()) if target_grid.export_history_file.is_file() else []
        if added:
            history.append({**provenance, "runs": [source_grid.relative(r) for r, _ in added]})
            atomic_write_json(target_grid.export_history_file, history)
    return {"grid": source.name, "into": str(target), "added": [source_grid.relative(r) for r, _ in added],
            "already_there": kept_same}


def link_shared_runs(results_dir: str | Path) -> list[str]:
    """Store each shared run once: a run a grid shares with the grid that trained it (its summary names that grid) is
    replaced by a relative link to the trained one where RESULTS_DIR holds it with the same results, as the runner
    links it in a runs folder (the reports and the scoreboard read through links). Returns the runs linked."""
    results_dir = Path(results_dir)
    linked = []
    for manifest in sorted(results_dir.glob(f"*/{MANIFEST}")):
        grid = GridDir(manifest.parent)
        for cell, seed, run in grid.finished_runs():
            summary = run.read_summary()  # a summary written before runs named their grid says nothing: kept
            if run.path.is_symlink() or summary.get("grid") in (None, grid.name) or "cell" not in summary:
                continue
            trained = GridDir(results_dir / summary["grid"]).run_dir(summary["cell"], summary["seed"])
            if trained.path.is_symlink() or run_state(trained) not in FINISHED or not _same_results(run, trained):
                continue
            shutil.rmtree(run.path)
            grid.share(cell, seed, trained)
            linked.append(f"{grid.name}/{grid.relative(run)}")
    return linked


def _comparable(manifest: dict) -> dict:
    """The parts of a grid manifest that decide what its runs are (not where the file was read from, nor what
    later versions of the runner derive from the cells for the report)."""
    cells = {c.get("name"): {k: c.get(k) for k in ("overrides", "family", "coords")} for c in manifest.get("cells") or []}
    return {"name": manifest.get("name"), "baseline": manifest.get("baseline"),
            "overrides": manifest.get("overrides"), "cells": cells}


def _extends(source: dict, target: dict) -> bool:
    """Whether the exported grid is the merged one or that grid grown by cells: every merged cell is in the export
    with the same definition, so its runs stay what they were (the export's manifest, a superset, replaces it)."""
    source, target = _comparable(source), _comparable(target)
    return ({k: v for k, v in source.items() if k != "cells"} == {k: v for k, v in target.items() if k != "cells"}
            and all(source["cells"].get(name) == cell for name, cell in target["cells"].items()))
