"""write_report(grid_dir): report.md and a self-contained index.html (PNG plots embedded as base64,
and also saved under plots/) for one grid's runs.

Sections: final losses (mean ± std over seeds, difference to the baseline with a 95% t interval in the seed
design of lit_resformer.measures.stats.seed_design), the verdicts on the grid's claims (lit_resformer.verdicts.judgements) with the grid's regime,
relative training loss against the baseline
smoothed over 10 and 100 logged steps (paper §4.1.2), validation loss per domain (Table 5 form), critical
points (where the baseline overtakes a cell for good; Fig. 14 for grids with a matrix), the final gap against
training length (Fig. 7, left), scaling laws and equivalence savings for sweep grids (lit_resformer.measures.scaling), cost
(parameters, KV cache per token, tokens/s), zero-shot accuracy (Table 1 form) when runs hold eval/results.json,
attention entropy by layer when runs hold analysis/analysis.json, the status of every run, and what the runs
ran on (their provenance). The loss plots draw the unigram loss of the validation tokens as a reference line, and
runs not at least 1 nat below it are flagged as "not past the unigram plateau". Everything is read from the grid's
results (lit_resformer.runs.results), loaded once.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from lit_resformer.grids.changes import common_changes, show_value
from lit_resformer.grids.spec import LADDER_OVER, grid_description, refresh_claims
from lit_resformer.measures.scaling import sweep_analysis
from lit_resformer.measures.stats import (
    PLATEAU_MARGIN,
    TREND_TAIL,
    TREND_UNIT,
    CrossingSearch,
    SeedTest,
    compare_seeds,
    mean_std,
    plateau_gap,
    search_crossing,
    seed_design,
)
from lit_resformer.provenance import FIELDS as PROVENANCE_FIELDS
from lit_resformer.reports.budget import (
    budget_section,
    by_machine,
    machine,
    machine_labels,
    machines_note,
    same_machine_ratio,
)
from lit_resformer.reports.document import Document, LadderLayout, Plotter
from lit_resformer.reports.forest import forest_plot
from lit_resformer.reports.kv_frontier import kv_frontier_section
from lit_resformer.reports.ladder_section import ladder_section
from lit_resformer.reports.lead import grid_lead, terminal_verdicts
from lit_resformer.reports.learning_rate_section import learning_rate_section
from lit_resformer.reports.scaling_section import scaling_section
from lit_resformer.runs.directory import GridDir, grid_dirs, grid_index
from lit_resformer.runs.results import GridResults, RunResult, load_results, relative_curves
from lit_resformer.runs.summary import TRAIN_LOSS_WINDOW
from lit_resformer.verdicts.judgements import evaluate_grid
from lit_resformer.verdicts.regime import grid_regime, regime_text
from lit_resformer.verdicts.rendering import ADJUSTMENT_NOTE
from lit_resformer.verdicts.rendering import counts as claim_counts
from lit_resformer.verdicts.rendering import table as claims_table
from lit_resformer.verdicts.verdict import corpus_mismatch, data_seeds
from lit_resformer.writing import atomic_write, outside_legend

RELATIVE_WINDOWS = (10, 100)


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


def _fmt_difference(diff: SeedTest | str | None) -> str:
    if diff is None:
        return "–"
    if isinstance(diff, str):  # why the two cells are not compared
        return diff
    if diff.low is None:
        return f"{diff.estimate:+.4f} (n={diff.n}, {diff.design}, no CI)"
    return f"{diff.estimate:+.4f} [{diff.low:+.4f}, {diff.high:+.4f}] (n={diff.n}, {diff.design})"


def _versus_baseline(results: GridResults, finals: dict[str, dict[int, float]], cell: str,
                     base: str) -> SeedTest | str | None:
    """cell - base on their final values with a two-sided 95% t interval, paired by seed only where a seed's two
    runs share a data order that differs between seeds (stats.seed_design), else unpaired (Welch); None when a
    side has no value; why not, for runs of different corpora (verdicts.verdict.corpus_mismatch)."""
    if not finals[cell] or not finals[base]:
        return None
    if mismatch := corpus_mismatch([*results.done[cell].values(), *results.done[base].values()]):
        return f"not compared: {mismatch}"
    design = seed_design(data_seeds(results.done[cell]), data_seeds(results.done[base]))
    return compare_seeds(finals[cell], finals[base], design)


def _fmt_int(value: float | None) -> str:
    return "–" if value is None else f"{int(round(value)):,}"


def _status_note(record: RunResult) -> str:
    s = record.summary
    if record.status == "diverged":
        return f"diverged at step {s.get('diverged_step')}"
    if record.status in ("failed", "interrupted"):
        return (s.get("error") or "").splitlines()[0] if s.get("error") else ""
    if record.status == "done":
        gap = plateau_gap(record.final("val_loss"), record.unigram_loss)
        if gap is None:
            return "no unigram reference logged"
        if gap < PLATEAU_MARGIN:
            return f"not past the unigram plateau ({gap:.2f} nats below its unigram loss {s['unigram_val_loss']:.3f})"
    return ""


# ----------------------------------------------------------------------------------------------
# the report


def write_report(grid_dir: str | Path) -> Path:
    """Write report.md and index.html into a grid's run directory; return the index.html path. Its claims are the
    ones its manifest stores, refreshed first from its grid file where the checkout around it has that file
    (lit_resformer.grids.spec.refresh_claims); a comparison of runs another grid trained is judged in that grid when
    it sits in the same folder (the index of the grids beside it)."""
    refreshed = refresh_claims(GridDir(grid_dir))
    if refreshed:
        print(refreshed)
    results = load_results(grid_dir)
    grid_dir = results.grid_dir.path
    manifest = results.manifest
    cells_info = results.cell_info
    cells = results.cells
    runs = results.runs
    done = {cell: list(by_seed.values()) for cell, by_seed in results.done.items()}

    plots_dir = results.grid_dir.plots_dir
    plots_dir.mkdir(exist_ok=True)
    for old in plots_dir.glob("*.png"):
        old.unlink()
    plotter = Plotter(plots_dir, cells, tokens_per_step={cell: _tokens_per_step(done[cell]) for cell in cells},
                      ladder=LadderLayout.of(cells_info))
    doc = Document(grid_dir)
    name = manifest["name"]

    plan = results.grid_dir.progress(cells, manifest.get("seeds", []))  # runs not started yet count as pending
    statuses = {state: len(runs_in_state) for state, runs_in_state in sorted(plan.items(), key=lambda i: -len(i[1]))}
    stuck = [r.name for records in done.values() for r in records
             if (gap := plateau_gap(r.final("val_loss"), r.unigram_loss)) is None or gap < PLATEAU_MARGIN]
    warnings = [f"**{len(stuck)} finished run(s) not past the unigram plateau** (final validation loss less than "
                f"{PLATEAU_MARGIN:g} nat below the unigram loss of its validation tokens, or no reference logged): "
                f"{', '.join(stuck)}. Their comparisons are early-training behaviour, not evidence."] if stuck else []

    final_train, final_val = results.finals("train_loss"), results.finals("val_loss")
    sweep = sweep_analysis(results)
    verdicts = evaluate_grid(results, sweep, index=grid_index(grid_dirs([results.grid_dir.path.parent])))
    regime = grid_regime(results)

    doc.heading(1, f"Ablation grid {name}")
    baseline = manifest["baseline"]
    compares = (f"{len(cells)} cells: **{baseline}** (the baseline)"
                + "".join(f", {cell}" for cell in cells if cell != baseline)
                + f"; seeds {manifest.get('seeds')}; runs: {', '.join(f'{n} {s}' for s, n in statuses.items()) or 'none yet'}.")
    description = grid_description(results.grid_dir, manifest)
    doc.lead(*grid_lead(f"{description} {compares}".strip(), regime and regime_text(regime), verdicts, warnings,
                        grid_dir))

    _claims_section(doc, verdicts, regime, forest_plot(verdicts, plots_dir / "forest.png",
                                                       f"{name}: each comparison, a − b with its 95% interval"))
    _final_table(doc, results, final_train, final_val)
    if sweep is not None and sweep.fit is not None:  # the sweep's claim shows its grid verdict (Holm), the Claims section's
        decided = {v.claim.claim: v for v in verdicts}
        sweep = replace(sweep, fit={**sweep.fit, "claims": [
            c | ({"verdict": decided[c["claim"]].verdict, "p_holm": decided[c["claim"]].p_holm,
                  "fragile": decided[c["claim"]].fragile} if c["claim"] in decided else {})
            for c in sweep.fit["claims"]]})
    unigram = _unigram_reference(results)
    _relative_section(doc, plotter, cells, cells_info, done, unigram)
    _validation_section(doc, plotter, cells, cells_info, done, unigram)
    _critical_section(doc, plotter, manifest, cells, cells_info, done)
    _training_length_section(doc, plotter, results, final_train, final_val)
    learning_rate_section(results, plotter, doc)
    ladder_section(results, plotter, doc)
    if sweep is not None:
        doc.raw(scaling_section(sweep, plots_dir=plots_dir, link_base=grid_dir))
    _cost_section(doc, results)
    doc.raw(budget_section(results))
    kv_frontier_section(results, plotter, doc)
    _zero_shot_section(doc, cells, done)
    _analysis_section(doc, grid_dir, plotter, done)
    # what a reader looks up rather than reads: the cells and provenance are folded in index.html
    _runs_section(doc, runs)
    _cells_section(doc, manifest)
    _provenance_section(doc, results, f"{_written_from(results)} Base experiment `{manifest.get('base')}`, baseline "
                                      f"**{manifest['baseline']}**, {len(cells)} cells, seeds {manifest.get('seeds')}. "
                                      "Aggregates use finished (done) runs only.")

    text = doc.markdown()
    atomic_write(results.grid_dir.report_file, text)
    index = results.grid_dir.index_file
    atomic_write(index, doc.html())
    if verdicts:  # the answer where the report was asked for (`report`, the end of `grid`), sized to the terminal
        print(terminal_verdicts(verdicts, shutil.get_terminal_size().columns), end="")
    return index


def _written_from(results: GridResults) -> str:
    """What the report was written from, dated by its runs (the last one to finish), never by the clock or the folder's
    path: the same runs give the same report, byte for byte, wherever and whenever it is written, so that reading a
    committed grid (`lit-resformer report docs/results/<grid>`) leaves its tracked report.md as it was."""
    finished = [end for records in results.runs.values() for r in records if (end := r.recorded.get("finished_at"))]
    if not finished:
        return "Written from the grid's runs; none has finished yet."
    last = max(datetime.fromisoformat(end) for end in finished).astimezone(timezone.utc)
    return f"Written from the grid's runs as they stood when the last of them finished, {last:%Y-%m-%d %H:%M} UTC."


def _cells_section(doc, manifest) -> None:
    """What each cell changes relative to the base experiment: one column per changed field, the changes every cell
    makes alike in a line above. A grid run before the manifest recorded the base values (lit_resformer.runs.directory's
    migration) shows its grid file's overrides without them."""
    cells = manifest["cells"]
    doc.heading(2, "Cells", collapsed=True)
    with_base = manifest.get("base_values_recorded", True)
    changes = {c["name"]: {key: tuple(change) for key, change in c["changes"].items()} for c in cells}
    common = common_changes(changes)
    fields = sorted({key for fields in changes.values() for key in fields} - set(common))
    base_value = {key: next(fields[key][0] for fields in changes.values() if key in fields) for key in fields}
    if with_base:
        doc.text("What each cell changes relative to the base experiment (every field with its value, defaults "
                 "filled in on both sides); an empty entry keeps the base value.")
    else:
        doc.text("What each cell sets, as the grid file wrote it (this grid ran before its manifest recorded the base "
                 "experiment's values); an empty entry keeps the base value.")

    def change(key: str, before: object, after: object) -> str:
        return f"{key} {show_value(before)} → {show_value(after)}" if with_base else f"{key} → {show_value(after)}"

    def column(key: str) -> str:
        return f"{key} (base {show_value(base_value[key])})" if with_base else key

    if common:
        doc.text("Every cell: " + "; ".join(change(key, a, b) for key, (a, b) in common.items()) + ".")
    if fields:
        doc.table(["cell", *(column(key) for key in fields)],
                  [[cell, *(show_value(own[key][1]) if key in own else "" for key in fields)]
                   for cell, own in changes.items()])


