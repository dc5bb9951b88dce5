"""The scaling sections of a report and `lit-resformer scaling`: a sweep's fits, savings and claims
(lit_resformer.measures.scaling) as tables and plots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lit_resformer.measures.scaling import (
    CONVENTION_WORDS,
    PAPER_SAVING,
    SAVING_WORDS,
    PowerLaw,
    ScalingError,
    SweepAnalysis,
    analyse_grid,
    count_text,
)
from lit_resformer.measures.stats import PLATEAU_MARGIN, mean_std
from lit_resformer.reports.document import Document, Plotter
from lit_resformer.runs.directory import grid_dirs
from lit_resformer.runs.summary import TRAIN_LOSS_WINDOW
from lit_resformer.writing import atomic_write, atomic_write_json, outside_legend


def _x_label(result: dict, convention: str) -> str:
    return f"{result['x']} ({CONVENTION_WORDS[convention].split(' (')[0]})"


def plot_sweep(result: dict, directory: Path) -> dict[str, Path]:
    """Per count of x: the points (each seed, and the mean per ladder point) with the fitted laws; the savings per
    ladder point inside the measured range, with their intervals, and the paper's value."""
    variants = list(result["points"])
    plotter = Plotter(directory, variants)
    plt, grid, symbol = plotter.plt, result["grid"], result["x"]
    paths = {}
    for convention in result["conventions"]:
        fig, ax = plt.subplots(figsize=(9.5, 4.8))
        for v, fit in result["fits"][convention].items():
            points = result["points"][v]
            xs = np.array([p["x"][convention] for p in points])
            color, marker = plotter.styles[v]["color"], plotter.styles[v]["marker"]
            for x, p in zip(xs, points, strict=True):
                ax.scatter([x] * len(p["losses"]), list(p["losses"].values()), color=color, marker=marker, alpha=0.35,
                           s=14)
            ax.scatter(xs, [np.mean(list(p["losses"].values())) for p in points], color=color, marker=marker, s=36,
                       label=f"{v} (mean)")
            grid_x = np.geomspace(xs.min(), xs.max(), 200)  # the law is drawn only where it was measured
            ax.plot(grid_x, PowerLaw(fit["E"], fit["A"], fit["alpha"], 1.0)(grid_x), color=color, lw=1.4,
                    label=f"{v}: {fit['E']:.3f} + {fit['A']:.3g}·{symbol}^-{fit['alpha']:.3f}")
        ax.set_xscale("log")
        ax.set_xlabel(_x_label(result, convention))
        ax.set_ylabel(f"final {result['metric']} loss")
        ax.set_title(f"{grid}: L({symbol}) = E + A·{symbol}^-α per variant")
        ax.grid(alpha=0.3, which="both")
        outside_legend(ax, fontsize=8)
        paths[f"fit_{convention}"] = plotter.save(fig, f"scaling_{grid}_fit_{convention}")
        if not result["savings"][convention]:
            continue
        fig, ax = plt.subplots(figsize=(9, 4.2))
        ax.axhline(0.0, color="black", lw=0.8)
        ax.axhline(100 * PAPER_SAVING[result["axis"]], color="grey", ls="--", lw=1, label="paper (review version)")
        for v, saving in result["savings"][convention].items():
            rows = [r for r in saving["per_point"] if r["saving"] is not None]
            if not rows:
                continue
            xs = np.array([r["x"] for r in rows])
            ys = np.array([100 * r["saving"] for r in rows])
            low = [y - 100 * r["ci_low"] if r["ci_low"] is not None else 0.0 for y, r in zip(ys, rows, strict=True)]
            high = [100 * r["ci_high"] - y if r["ci_high"] is not None else 0.0 for y, r in zip(ys, rows, strict=True)]
            ax.errorbar(xs, ys, yerr=[low, high], capsize=3, label=v, **plotter.styles[v])
        ax.set_xscale("log")
        ax.set_xlabel(f"{_x_label(result, convention)} of {result['baseline']}")
        ax.set_ylabel("saving (%)")
        ax.set_title(f"{grid}: {SAVING_WORDS[result['axis']]} against {result['baseline']}")
        ax.grid(alpha=0.3, which="both")
        outside_legend(ax, fontsize=8)
        paths[f"saving_{convention}"] = plotter.save(fig, f"scaling_{grid}_saving_{convention}")
    return paths


def _percent(value: float) -> str:
    return f"{100 * value:+.1f}%"


def _saving_text(entry: dict) -> str:
    """A saving (a row of _savings or its mean) in percent with its interval, or why there is none."""
    if entry.get("outside"):
        return entry["outside"]
    if entry["saving"] is None:
        return "–"
    interval = f" [{_percent(entry['ci_low'])}, {_percent(entry['ci_high'])}]" if entry["ci_low"] is not None else ""
    return _percent(entry["saving"]) + interval


def claim_line(claim: dict) -> str:
    """One claim dict as a line of text, e.g. for the command line."""
    return (f"{claim['grid']}: {claim['claim']}: {claim['verdict']} (saving {_saving_text(claim | {'saving': claim['delta']})}"
            f", n={claim['n']}; paper {claim['paper']:.1%})" + (f"; {claim['note']}" if claim["note"] else ""))


