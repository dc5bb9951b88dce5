"""write_report(grid_dir): report.md and a self-contained index.html (PNG plots embedded as base64,
and also saved under plots/) for one grid's runs.

Sections: final losses (mean ± std over seeds, paired difference to the baseline with a 95% t
interval), relative training loss against the baseline smoothed over 10 and 100 logged steps (paper
§4.1.2), validation loss per domain (Table 5 form), critical points (where the baseline overtakes a
cell for good; Fig. 14 for grids with a matrix), scaling laws and equivalence savings for sweep grids
(ablations.scaling), cost (parameters, KV cache per token, tokens/s),
zero-shot accuracy (Table 1 form) when runs hold eval/results.json, attention entropy by layer when
runs hold analysis/analysis.json, and the status of every run.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from . import metrics as M
from .stats import Difference, critical_point, mean_std, paired_difference
from .store import TRAIN_LOSS_WINDOW, atomic_write_text

RELATIVE_WINDOWS = (10, 100)
EVAL_RESULTS = Path("eval/results.json")


# ----------------------------------------------------------------------------------------------
# loading


@dataclass
class RunRecord:
    cell: str
    seed: int
    path: Path
    summary: dict | None
    metrics: pd.DataFrame

    @property
    def status(self) -> str:
        return self.summary["status"] if self.summary else "pending"

    def train_curve(self, window: int) -> pd.Series:
        loss = M.series(self.metrics, M.TRAIN_LOSS)
        return M.smooth(loss[np.isfinite(loss)], window)

    def final_train(self) -> float | None:
        curve = self.train_curve(TRAIN_LOSS_WINDOW)
        return float(curve.iloc[-1]) if len(curve) else None

    def final_val(self, column: str = M.VAL_LOSS) -> float | None:
        values = M.series(self.metrics, column)
        return float(values.iloc[-1]) if len(values) else None


def load_runs(grid_dir: Path, cells: Sequence[str]) -> dict[str, list[RunRecord]]:
    runs: dict[str, list[RunRecord]] = {}
    for cell in cells:
        seed_dirs = sorted(
            (d for d in (grid_dir / cell).glob("seed*") if d.is_dir() and d.name[4:].isdigit()),
            key=lambda d: int(d.name[4:]),
        )
        records = []
        for d in seed_dirs:
            summary_path = d / "summary.json"
            summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
            records.append(RunRecord(cell, int(d.name[4:]), d, summary, M.read_metrics(d)))
        runs[cell] = records
    return runs


# ----------------------------------------------------------------------------------------------
# the report is built as markdown; index.html is that markdown rendered, with every image inlined


class Document:
    def __init__(self, base: Path) -> None:
        self.base = base  # image links are relative to the report's directory
        self.parts: list[str] = []

    def heading(self, level: int, text: str) -> None:
        self.parts.append(f"{'#' * level} {text}\n")

    def text(self, text: str) -> None:
        self.parts.append(text + "\n")

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        cell = lambda v: str(v).replace("|", "\\|")  # noqa: E731
        lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
        self.parts.append("\n".join(lines) + "\n")

    def image(self, path: Path, caption: str) -> None:
        self.parts.append(f"![{caption}]({path.relative_to(self.base).as_posix()})\n")

    def raw(self, markdown_text: str) -> None:
        self.parts.append(markdown_text.rstrip() + "\n")

    def markdown(self) -> str:
        return "\n".join(self.parts)


HTML_STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
    "td,th{border:1px solid #bbb;padding:0.25em 0.6em;text-align:right}"
    "td:first-child,th:first-child{text-align:left}th{background:#eee}"
    "img{max-width:100%;border:1px solid #ddd}code{background:#f3f3f3}"
)


def markdown_to_html(text: str, base: Path, title: str) -> str:
    """A self-contained page: the markdown rendered, local images embedded as base64 PNG data."""
    import markdown

    body = markdown.markdown(text, extensions=["tables"])

    def inline(match: re.Match) -> str:
        path = base / html.unescape(match.group(1))
        if not path.is_file():
            return match.group(0)
        return f'src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}"'

    body = re.sub(r'src="(?!data:)([^"]+\.png)"', inline, body)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{HTML_STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )


# ----------------------------------------------------------------------------------------------
# formatting


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def _fmt_mean_std(values: list[float], digits: int = 4) -> str:
    if not values:
        return "–"
    mean, std = mean_std(values)
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")


def _fmt_difference(diff: Difference | None) -> str:
    if diff is None:
        return "–"
    if diff.low is None:
        return f"{diff.mean:+.4f} (n={diff.n}, no CI)"
    return f"{diff.mean:+.4f} [{diff.low:+.4f}, {diff.high:+.4f}] (n={diff.n})"


def _fmt_int(value: float | None) -> str:
    return "–" if value is None else f"{int(round(value)):,}"


def _status_note(record: RunRecord) -> str:
    s = record.summary or {}
    if record.status == "diverged":
        return f"diverged at step {s.get('diverged_step')}"
    if record.status in ("failed", "interrupted"):
        return (s.get("error") or "").splitlines()[0] if s.get("error") else ""
    return ""


# ----------------------------------------------------------------------------------------------
# plots


class Plotter:
    def __init__(self, directory: Path, cells: Sequence[str]):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt = plt
        self.directory = directory
        palette = plt.get_cmap("tab10" if len(cells) <= 10 else "tab20")
        self.colors = {cell: palette(i % palette.N) for i, cell in enumerate(cells)}

    def save(self, fig, name: str) -> Path:
        path = self.directory / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        self.plt.close(fig)
        return path

    def curves(self, name: str, curves: dict[str, pd.Series], title: str, ylabel: str, zero_line: str | None = None) -> Path:
        fig, ax = self.plt.subplots(figsize=(8, 4.5))
        if zero_line:
            ax.axhline(0.0, color="black", lw=1, ls="--", label=zero_line)
        for cell, curve in curves.items():
            ax.plot(curve.index, curve.values, label=cell, color=self.colors.get(cell), lw=1.4)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return self.save(fig, name)

    def grouped_bars(self, name: str, table: pd.DataFrame, title: str, ylabel: str) -> Path:
        """table: rows = cells, columns = groups (domains)."""
        fig, ax = self.plt.subplots(figsize=(max(6, 1.2 * len(table.columns) + 2), 4.5))
        width = 0.8 / max(1, len(table.index))
        x = np.arange(len(table.columns))
        for i, cell in enumerate(table.index):
            ax.bar(x + i * width - 0.4 + width / 2, table.loc[cell].values, width, label=cell, color=self.colors.get(cell))
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_xticks(x, list(table.columns), rotation=20)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
        return self.save(fig, name)

    def lines_by_x(self, name: str, lines: dict[str, dict[float, float]], title: str, xlabel: str, ylabel: str, logy: bool) -> Path:
        fig, ax = self.plt.subplots(figsize=(7, 4.5))
        for label, points in lines.items():
            xs = sorted(points)
            ax.plot(xs, [points[x] for x in xs], marker="o", label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if logy:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return self.save(fig, name)


# ----------------------------------------------------------------------------------------------
# the report


def write_report(grid_dir: str | Path) -> Path:
    """Write report.md and index.html into a grid's run directory; return the index.html path."""
    grid_dir = Path(grid_dir)
    manifest_path = grid_dir / "grid.yaml"
    if not manifest_path.is_file():
        grids = sorted(p.parent.name for p in grid_dir.glob("*/grid.yaml"))
        hint = f"; grids under it: {grids}" if grids else ""
        raise FileNotFoundError(f"{grid_dir} is not a grid run directory (no grid.yaml){hint}")
    manifest = yaml.safe_load(manifest_path.read_text())
    cells_info = {c["name"]: c for c in manifest["cells"]}
    cells = list(cells_info)
    runs = load_runs(grid_dir, cells)
    done = {cell: [r for r in records if r.status == "done"] for cell, records in runs.items()}

    plots_dir = grid_dir / "plots"
    plots_dir.mkdir(exist_ok=True)
    for old in plots_dir.glob("*.png"):
        old.unlink()
    plotter = Plotter(plots_dir, cells)
    doc = Document(grid_dir)
    name = manifest["name"]

    doc.heading(1, f"Ablation grid {name}")
    if manifest.get("description"):
        doc.text(manifest["description"])
    statuses = pd.Series([r.status for records in runs.values() for r in records]).value_counts()
    doc.text(
        f"Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC from `{grid_dir}`. "
        f"Base experiment `{manifest.get('base')}`, baseline **{manifest['baseline']}**, "
        f"{len(cells)} cells, seeds {manifest.get('seeds')}. "
        f"Runs: {', '.join(f'{n} {s}' for s, n in statuses.items()) or 'none yet'}. "
        f"Aggregates use finished (done) runs only."
    )

    final_train = {c: {r.seed: v for r in done[c] if (v := r.final_train()) is not None} for c in cells}
    final_val = {c: {r.seed: v for r in done[c] if (v := r.final_val()) is not None} for c in cells}

    _final_table(doc, cells, cells_info, done, final_train, final_val)
    _relative_section(doc, plotter, cells, cells_info, done)
    _validation_section(doc, plotter, cells, cells_info, done)
    _critical_section(doc, plotter, manifest, cells, cells_info, done)
    _scaling_section(doc, grid_dir, manifest)
    _cost_section(doc, cells, cells_info, done)
    _zero_shot_section(doc, cells, done)
    _analysis_section(doc, grid_dir, cells, done)
    _runs_section(doc, runs)

    text = doc.markdown()
    atomic_write_text(grid_dir / "report.md", text)
    index = grid_dir / "index.html"
    atomic_write_text(index, markdown_to_html(text, grid_dir, f"Ablation grid {name}"))
    return index