def _final_table(doc, results: GridResults, final_train, final_val) -> None:
    doc.heading(2, "Final losses")
    doc.method(
        f"Final training loss is the moving average over the last {TRAIN_LOSS_WINDOW} logged steps; "
        "validation loss is the last evaluation. Values are mean ± standard deviation over seeds. "
        "Δ is cell minus its baseline with a 95% t interval: paired by seed (n − 1 degrees of freedom, n = seeds "
        "finished in both) when a seed's two runs share a data order that differs between seeds, else unpaired "
        "(Welch's t; n = the smaller side). Negative is better."
    )
    rows = []
    for cell in results.cells:
        base = results.cell_info[cell]["baseline"]
        is_base = cell == base
        rows.append([
            cell + (" (baseline)" if is_base else ""),
            str(len(results.done[cell])),
            _fmt_mean_std(list(final_train[cell].values())),
            _fmt_mean_std(list(final_val[cell].values())),
            "" if is_base else _fmt_difference(_versus_baseline(results, final_train, cell, base)),
            "" if is_base else _fmt_difference(_versus_baseline(results, final_val, cell, base)),
        ])
    doc.table(["cell", "n", "final train loss", "final val loss", "Δ train vs baseline", "Δ val vs baseline"], rows)


def _across_seeds(curves: dict[int, pd.Series]) -> tuple[pd.Series, tuple[pd.Series, pd.Series]]:
    """The mean over seeds on the steps every seed logged, and its band there: the lowest and the highest seed."""
    frame = pd.concat(curves, axis=1).astype(float).dropna()
    return frame.mean(axis=1), (frame.min(axis=1), frame.max(axis=1))


