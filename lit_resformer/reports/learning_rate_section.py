"""The report's learning-rate section for a grid with a `select:` block (lit_resformer.grids.selection): each arm's
final validation loss against the swept peak learning rate over the pilot seeds, with the seed band (min to max)
and the chosen point marked (a panel at each budget where the block chooses at each), the confirmation seeds' losses at the chosen points, and the at_best axis (e.g. the
warm-up) at the point it was trained at."""

from __future__ import annotations

import numpy as np

from lit_resformer.measures.stats import per_seed_t
from lit_resformer.reports.document import Document, Plotter
from lit_resformer.runs.claim_spec import SELECTED_METRICS
from lit_resformer.runs.results import GridResults
from lit_resformer.verdicts.tuning import chosen_points, pilot_cells
from lit_resformer.writing import outside_legend


def learning_rate_section(results: GridResults, plotter: Plotter, doc: Document) -> None:
    """The section, or nothing for a grid that claims nothing at a select block's chosen points. A block that chooses
    at each value of a key (its `per`, a ladder's budgets) gets a panel and rows for each value."""
    if not any(c.metric in SELECTED_METRICS for c in results.claims):
        return
    selection = chosen_points(results)[0]
    if selection is None:
        return
    over, per = selection.over, selection.per
    finals = results.finals("val_loss")
    per_values = list(selection.per_values) if per else [None]
    doc.heading(2, f"Final loss against {over}" + (f" at each {per}" if per else ""))
    doc.text(
        f"Each arm's final validation loss at every {over}" + (f", at each {per} apart," if per else "")
        + f" on the pilot seeds {list(selection.pilot_seeds)}: the mean, and the band from the lowest to the highest "
        f"seed. An arm's chosen point (★) is {selection.to_dict()['rule']}"
        + (f", at each {per} on its own" if per else "") + f"; the confirmation seeds {list(selection.seeds)} then "
        "train at the points the select block names, and the claims compare arms on those seeds only."
    )
    # each panel its own y range: the loss falls by a whole nat across the budgets, the rates differ by hundredths
    fig, axes = plotter.plt.subplots(1, len(per_values), figsize=(9.5 if not per else 3.2 * len(per_values), 4.6),
                                     squeeze=False)
    rows, chosen, unchosen = [], {}, {}
    styles = _arm_styles(results, selection, per_values[0], plotter)
    for ax, per_value in zip(axes[0], per_values, strict=True):
        best, missing = chosen_points(results, per_value)[1:]
        rows += _panel(ax, results, selection, finals, per_value, best, styles)
        chosen.update({(arm, per_value): value for arm, value in best.items()})
        unchosen.update({(arm, per_value): why for arm, why in missing.items()})
    axes[0][0].set_ylabel("final validation loss")
    outside_legend(axes[0][-1], fontsize=8)
    doc.image(plotter.save(fig, "loss_by_learning_rate"),
              f"Final validation loss against {over}" + (f" at each {per}" if per else "") + ", mean over the pilot "
              "seeds with their min-max band; ★ the chosen point.")
    doc.table([*([per] if per else []), "arm", over, "pilot mean [min, max]", "pilot seeds",
               "confirmation seeds: mean [95% CI] (n)"], rows)
    for (arm, per_value), why in unchosen.items():
        doc.text(f"{arm}{f' at {per}={per_value:g}' if per else ''}: no point chosen: {why}.")
    if chosen:
        # the runner's bracket check (lit_resformer.grids.selection.best_point): a chosen point is never an end
        doc.text(f"Bracket check: {', '.join(f'{arm} {value:g}' + (f' at {per_value:g}' if per else '') for (arm, per_value), value in chosen.items())}: each chosen "
                 f"{over} lies inside the swept range [{selection.values[0]:g}, {selection.values[-1]:g}], not at an "
                 "end, where the optimum could lie outside it.")
    if selection.at_best is not None:
        _at_best_table(results, doc, finals, selection)