def _final_table(doc, cells, cells_info, done, final_train, final_val) -> None:
    doc.heading(2, "Final losses")
    doc.text(
        f"Final training loss is the moving average over the last {TRAIN_LOSS_WINDOW} logged steps; "
        "validation loss is the last evaluation. Values are mean ± standard deviation over seeds. "
        "Δ is cell minus its baseline, paired by seed, with a 95% confidence interval from the t "
        "distribution with n − 1 degrees of freedom (n = seeds finished in both). Negative is better."
    )
    rows = []
    for cell in cells:
        base = cells_info[cell]["baseline"]
        is_base = cell == base
        rows.append([
            cell + (" (baseline)" if is_base else ""),
            str(len(done[cell])),
            _fmt_mean_std(list(final_train[cell].values())),
            _fmt_mean_std(list(final_val[cell].values())),
            "" if is_base else _fmt_difference(paired_difference(final_train[cell], final_train[base])),
            "" if is_base else _fmt_difference(paired_difference(final_val[cell], final_val[base])),
        ])
    doc.table(["cell", "n", "final train loss", "final val loss", "Δ train vs baseline", "Δ val vs baseline"], rows)


def _mean_curve(records: list[RunRecord], window: int) -> pd.Series:
    curves = pd.concat({r.seed: r.train_curve(window) for r in records}, axis=1)
    return curves.dropna().mean(axis=1)