SEED_BAND = "the band spans the lowest to the highest seed"
LOSS_UNIT = "loss (nats)"


def _relative_section(doc, plotter, cells, cells_info, done, unigram) -> None:
    doc.heading(2, "Training loss")
    spread = {c: _across_seeds({r.seed: r.train_curve(TRAIN_LOSS_WINDOW) for r in done[c]}) for c in cells if done[c]}
    spread = {c: curve for c, curve in spread.items() if len(curve[0])}
    if not spread:
        doc.text("No finished run has logged its training loss yet.")
        return
    path = plotter.curves("train_loss", {c: mean for c, (mean, _) in spread.items()},
                          f"training loss (moving average {TRAIN_LOSS_WINDOW})", LOSS_UNIT, reference=unigram,
                          bands={c: band for c, (_, band) in spread.items()})
    doc.image(path, f"Training loss, mean over seeds; {SEED_BAND}.")
    doc.text(
        "Relative training loss (paper §4.1.2): each cell's smoothed curve minus its baseline's, "
        "per seed, averaged over the seeds both finished. Below zero the cell is ahead."
    )
    for window in RELATIVE_WINDOWS:
        relative = {c: _across_seeds(diffs) for c in cells
                    if c != cells_info[c]["baseline"] and done[c] and done[cells_info[c]["baseline"]]
                    and (diffs := relative_curves({r.seed: r for r in done[c]},
                                                  {r.seed: r for r in done[cells_info[c]["baseline"]]}, window))}
        relative = {c: curve for c, curve in relative.items() if len(curve[0])}
        if relative:
            path = plotter.curves(
                f"relative_train_loss_w{window}", {c: mean for c, (mean, _) in relative.items()},
                f"training loss relative to the baseline (moving average {window})", "loss − baseline loss (nats)",
                zero_line="baseline", bands={c: band for c, (_, band) in relative.items()},
            )
            doc.image(path, f"Relative training loss, window {window}; mean over seeds, {SEED_BAND}.")


