"""Table 1 style zero-shot tables (acc and acc_norm per task, plus the average) from lm-eval results.

Input is lm-eval's results dict (as written to ``results.json`` by ``lit_resformer.eval.run``). Besides lm-eval's
own keys it may carry ``lit_resformer.offline`` (the manifest entries of the offline data used),
from which the table's notes say where a task was scored on another split than lm-eval's default.
lm-eval is not imported here, so the grid report can import this module cheaply.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import lit_resformer.writing as reporting

# Paper Table 1 column order and labels.
PAPER_TASK_LABELS = {
    "hellaswag": "HellaSwag",
    "openbookqa": "OBQA",
    "winogrande": "WinoGrande",
    "arc_challenge": "ARC-c",
    "arc_easy": "ARC-e",
    "piqa": "PIQA",
}
METRICS = ("acc", "acc_norm")


def run_name(results: dict, fallback: str) -> str:
    return results.get("lit_resformer", {}).get("name") or fallback


def _metric(task_results: dict, metric: str) -> float | None:
    value = task_results.get(f"{metric},none")
    return float(value) if isinstance(value, (int, float)) else None


def table_rows(results: dict, name: str) -> tuple[list[str], list[dict], list[str]]:
    """-> (task columns, rows, notes); one row per metric: {run, metric, scores: {task|"avg": value}, stand_in}.

    `stand_in` holds the tasks whose acc is shown in the acc_norm row because lm-eval defines no acc_norm
    for them (WinoGrande scores by partial evaluation). Avg is over the paper tasks present (over all tasks
    when none is) and left empty if one of them lacks a score.
    """
    scores = results["results"]
    paper = [t for t in PAPER_TASK_LABELS if t in scores]
    tasks = paper + sorted(t for t in scores if t not in PAPER_TASK_LABELS and _metric(scores[t], "acc") is not None)
    averaged = paper or tasks
    rows = []
    for metric in METRICS:
        row = {"run": name, "metric": metric, "scores": {}, "stand_in": set()}
        for task in tasks:
            value = _metric(scores[task], metric)
            if value is None and metric == "acc_norm" and _metric(scores[task], "acc") is not None:
                value = _metric(scores[task], "acc")
                row["stand_in"].add(task)
            row["scores"][task] = value
        averaged_values = [row["scores"][t] for t in averaged]
        if averaged_values and None not in averaged_values:
            row["scores"]["avg"] = sum(averaged_values) / len(averaged_values)
        rows.append(row)
    notes = []
    stand_ins = sorted(set().union(*(row["stand_in"] for row in rows)))
    if stand_ins:
        notes.append(f"* {', '.join(stand_ins)}: lm-eval defines no acc_norm; acc is shown and averaged instead.")
    if not paper:
        notes.append("Avg over all tasks shown (no paper task in these results).")
    elif len(paper) < len(PAPER_TASK_LABELS):
        notes.append(f"{name}: Avg over the {len(paper)} of {len(PAPER_TASK_LABELS)} paper tasks present.")
    return tasks, rows, notes + split_notes(results, name)


def split_notes(results: dict, name: str) -> list[str]:
    """Which tasks were scored on a different split than lm-eval's, or on a subset of examples."""
    notes = []
    offline = results.get("lit_resformer", {}).get("offline", {})
    for task, entry in offline.items():
        if task in results["results"] and entry["split"] != entry["lm_eval_split"]:
            notes.append(
                f"{name}: {task} scored on the {entry['split']} split ({entry['n_examples']} examples) of the "
                f"offline copy; lm-eval's default is the {entry['lm_eval_split']} split."
            )
    for task, counts in results.get("n-samples", {}).items():
        if task in results["results"] and counts.get("effective", 0) < counts.get("original", 0):
            notes.append(f"{name}: {task} on {counts['effective']} of {counts['original']} examples (limit).")
    return notes


def _label(task: str) -> str:
    return PAPER_TASK_LABELS.get(task, task)


def _cell(row: dict, column: str) -> str:
    value = row["scores"].get(column)
    if value is None:
        return "–"
    return f"{value:.3f}" + ("*" if column in row["stand_in"] else "")


def _collect(results_by_name: Mapping[str, dict]) -> tuple[list[str], list[dict], list[str]]:
    columns: list[str] = []
    rows, notes = [], []
    for name, results in results_by_name.items():
        tasks, run_rows, run_notes = table_rows(results, name)
        columns += [t for t in tasks if t not in columns]
        rows += run_rows
        notes += [n for n in run_notes if n not in notes]
    paper = [t for t in PAPER_TASK_LABELS if t in columns]
    return paper + [t for t in columns if t not in paper], rows, notes


def markdown_table(results_by_name: Mapping[str, dict]) -> str:
    columns, rows, notes = _collect(results_by_name)
    lines = [reporting.markdown_table(
        ["run", "metric", *(_label(t) for t in columns), "Avg"],
        [[row["run"], row["metric"], *(_cell(row, t) for t in [*columns, "avg"])] for row in rows],
    )]
    if notes:
        lines += [""] + [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


def csv_table(results_by_name: Mapping[str, dict]) -> str:
    columns, rows, _ = _collect(results_by_name)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["run", "metric", *columns, "avg"])
    for row in rows:
        values = (row["scores"].get(c) for c in [*columns, "avg"])
        writer.writerow([row["run"], row["metric"], *("" if v is None else v for v in values)])
    return out.getvalue()


def _load(paths: Sequence[str | Path] | Mapping[str, str | Path]) -> dict[str, dict]:
    named = paths.items() if isinstance(paths, Mapping) else ((None, p) for p in paths)
    loaded = {}
    for name, path in named:
        results = json.loads(Path(path).read_text())
        name = name or run_name(results, Path(path).parent.name)
        if name in loaded:
            raise ValueError(f"two results are named {name!r} ({path}); pass a mapping run name -> path instead")
        loaded[name] = results
    return loaded


def zero_shot_table(results_json_paths: Sequence[str | Path] | Mapping[str, str | Path]) -> str:
    """Markdown zero-shot table of several runs (rows run x metric) from their results.json files.

    Give a list of paths (each run is named by its results' ``lit_resformer.name``, else the folder) or
    a mapping run name -> path.
    """
    return markdown_table(_load(results_json_paths))


def write_report(results: dict, out_dir: str | Path, name: str) -> tuple[Path, Path]:
    """Write <out_dir>/zero_shot.md and zero_shot.csv for one run; returns their paths."""
    out_dir = Path(out_dir)
    md_path = reporting.atomic_write(out_dir / "zero_shot.md",
                                     f"# Zero-shot accuracy: {name}\n\n" + markdown_table({name: results}))
    return md_path, reporting.atomic_write(out_dir / "zero_shot.csv", csv_table({name: results}))