def _relative_curve(cell_records: list[RunRecord], base_records: list[RunRecord], window: int) -> pd.Series:
    """Mean over paired seeds of (cell curve - baseline curve), on the steps all of them logged."""
    base_by_seed = {r.seed: r for r in base_records}
    diffs = {
        r.seed: r.train_curve(window) - base_by_seed[r.seed].train_curve(window)
        for r in cell_records
        if r.seed in base_by_seed
    }
    if not diffs:
        return pd.Series(dtype=float)
    return pd.concat(diffs, axis=1).dropna().mean(axis=1)


def _relative_section(doc, plotter, cells, cells_info, done) -> None:
    doc.heading(2, "Training loss")
    curves = {c: _mean_curve(done[c], TRAIN_LOSS_WINDOW) for c in cells if done[c]}
    if not curves:
        doc.text("No finished runs yet.")
        return
    doc.image(plotter.curves("train_loss", curves, f"training loss (moving average {TRAIN_LOSS_WINDOW})", "loss"), "Training loss, mean over seeds.")
    doc.text(
        "Relative training loss (paper §4.1.2): each cell's smoothed curve minus its baseline's, "
        "per seed, averaged over the seeds both finished. Below zero the cell is ahead."
    )
    relative = {}
    for window in RELATIVE_WINDOWS:
        relative[window] = {
            c: curve
            for c in cells
            if c != cells_info[c]["baseline"] and done[c] and done[cells_info[c]["baseline"]]
            and len(curve := _relative_curve(done[c], done[cells_info[c]["baseline"]], window))
        }
        if relative[window]:
            path = plotter.curves(
                f"relative_train_loss_w{window}", relative[window],
                f"training loss relative to the baseline (moving average {window})", "loss − baseline loss",
                zero_line="baseline",
            )
            doc.image(path, f"Relative training loss, window {window}.")