def _validation_section(doc, plotter, cells, cells_info, done, unigram) -> None:
    records = [r for c in cells for r in done[c]]
    domains = sorted({d for r in records for d in r.summary.get("final_val_loss_by_domain") or {}})
    if not any(r.final("val_loss") is not None for r in records):
        return
    doc.heading(2, "Validation loss by domain")
    doc.text(
        "Last evaluation, mean over seeds (Table 5 form). `avg` is the unweighted mean over domains as "
        "in the paper; `overall` is the run's own validation loss over all validation tokens."
    )
    per_seed = {}  # cell -> seeds x (domains, avg, overall)
    for cell in cells:
        if not done[cell]:
            continue
        seeds = pd.DataFrame({r.seed: {d: r.final(f"val_loss/{d}") for d in domains} for r in done[cell]}).T
        seeds = seeds.astype(float)
        if domains:
            seeds["avg"] = seeds[domains].mean(axis=1)
        seeds["overall"] = pd.Series({r.seed: r.final("val_loss") for r in done[cell]}, dtype=float)
        per_seed[cell] = seeds
    frame = pd.DataFrame({cell: seeds.mean() for cell, seeds in per_seed.items()}).T
    doc.table(["cell", *frame.columns], [[cell, *(_fmt(v) for v in frame.loc[cell])] for cell in frame.index])
    compared = [cell for cell in frame.index if cell != cells_info[cell]["baseline"]
                and cells_info[cell]["baseline"] in frame.index]
    bars_of = ""
    if plotter.ladder is not None:  # a rung's run ends with its decay: the largest budget's rungs lead the ladder
        largest = max(cells_info[cell]["coords"][LADDER_OVER] for cell in plotter.ladder.branches)
        compared = [cell for cell in compared if cells_info[cell]["coords"].get(LADDER_OVER) == largest]
        bars_of = f" Only the rungs at the largest budget ({LADDER_OVER}={largest:g}): the table has every cell."
    if compared:
        # the error bar: the spread of the per-seed differences over the seeds both cells finished
        spread = {cell: (per_seed[cell] - per_seed[cells_info[cell]["baseline"]]).dropna(how="all").std(ddof=1)
                  for cell in compared}
        path = plotter.grouped_bars(
            "val_loss_by_domain", pd.DataFrame({c: frame.loc[c] - frame.loc[cells_info[c]["baseline"]]
                                                for c in compared}).T,
            "validation loss relative to the baseline, by domain", "loss − baseline loss (nats)",
            errors=pd.DataFrame(spread).T)
        doc.image(path, "Final validation loss minus the baseline's, per domain (mean over seeds; error bars: ± one "
                        f"standard deviation of the per-seed differences).{bars_of}")
    spread = {c: _across_seeds({r.seed: r.val_curve() for r in done[c]}) for c in cells if done[c]}
    spread = {c: curve for c, curve in spread.items() if len(curve[0])}
    if spread:
        path = plotter.curves("val_loss", {c: mean for c, (mean, _) in spread.items()}, "validation loss", LOSS_UNIT,
                              reference=unigram, bands={c: band for c, (_, band) in spread.items()})
        doc.image(path, f"Validation loss over training, mean over seeds; {SEED_BAND}.")