def _arm_styles(results: GridResults, selection, per_value, plotter: Plotter) -> dict[str, dict]:
    """Each arm in the style of its cell at the first swept point of the first panel, in every panel: the cells of
    another budget are other cells, in other styles, and the legend (drawn from one panel) must hold for all."""
    styles = {}
    for arm in selection.arms:
        cells = pilot_cells(results, selection, arm, per_value)
        styles[arm] = plotter.styles.get(cells[min(cells)], {}) if cells else {}
    return styles


def _panel(ax, results: GridResults, selection, finals, per_value, best: dict, styles: dict) -> list[list[str]]:
    """One panel of the plot (the arms' pilot losses against the swept key, at `per_value`) and its table rows."""
    rows = []
    for arm in selection.arms:
        cells = pilot_cells(results, selection, arm, per_value)
        values = sorted(cells)
        pilot = [[finals.get(cells[v], {}).get(s) for s in selection.pilot_seeds] for v in values]
        shown = [(v, [x for x in losses if x is not None]) for v, losses in zip(values, pilot, strict=True)]
        shown = [(v, losses) for v, losses in shown if losses]
        if not shown:
            continue
        style = styles[arm]
        color = style.get("color")
        xs = [v for v, _ in shown]
        ax.plot(xs, [np.mean(losses) for _, losses in shown], label=arm, **style)
        ax.fill_between(xs, [min(losses) for _, losses in shown], [max(losses) for _, losses in shown], color=color,
                        alpha=0.15, lw=0)
        if arm in best:
            ax.plot([best[arm]], [np.mean(dict(shown)[best[arm]])], marker="*", markersize=16, color=color, ls="")
        for v, losses in shown:
            confirmed = [loss for seed, loss in finals.get(cells[v], {}).items() if seed in selection.seeds]
            rows.append([*([f"{per_value:g}"] if selection.per else []), arm,
                         f"{v:g}" + (" ★" if best.get(arm) == v else ""),
                         f"{np.mean(losses):.4f} [{min(losses):.4f}, {max(losses):.4f}]", str(len(losses)),
                         _mean_interval(confirmed)])
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(selection.values), [f"{v:g}" for v in selection.values], rotation=45 if selection.per else 0)
    ax.minorticks_off()
    ax.set(xlabel=f"{selection.over} (log2 scale)",
           title=f"{selection.per}={per_value:g}" if selection.per else f"{results.name}: loss against {selection.over}")
    ax.grid(alpha=0.3)
    return rows


def _mean_interval(values: list[float], form: str = "{:.4f}") -> str:
    if not values:
        return "–"
    test = per_seed_t(values)
    interval = "" if test.low is None else f" [{form.format(test.low)}, {form.format(test.high)}]"
    return f"{form.format(test.estimate)}{interval} ({len(values)})"


def _at_best_table(results: GridResults, doc: Document, finals, selection) -> None:
    """The at_best cells: each family's final loss at each point of its axis, and its gap to the baseline's."""
    at_best = selection.at_best
    cells = {name: info for name, info in results.cell_info.items() if info.get("at")}
    if not cells:
        doc.text(f"The {', '.join(at_best.matrix)} axis trains once {at_best.of}'s best {selection.over} is chosen.")
        return
    point = next(iter(cells.values()))["at"][selection.over]
    doc.text(f"At {at_best.of}'s chosen {selection.over} = {point:g}, the {', '.join(at_best.matrix)} axis: each cell's "
             "final validation loss (mean [95% CI] over its seeds) and its difference to the baseline at the same "
             "point, seed by seed.")
    rows = []
    for name, info in cells.items():
        losses = finals.get(name, {})
        base = finals.get(info["baseline"], {})
        gaps = [losses[s] - base[s] for s in losses if s in base] if info["baseline"] != name else []
        rows.append([name, _mean_interval(list(losses.values())), _mean_interval(gaps, "{:+.4f}") if gaps else "–"])
    doc.table(["cell", "final val loss", "− baseline"], rows)