def _validation_section(doc, plotter, cells, cells_info, done) -> None:
    records = [r for c in cells for r in done[c]]
    domains = sorted({d for r in records for d in M.domains(r.metrics)})
    if not any(r.final_val() is not None for r in records):
        return
    doc.heading(2, "Validation loss by domain")
    doc.text(
        "Last evaluation, mean over seeds (Table 5 form). `avg` is the unweighted mean over domains as "
        "in the paper; `overall` is the run's own validation loss over all validation tokens."
    )
    table = {}
    for cell in cells:
        if not done[cell]:
            continue
        row = {d: np.nanmean([r.final_val(M.VAL_DOMAIN_PREFIX + d) or np.nan for r in done[cell]]) for d in domains}
        if domains:
            row["avg"] = float(np.mean([row[d] for d in domains]))
        row["overall"] = np.nanmean([r.final_val() or np.nan for r in done[cell]])
        table[cell] = row
    frame = pd.DataFrame(table).T
    doc.table(["cell", *frame.columns], [[cell, *(_fmt(v) for v in frame.loc[cell])] for cell in frame.index])
    deltas = {
        cell: frame.loc[cell] - frame.loc[cells_info[cell]["baseline"]]
        for cell in frame.index
        if cell != cells_info[cell]["baseline"] and cells_info[cell]["baseline"] in frame.index
    }
    if deltas:
        path = plotter.grouped_bars(
            "val_loss_by_domain", pd.DataFrame(deltas).T, "validation loss relative to the baseline, by domain", "loss − baseline loss"
        )
        doc.image(path, "Final validation loss minus the baseline's, per domain (mean over seeds).")
    val_curves = {}
    for cell in cells:
        if done[cell]:
            series = pd.concat({r.seed: M.series(r.metrics, M.VAL_LOSS) for r in done[cell]}, axis=1).dropna()
            if len(series):
                val_curves[cell] = series.mean(axis=1)
    if val_curves:
        doc.image(plotter.curves("val_loss", val_curves, "validation loss", "loss"), "Validation loss over training, mean over seeds.")


def _critical_section(doc, plotter, manifest, cells, cells_info, done) -> None:
    window = manifest.get("report", {}).get("critical_point_window", 10)
    points = {
        c: critical_point(curve)
        for c in cells
        if c != cells_info[c]["baseline"] and done[c] and done[cells_info[c]["baseline"]]
        and len(curve := _relative_curve(done[c], done[cells_info[c]["baseline"]], window))
    }
    if not points:
        return
    doc.heading(2, "Critical points")
    doc.text(
        f"The critical point of a cell is the first step after which its training loss (moving average "
        f"{window}) stays above its baseline's until the end: where the baseline overtakes it for good "
        "(paper Fig. 14). `not overtaken` means the cell is still ahead at its last step."
    )
    doc.table(
        ["cell", "baseline", "critical step"],
        [[c, cells_info[c]["baseline"], "not overtaken" if s is None else str(s)] for c, s in points.items()],
    )
    matrix_keys = manifest.get("matrix_keys") or []
    if len(matrix_keys) == 1:
        key = matrix_keys[0]
        lines: dict[str, dict[float, float]] = {}
        for cell, step in points.items():
            value = cells_info[cell]["coords"].get(key)
            if step is not None and isinstance(value, (int, float)):
                lines.setdefault(cells_info[cell]["family"] or "cells", {})[value] = step
        if lines:
            path = plotter.lines_by_x(
                "critical_point", lines, f"critical point against {key}", key, "critical step", logy=True
            )
            doc.image(path, f"Critical step (baseline overtakes the cell) for each value of {key}.")


def _scaling_section(doc, grid_dir, manifest) -> None:
    """Fitted scaling laws and equivalence savings, for grids marked as sweeps (`report: {scaling: ...}`)."""
    if not (manifest.get("report") or {}).get("scaling"):
        return
    from .scaling import scaling_section

    doc.raw(scaling_section(grid_dir, plots_dir=grid_dir / "plots", link_base=grid_dir))