def _tokens_per_step(records: list[RunResult]) -> float | None:
    """Training tokens a step, from the runs' summaries (tokens seen over steps taken); None when none says."""
    rates = {r.summary["tokens_seen"] / (r.summary["steps"] + 1) for r in records
             if r.summary.get("tokens_seen") and r.summary.get("steps") is not None}
    return rates.pop() if len(rates) == 1 else None


def _critical_section(doc, plotter, manifest, cells, cells_info, done) -> None:
    window = manifest.get("report", {}).get("critical_point_window", 10)
    searches: dict[str, CrossingSearch] = {}
    for cell in cells:
        base = cells_info[cell]["baseline"]
        if cell == base or not done[cell] or not done[base]:
            continue
        curves = relative_curves({r.seed: r for r in done[cell]}, {r.seed: r for r in done[base]}, window)
        if any(len(curve) for curve in curves.values()):
            searches[cell] = search_crossing({s: c for s, c in curves.items() if len(c)})
    if not searches:
        return
    doc.heading(2, "Critical points")
    doc.method(
        f"The critical point of a seed is the first step after which the cell's training loss (moving average "
        f"{window}) stays above its baseline's until the end: where the baseline overtakes it for good (paper "
        "Fig. 14). It is looked for in each seed's own curve; when every seed crossed, their geometric mean (of 1 + "
        "step, minus one) gets a 95% t interval over seeds on the log scale. The table also gives the gap at the "
        f"last step every seed logged (relative loss, one-sided t: is the cell still ahead?) and its trend, the "
        f"least-squares slope of the relative loss over the last {TREND_TAIL:.0%} of those steps in nats per "
        f"{TREND_UNIT:,} steps (one-sided t: is the lead shrinking?). Where the cell is ahead and its lead shown to "
        "shrink, `closes after` draws that trend on as a straight line past the last step: an extrapolation, not a "
        "measurement."
    )
    rows = []
    for cell, search in searches.items():
        tokens = _tokens_per_step(done[cell])
        mean_step, low, high = search.crossing
        if search.crossed == len(search.steps):
            crossing = f"{mean_step:,.0f}" + (f" [{low:,.0f}, {high:,.0f}]" if low is not None else "")
            if tokens:
                crossing += f" ({mean_step * tokens / 1e6:.2f}M tokens)"
        else:
            crossing = (f"none within {search.last_step:,} steps" + (f" ({search.last_step * tokens / 1e6:.1f}M tokens)"
                        if tokens else "") + f" in {len(search.steps) - search.crossed} of {len(search.steps)} seeds")
        closes = search.steps_to_close
        rows.append([
            cell, cells_info[cell]["baseline"],
            ", ".join("–" if step is None else f"{step:,}" for _, step in sorted(search.steps.items())),
            crossing,
            _fmt_test(search.last_gap, "+.4f"),
            f"{_fmt_test(search.trend, '+.4f')} from step {search.tail_start:,}",
            "–" if closes is None else f"~{closes:,.0f} more steps" + (f" (~{closes * tokens / 1e6:.0f}M tokens)"
                                                                       if tokens else ""),
        ])
    doc.table(["cell", "baseline", "critical step per seed", "critical step (geometric mean, 95% CI)",
               "gap at the last step", "trend of the gap", "closes after (extrapolated)"], rows)
    matrix_keys = manifest.get("matrix_keys") or []
    if len(matrix_keys) == 1:
        key = matrix_keys[0]
        lines: dict[str, dict[float, float]] = {}
        for cell, search in searches.items():
            value = cells_info[cell]["coords"].get(key)
            if search.crossed == len(search.steps) and isinstance(value, (int, float)):
                lines.setdefault(cells_info[cell]["family"] or "cells", {})[value] = search.crossing[0]
        if lines:
            path = plotter.lines_by_x(
                "critical_point", lines, f"critical point against {key}", key, "critical step", logy=True
            )
            doc.image(path, f"Critical step, geometric mean over seeds (baseline overtakes the cell), for each value of {key}, "
                            "where every seed crossed.")