def _curve_text(entry: dict) -> str:
    if entry["n"] == 0:
        return "–"
    if entry["not_reached"]:
        return f"not reached in {entry['not_reached']} of {entry['n']} seeds"
    return _saving_text({"saving": entry["mean"], "ci_low": entry["ci_low"], "ci_high": entry["ci_high"]}) + f" (n={entry['n']})"


def _epochs_text(epochs: float | None) -> str:
    return "≤ 1" if epochs is None else f"{epochs:.2f}"


def _matching_text(designs: dict[str, str], baseline: str) -> str:
    """How matching the ladders by seed number reads under each variant's seed design."""
    paired = [v for v, design in designs.items() if design == "paired"]
    text = "Seeds are matched by number"
    if paired:
        text += f", a pairing for {', '.join(paired)} (a seed's runs share that seed's data order with {baseline}'s)"
    if len(paired) < len(designs):
        text += (("; for the others" if paired else "; it") + " pairs nothing (no data order both share and the "
                 "other seeds do not), an arbitrary match under which the interval holds all the same, since each "
                 "seed's saving rests on runs of its own")
    return text + "."


def render(result: dict, doc: Any, images: dict[str, Path], level: int = 2) -> None:
    """One sweep's section into a report Document (headings at `level` and below)."""
    axis, symbol, baseline, paper = result["axis"], result["x"], result["baseline"], result["paper_convention"]
    what = "model size" if axis == "params" else "token budget"
    doc.heading(level, f"Scaling: {result['grid']} (L({symbol}) over {what})")
    metric = ("final validation loss (last evaluation)" if result["metric"] == "val"
              else f"final training loss (moving average over the last {TRAIN_LOSS_WINDOW} logged steps)")
    doc.text(
        f"Per variant, L({symbol}) = E + A·{symbol}^−α is fitted by least squares to the {metric}: to the mean over "
        f"seeds at each ladder point (the law tabulated and drawn), and to each seed's own ladder. The saving at "
        f"{baseline}'s ladder point {symbol} is 1 − {symbol}′/{symbol}, where {symbol}′ is where the variant's law "
        f"reaches {baseline}'s loss at {symbol}; positive: the variant needs that much less "
        f"{'model' if axis == 'params' else 'data'} for the same loss. Each seed's fits give one saving; the table "
        f"shows their mean with a {result['level']:.0%} t interval over the seeds (n − 1 degrees of freedom). A "
        f"saving whose {symbol}′ falls outside the variant's measured ladder would extrapolate the law and is refused. "
        + _matching_text(result["design"], baseline)
        + f" The paper (review version) reports {PAPER_SAVING[axis]:.1%} "
        + ("fewer parameters (later versions 13.3% and 16.11%), counting all parameters." if axis == "params"
           else "less data (later versions 15.4% and 20.3%), read inside one run; here each budget is a separate "
                "run with its own full schedule.")
    )
    for note in result["notes"]:
        doc.text(f"*{note}*")
    conventions = result["conventions"]
    rows = []
    for v, points in result["points"].items():
        for p in points:
            mean, std = mean_std(list(p["losses"].values()))
            rows.append([v, p["label"], *(f"{p['x'][c]:,.0f}" for c in conventions), _epochs_text(p["epochs"]),
                         f"{mean:.4f}" + (f" ± {std:.4f}" if std is not None else ""), str(len(p["losses"]))])
    doc.table(["variant", "ladder point", *(_x_label(result, c) for c in conventions), "epochs",
               "loss (mean ± std over seeds)", "seeds"], rows)
    for convention in conventions:
        doc.heading(level + 1, f"Over {CONVENTION_WORDS[convention]}"
                    + (" (the paper's convention)" if convention == paper and axis == "params" else ""))
        rows = []
        for v, fit in result["fits"][convention].items():
            alphas = [s["alpha"] for s in fit["per_seed"].values()]
            rows.append([v + (" (baseline)" if v == baseline else ""), str(len(result["points"][v])),
                         str(fit["residual_dof"]), f"{fit['E']:.3f}", f"{fit['A']:.4g}", f"{fit['alpha']:.3f}",
                         f"{min(alphas):.3f}–{max(alphas):.3f}" if alphas else "–", f"{fit['rms_residual']:.4f}",
                         ", ".join(fit["at_bound"]) or "–"])
        doc.table(["variant", "points", "residual dof", "E", "A", "α", "α of the seeds' fits", "rms residual",
                   "on a bound"], rows)
        doc.image(images[f"fit_{convention}"], f"Final loss against {symbol} with the fitted laws.")
        savings = result["savings"][convention]
        if not savings:
            continue
        first = next(iter(savings.values()))
        header = ["variant", *(f"{r['label']} ({symbol}={count_text(r['x'])})" for r in first["per_point"]),
                  "mean over the ladder"]
        rows = []
        for v, s in savings.items():
            points = len(s["per_point"])
            inside = f" ({len(s['mean']['points'])} of {points} points)" if len(s["mean"]["points"]) < points else ""
            rows.append([v, *(_saving_text(r) for r in s["per_point"]), _saving_text(s["mean"]) + inside])
        doc.table(header, rows)
        reasons = sorted({s["mean"]["no_interval"] for s in savings.values() if s["mean"]["no_interval"]})
        for reason in reasons:
            doc.text(f"*{reason[0].upper() + reason[1:]}.*")
        doc.image(images[f"saving_{convention}"], f"{SAVING_WORDS[axis].capitalize()} per ladder point.")
    doc.heading(level + 1, "Data saving read from the curves (the paper's reading, within one run)")
    doc.text(
        f"Not a separate budget: inside one run, 1 − s/S where s is the first step at which the variant's loss "
        f"reaches {baseline}'s final loss (same ladder point and seed) and S is the run's last step. At step s the "
        f"variant's learning rate has not decayed yet, so this is not what a run trained on s steps would reach. "
        f"Training loss smoothed over {TRAIN_LOSS_WINDOW} logged steps; validation loss at its evaluations only. "
        f"Mean over seeds with a {result['level']:.0%} t interval."
    )
    rows = [[v, c["label"], _curve_text(c["train"]), _curve_text(c["val"])]
            for v, curves in result["curve_savings"].items() for c in curves]
    doc.table(["variant", "ladder point", "training loss", "validation loss"], rows)
    if result["claims"]:
        doc.heading(level + 1, "Claim")
        doc.table(["claim", "verdict", "saving [CI]", "paper", "p (two-sided)", "p Holm", "n", "note"],
                  [[c["claim"], f"**{c['verdict']}**" + (" (fragile)" if c.get("fragile") else ""),
                    _saving_text(c | {"saving": c["delta"]}), f"{c['paper']:.1%}",
                    "–" if c.get("p_two_sided") is None else f"{c['p_two_sided']:.3g}",
                    "–" if c.get("p_holm") is None else f"{c['p_holm']:.3g}", str(c["n"]), c["note"]]
                   for c in result["claims"]])
        doc.text("In a grid report the verdict is the grid's (Holm-adjusted with its other claims, as in its Claims "
                 "section). Reproduced when the interval of the mean saving excludes zero on the saving side, contradicted "
                 "when it excludes zero on the other side, else inconclusive (also with fewer than 2 seeds, or "
                 f"when a run is not {PLATEAU_MARGIN:g} nat below its validation split's unigram loss); not tested "
                 "when a run ends above its bigram reference, or the saving can have no interval.")