def _cost_section(doc, cells, cells_info, done) -> None:
    doc.heading(2, "Cost")
    doc.text(
        "Parameters and KV-cache bytes per token (in the training dtype) come from the run's model "
        "(its checkpoint, else its config); "
        "tokens/s is the median logged training throughput, mean over seeds (runs that shared a machine "
        "are only roughly comparable)."
    )
    rows = []
    for cell in cells:
        summaries = [r.summary or {} for r in done[cell]]
        params = next((s["params"] for s in summaries if s.get("params") is not None), None)
        kv = next((s["kv_cache_bytes_per_token"] for s in summaries if s.get("kv_cache_bytes_per_token") is not None), None)
        base_summaries = [r.summary or {} for r in done[cells_info[cell]["baseline"]]]
        base_kv = next((s["kv_cache_bytes_per_token"] for s in base_summaries if s.get("kv_cache_bytes_per_token")), None)
        speeds = [s["tokens_per_sec"] for s in summaries if s.get("tokens_per_sec") is not None]
        rows.append([
            cell,
            _fmt_int(params),
            _fmt_int(kv),
            "–" if kv is None or not base_kv else f"{kv / base_kv:.3f}",
            "–" if not speeds else f"{np.mean(speeds):,.0f}",
        ])
    doc.table(["cell", "parameters", "KV bytes / token", "KV vs baseline", "tokens/s"], rows)


def _zero_shot_section(doc, cells, done) -> None:
    """Table 1 form from the runs' eval/results.json (lm-eval's results dict), mean over each cell's seeds;
    task order, labels, averages and split notes follow eval.report."""
    per_cell = {}
    for cell in cells:
        results = [json.loads(p.read_text()) for r in done[cell] if (p := r.path / EVAL_RESULTS).is_file()]
        if results:
            per_cell[cell] = _mean_results(results)
    if not per_cell:
        return
    from eval.report import PAPER_TASK_LABELS, table_rows

    rows_by_cell = {cell: table_rows(results, cell) for cell, results in per_cell.items()}
    tasks = [t for t in PAPER_TASK_LABELS if any(t in r[0] for r in rows_by_cell.values())]
    tasks += sorted({t for r in rows_by_cell.values() for t in r[0]} - set(tasks))
    doc.heading(2, "Zero-shot accuracy")
    doc.text("lm-eval zero-shot scores (Table 1 form), mean over each cell's evaluated seeds.")
    rows, notes = [], []
    for cell, (_, cell_rows, cell_notes) in rows_by_cell.items():
        for row in cell_rows:
            values = [row["scores"].get(t) for t in [*tasks, "avg"]]
            marks = ["*" if t in row["stand_in"] else "" for t in [*tasks, "avg"]]
            rows.append([cell, row["metric"], *(_fmt(v, 3) + m for v, m in zip(values, marks, strict=True))])
        notes += [n for n in cell_notes if n not in notes]
    doc.table(["cell", "metric", *(PAPER_TASK_LABELS.get(t, t) for t in tasks), "Avg"], rows)
    if notes:
        doc.text("\n".join(f"- {note}" for note in notes))


def _mean_results(results: list[dict]) -> dict:
    """One lm-eval results dict whose numeric scores are the mean over several runs' results."""
    merged = {key: value for key, value in results[0].items() if key != "results"}
    merged["results"] = {}
    for task in results[0]["results"]:
        runs = [r["results"][task] for r in results if task in r.get("results", {})]
        merged["results"][task] = {
            key: (float(np.mean([run[key] for run in runs if key in run])) if isinstance(value, (int, float)) else value)
            for key, value in runs[0].items()
        }
    return merged


def _analysis_section(doc, grid_dir, cells, done) -> None:
    """lit_resformer.analysis' own section (entropy by layer, first-token ratios, learnable mixing
    weights) over the finished runs; nothing when no run has analysis results or mixing weights."""
    from lit_resformer.analysis import analysis_section

    run_dirs = {cell: [r.path for r in done[cell]] for cell in cells if done[cell]}
    if not run_dirs:
        return
    text, _ = analysis_section(run_dirs, out_dir=grid_dir / "plots", link_base=grid_dir)
    if text:
        doc.raw(text)


def _runs_section(doc, runs) -> None:
    doc.heading(2, "Runs")
    rows = []
    for records in runs.values():
        for r in records:
            s = r.summary or {}
            loss = M.series(r.metrics, M.TRAIN_LOSS)
            rows.append([
                f"{r.cell}/seed{r.seed}",
                r.status,
                str(int(loss.index[-1])) if len(loss) else "–",
                _fmt(r.final_train()),
                _fmt(r.final_val()),
                "–" if s.get("wall_time_sec") is None else f"{s['wall_time_sec'] / 60:.1f} min",
                _status_note(r),
            ])
    doc.table(["run", "status", "last step", "final train", "final val", "wall time", "note"], rows)