def _fmt_test(test: SeedTest, spec: str) -> str:
    """A per-seed estimate with its one-sided interval's finite end and p, e.g. `-0.0400 (< -0.0210, p 0.003, n=3)`."""
    if test.low is None:
        return f"{float(test.estimate):{spec}} (n={test.n}, no CI)"
    bound = f"< {float(test.high):{spec}}" if test.alternative == "less" else f"> {float(test.low):{spec}}"
    return f"{float(test.estimate):{spec}} ({bound}, p {float(test.p):.3g}, n={test.n})"


def _unigram_reference(results: GridResults) -> tuple[str, float] | None:
    """The loss plots' reference line: the unigram loss of the validation tokens, mean over the finished runs."""
    mean = results.unigram_reference()
    return None if mean is None else (f"unigram loss ({mean:.3f})", mean)


def _claims_section(doc, verdicts, regime: dict, forest: Path | None) -> None:
    """The forest plot, and every comparison in full (the lead lists them in short) with the rule that decides a
    verdict folded."""
    if not verdicts:
        return
    doc.heading(2, "Claims")
    if forest is not None:
        doc.image(forest, "Forest plot: each comparison's Δ (a − b) with its 95% interval, colour and marker by "
                          "verdict, and the paper's effect where it gives a number.")
    if regime:
        doc.method(f"Regime: {regime_text(regime)}. A claim about the paper's 82M-468M models trained on 20B tokens "
                   "is judged here in this regime only.")
    doc.method(
        "The paper's claims for this figure (listed in the grid file; each is evidence for a paper claim of "
        "configs/claims.yaml, whose verdict `lit-resformer claims` derives), judged on the finished runs, paired by "
        "seed only when a seed's two runs share a data order that differs between seeds, else unpaired (Welch). One "
        "rule for the whole suite: **reproduced** when the two-sided 95% t interval excludes zero (or the claim's "
        "margin) on the claimed side and the two-sided p, Holm-adjusted with the grid's other claims, is below 0.05; "
        "**contradicted** by the same test at the same level on the other side; **inconclusive** otherwise (also with "
        f"fewer than 2 seeds, or a run not {PLATEAU_MARGIN:g} nat below its unigram loss); **not tested** when a "
        "precondition failed (a run above its bigram reference where the claim is measured, a baseline without the "
        "phenomenon a mechanism claim is about, no crossing for a claim about SVFormer after vanilla overtakes it). "
        "(fragile): Holm p in [0.025, 0.05). The scoreboard shows these same verdicts. `paper` gives the paper's own "
        "effect where it states one (for a claim beyond the paper, its source's)."
    )
    doc.table(*claims_table(verdicts, with_grid=False), footnote="note", box_class="verdicts")
    doc.text(f"{claim_counts(verdicts)} {ADJUSTMENT_NOTE}")