def scaling_section(analysis: SweepAnalysis, plots_dir: Path, link_base: Path) -> str:
    """The report's scaling section for a grid marked `report: {scaling: ...}` from its analysis (`sweep_analysis`),
    markdown with plots into plots_dir, linked relative to link_base; a sweep that cannot be fitted yet says why
    instead."""
    doc = Document(link_base)
    if analysis.problem is not None:
        doc.heading(2, "Scaling")
        doc.text(f"No fit: {analysis.problem}")
    else:
        render(analysis.fit, doc, plot_sweep(analysis.fit, plots_dir))
    return doc.markdown()


def sweep_grids(runs_dirs: Sequence[str | Path]) -> list[Path]:
    """Grid directories to analyse: each argument is a grid directory, or a directory of grids whose
    manifests mark them as sweeps (`report: {scaling: ...}`)."""
    for runs_dir in map(Path, runs_dirs):
        if not runs_dir.is_dir():
            raise ScalingError(f"{runs_dir} is not a directory")
    try:
        return [g.path for g in grid_dirs(runs_dirs, "sweep grid (report.scaling: params or tokens in its manifest)",
                                          lambda manifest: (manifest.get("report") or {}).get("scaling"))]
    except FileNotFoundError as err:
        raise ScalingError(str(err)) from None


def write_scaling(runs_dirs: Sequence[str | Path], out_dir: str | Path | None = None, metric: str = "val",
                  variants: Sequence[str] | None = None, level: float = 0.95) -> Path:
    """`lit-resformer scaling`: scaling.md, scaling.json and PNG plots for every sweep grid given.
    Default out_dir: <grid>/scaling for one grid, else scaling/ beside the grids."""
    grids = sweep_grids(runs_dirs)
    results = [analyse_grid(g, metric=metric, variants=variants, level=level) for g in grids]
    if out_dir is None:
        out_dir = grids[0] / "scaling" if len(grids) == 1 else Path(*_common_parts(grids)) / "scaling"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = Document(out_dir)
    doc.heading(1, "Scaling laws and equivalence savings")
    for result in results:
        render(result, doc, plot_sweep(result, out_dir))
    atomic_write(out_dir / "scaling.md", doc.markdown())
    atomic_write_json(out_dir / "scaling.json", {"sweeps": results, "claims": [c for r in results for c in r["claims"]]})
    return out_dir / "scaling.md"


def _common_parts(paths: list[Path]) -> tuple[str, ...]:
    parts = [p.resolve().parts for p in paths]
    common = []
    for items in zip(*parts, strict=False):
        if len(set(items)) > 1:
            break
        common.append(items[0])
    return tuple(common)