def _cost_section(doc, results: GridResults) -> None:
    cells, cells_info, done = results.cells, results.cell_info, results.done
    labels = machine_labels(results)
    doc.heading(2, "Cost")
    doc.method(
        "Parameters and KV-cache bytes per token (in the training dtype) come from the run's model "
        "(its checkpoint, else its config); "
        "tokens/s is the median logged training throughput, mean over the seeds that trained on one machine (runs "
        "that shared a machine are only roughly comparable). Throughput is compared with the baseline's on the "
        "machines both trained on, never across machines."
        + (f" {machines_note(labels)}" if labels else "")
    )

    def tokens_per_sec(run: RunResult) -> float | None:
        return run.summary.get("tokens_per_sec")

    rows = []
    for cell in cells:
        summaries = [r.summary for r in done[cell].values()]
        params = next((s["params"] for s in summaries if s.get("params") is not None), None)
        kv = next((s["kv_cache_bytes_per_token"] for s in summaries if s.get("kv_cache_bytes_per_token") is not None), None)
        base = cells_info[cell]["baseline"]
        base_kv = next((s["kv_cache_bytes_per_token"] for r in done[base].values()
                        if (s := r.summary).get("kv_cache_bytes_per_token")), None)
        speeds = by_machine(done[cell].values(), tokens_per_sec)
        runs_on = {name: sum(1 for r in done[cell].values() if machine(r) == name) for name in speeds}
        if base == cell or not speeds:
            versus = "–" if not speeds else "1.000"
        else:
            ratio = same_machine_ratio(speeds, by_machine(done[base].values(), tokens_per_sec))
            versus = "– (other machine)" if ratio is None else f"{ratio:.3f}"
        rows.append([
            cell,
            _fmt_int(params),
            _fmt_int(kv),
            "–" if kv is None or not base_kv else f"{kv / base_kv:.3f}",
            "–" if not speeds else ", ".join(f"{speed:,.0f}" + (f" [{labels[name]}]" if labels else "")
                                              for name, speed in speeds.items()),
            "–" if not speeds else ", ".join(f"{labels.get(name, name)} ({runs_on[name]})" for name in speeds),
            versus,
        ])
    doc.table(["cell", "parameters", "KV bytes / token", "KV vs baseline", "tokens/s", "machine (runs)",
               "tokens/s vs baseline, same machine"], rows)


def _zero_shot_section(doc, cells, done) -> None:
    """Table 1 form from the runs' eval/results.json (lm-eval's results dict), mean over each cell's seeds;
    task order, labels, averages and split notes follow lit_resformer.eval.report."""
    per_cell = {}
    for cell in cells:
        results = [json.loads(p.read_text()) for r in done[cell] if (p := r.run.eval_results).is_file()]
        if results:
            per_cell[cell] = _mean_results(results)
    if not per_cell:
        return
    from lit_resformer.eval.report import PAPER_TASK_LABELS, table_rows

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


def _analysis_section(doc, grid_dir, plotter, done) -> None:
    """Entropy by layer, first-token ratios and learnable mixing weights over the finished runs (lit_resformer.reports.attention),
    in the cells' colours; nothing when no run has analysis results or mixing weights."""
    from lit_resformer.reports.attention import analysis_section

    run_dirs = {cell: [r.run.path for r in records] for cell, records in done.items() if records}
    if not run_dirs:
        return
    text, _ = analysis_section(run_dirs, out_dir=grid_dir / "plots", link_base=grid_dir, styles=plotter.styles)
    if text:
        doc.raw(text)


def _runs_section(doc, runs) -> None:
    doc.heading(2, "Runs")
    rows = []
    for records in runs.values():
        for r in records:
            s = r.summary
            rows.append([
                r.name,
                r.status,
                "–" if s.get("steps") is None else str(s["steps"]),
                _fmt(r.final("train_loss")),
                _fmt(r.final("val_loss")),
                "–" if s.get("wall_time_sec") is None else f"{s['wall_time_sec'] / 60:.1f} min",
                "; ".join(filter(None, [_status_note(r), r.trained_as and f"shared: trained as {r.trained_as}"])),
            ])
    doc.table(["run", "status", "last step", "final train", "final val", "wall time", "note"], rows, footnote="note")
    own = [r.summary["wall_time_sec"] for records in runs.values() for r in records
           if not r.trained_as and r.summary.get("wall_time_sec") is not None]
    shared = sum(bool(r.trained_as) for records in runs.values() for r in records)
    if own:
        # what a grid cost, for budgets and closing notes: a shared run's time is counted in the grid that trained it
        doc.text(f"Compute: {len(own)} runs trained in this grid, {sum(own) / 3600:.2f} run-hours (the sum of their "
                 "wall times, every attempt; times the threads each run used for CPU-hours)"
                 + (f"; {shared} run{'s' * (shared != 1)} shared from other grids, counted there." if shared else "."))


# ----------------------------------------------------------------------------------------------
# the final gap against training length (paper Fig. 7, left panel)

# Matrix keys that set a training length (paper Fig. 7, left): key -> (axis label, plot name, section heading, what a
# point compares)
LENGTH_AXES = {
    "trainer.max_steps": ("training steps", "gap_by_training_length", "Gap against training length",
                          "at the same number of training steps (the whole schedule rescaled to that length)"),
    "data.seq_len": ("training sequence length (tokens)", "gap_by_sequence_length",
                     "Gap against training sequence length", "trained on sequences of the same length"),
}


def _training_length_section(doc, plotter, results: GridResults, final_train, final_val) -> None:
    """For cells x matrix grids over a training length (LENGTH_AXES): each cell family's final loss minus its
    baseline's at the same length (95% t interval in the seed design) against the length, one section per axis."""
    for key in LENGTH_AXES:
        # a ladder's budgets are read at the end of each rung's own decay (ladder_section), not a rescaled schedule
        if key in (results.manifest.get("matrix_keys") or []) and not results.manifest.get("ladder"):
            _length_axis_section(doc, plotter, results, final_train, final_val, key)


def _length_axis_section(doc, plotter, results: GridResults, final_train, final_val, key: str) -> None:
    label, plot_name, heading, compared = LENGTH_AXES[key]
    gaps: dict[str, dict[str, dict[int, SeedTest]]] = {"validation": {}, "training": {}}
    styles = {}  # a family is drawn in the style of its first cell
    for cell in results.cells:
        info, base = results.cell_info[cell], results.cell_info[cell]["baseline"]
        length, family = info["coords"].get(key), info["family"]
        if cell == base or length is None or family is None:
            continue
        styles.setdefault(family, plotter.styles.get(cell, {}))
        for metric, finals in (("validation", final_val), ("training", final_train)):
            if isinstance(diff := _versus_baseline(results, finals, cell, base), SeedTest):  # not across corpora
                gaps[metric].setdefault(family, {})[length] = diff
    if not any(gaps.values()):
        return
    doc.heading(2, heading)
    doc.text(
        f"Each cell's final loss minus its baseline's {compared}, with a 95% t interval in the seed design (paired "
        "only where a seed's two runs share a data order that differs between seeds, else Welch's). Below zero the "
        "cell is ahead at that length (paper Fig. 7, left, for ResFormer; Fig. 14 for SVFormer)."
    )
    points = sorted({(f, x) for by_family in gaps.values() for f, by_x in by_family.items() for x in by_x},
                    key=lambda p: (list(styles).index(p[0]), p[1]))
    doc.table(
        ["cell", label, "Δ val vs baseline", "Δ train vs baseline"],
        [[family, f"{length:,}", _fmt_difference(gaps["validation"].get(family, {}).get(length)),
          _fmt_difference(gaps["training"].get(family, {}).get(length))] for family, length in points],
    )
    fig, axes = plotter.plt.subplots(1, 2, figsize=(12.5, 4.2))
    for ax, (metric, by_family) in zip(axes, gaps.items(), strict=True):
        ax.axhline(0.0, color="black", lw=1, ls="--", label="baseline")
        for family, by_length in by_family.items():
            lengths = sorted(by_length)
            diffs = [by_length[x] for x in lengths]
            means = np.array([d.estimate for d in diffs])
            below = means - np.array([d.estimate if d.low is None else d.low for d in diffs])
            above = np.array([d.estimate if d.high is None else d.high for d in diffs]) - means
            ax.errorbar(lengths, means, yerr=[below, above], capsize=3, label=family, **styles[family])
        ax.set_xscale("log")
        ax.set_xticks(sorted({x for _, x in points}), [f"{x:,}" for x in sorted({x for _, x in points})])
        ax.minorticks_off()
        ax.set(xlabel=label, ylabel=f"final {metric} loss − baseline", title=f"final {metric} loss gap")
        ax.grid(alpha=0.3)
    outside_legend(axes[-1], fontsize=8)  # the panels share their families' styles
    path = plotter.save(fig, plot_name)
    doc.image(path, f"Final loss gap to the baseline against {label} (mean over seeds, 95% CI where n ≥ 2).")


def _provenance_section(doc, results: GridResults, generated: str) -> None:
    """Where the report comes from (`generated`), and what the runs and the runner ran on: each field with its values
    over the runs (how many runs had each)."""
    recorded = [r.provenance for records in results.runs.values() for r in records if r.provenance]
    doc.heading(2, "Provenance", collapsed=True)
    if not recorded and not results.provenance:
        doc.text("Not recorded: these runs were made before runs recorded their code version, library versions, "
                 "device and precision.")
        doc.text(generated)
        return
    total = sum(len(records) for records in results.runs.values())
    doc.text(f"What the runs ran on, from their summaries ({len(recorded)} of {total} runs recorded it), and what the "
             "runner that wrote the grid's manifest ran on.")

    def values(field: str) -> str:
        counts = pd.Series([str(p.get(field)) for p in recorded]).value_counts(sort=False)
        return "; ".join(f"{value} ({n})" if len(counts) > 1 else value for value, n in counts.items()) or "–"

    doc.table(["", "runs", "grid (runner)"],
              [[field, values(field), str(results.provenance.get(field, "–"))] for field in PROVENANCE_FIELDS])
    doc.text(generated)
