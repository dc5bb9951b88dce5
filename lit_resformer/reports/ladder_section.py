"""The report's ladder section for a grid that claims a data saving across budgets (`data_saving_slope`,
lit_resformer.grids.spec.Ladder): at the end of each rung's decay, a's gap to b and a's data saving 1 - B / B', each with
its 95% t interval over seeds (paired: a seed's two runs share its data order), and a trend fitted per seed against
log2 budget, drawn with its pointwise 95% interval, its slope per doubling of the budget stated with its interval
(lit_resformer.measures.budget_ladder)."""

from __future__ import annotations

from lit_resformer.measures.budget_ladder import at_each_budget, data_savings, gaps, rungs, slopes, trend
from lit_resformer.measures.stats import SeedTest, per_seed_t
from lit_resformer.reports.document import Document, Plotter
from lit_resformer.runs.claim_spec import DATA_SAVING_SLOPE
from lit_resformer.runs.results import GridResults
from lit_resformer.writing import outside_legend, series_styles


def ladder_section(results: GridResults, plotter: Plotter, doc: Document) -> None:
    """The section, once for each pair of arms a `data_saving_slope` claim compares; nothing without one."""
    from matplotlib.ticker import PercentFormatter

    pairs = dict.fromkeys((c.a, c.b, c.over) for c in results.claims if c.metric == DATA_SAVING_SLOPE)
    for a, b, over in pairs:
        rung = rungs(results, a, b, over)
        per_seed = {"gap": gaps(rung), "saving": data_savings(rung).per_seed}
        if not any(per_seed.values()):
            continue
        budgets = rung.budgets
        doc.heading(2, f"{a} against {b} at the end of each decay")
        doc.text(
            f"At each budget ({over}), the end of that rung's own decay: {a}'s final validation loss minus {b}'s, and "
            f"{a}'s data saving 1 − B / B', where {b} reaches {a}'s loss at budget B' ({b}'s end-of-decay losses, "
            "linear in log2 budget between rungs and extended along the end segments beyond them). Each is the mean "
            "over seeds with its 95% t interval; the line is the mean of the seeds' least-squares lines against log2 "
            "budget with its pointwise 95% interval. A constant saving is a constant multiplier on the data."
        )
        lines = {name: trend(values, budgets) for name, values in per_seed.items()}
        points = {name: at_each_budget(values) for name, values in per_seed.items()}
        tokens = {x: _mean_tokens(rung, x) for x in budgets}
        fig, axes = plotter.plt.subplots(1, 2, figsize=(13, 4.2))
        measured, fitted_style = series_styles(["measured", "fitted"]).values()
        for ax, name in zip(axes, ("gap", "saving"), strict=True):
            ax.axhline(0.0, color="black", lw=1, ls="--")
            xs = [x for x in budgets if x in points[name]]
            ax.errorbar(xs, [points[name][x].estimate for x in xs], yerr=_error_bars([points[name][x] for x in xs]),
                        marker=measured["marker"], capsize=3, ls="", color=measured["color"],
                        label="mean over seeds, 95% CI")
            fitted = [lines[name][x] for x in budgets]
            ax.plot(budgets, [t.estimate for t in fitted], color=fitted_style["color"], label="fitted trend")
            if all(t.low is not None for t in fitted):
                ax.fill_between(budgets, [t.low for t in fitted], [t.high for t in fitted], color=fitted_style["color"],
                                alpha=0.2, lw=0)
            ax.set_xscale("log", base=2)
            ax.set_xticks(budgets, [f"{x:g}" if tokens[x] is None else f"{x:g}\n{tokens[x] / 1e6:.1f}M tok."
                                    for x in budgets])
            ax.minorticks_off()
            ax.set(xlabel=f"budget ({over} and tokens, log2 scale)",
                   ylabel=f"final val loss {a} − {b}" if name == "gap" else f"data saving of {a} (1 − B / B')",
                   title=name)
            if name == "saving":
                ax.yaxis.set_major_formatter(PercentFormatter(1.0))  # as the table says it
            ax.grid(alpha=0.3)
        outside_legend(axes[-1], fontsize=8)  # the panels share their series
        doc.image(plotter.save(fig, f"ladder_{a}_vs_{b}"),
                  f"{a} against {b} at the end of each decay: the gap and the data saving against the budget.")
        doc.table([over, "tokens", f"{a} − {b} [95% CI]", "data saving [95% CI]", "n"],
                  [[f"{x:g}", "–" if tokens[x] is None else f"{tokens[x] / 1e6:.2f}M",
                    _shown(points["gap"].get(x), "{:+.4f}"), _shown(points["saving"].get(x), "{:+.1%}"),
                    str(points["gap"][x].n if x in points["gap"] else 0)] for x in budgets])
        for name, form, unit in (("gap", "{:+.4f}", " nats"), ("saving", "{:+.1%}", " (percentage points)")):
            slope = per_seed_t(list(slopes(per_seed[name]).values()))
            doc.text(f"Trend of the {name} per doubling of the budget: {_shown(slope, form)}{unit}, 95% CI over "
                     f"{slope.n} seeds.")


def _error_bars(tests: list[SeedTest]) -> list[list[float]]:
    return [[t.estimate - (t.estimate if t.low is None else t.low) for t in tests],
            [(t.estimate if t.high is None else t.high) - t.estimate for t in tests]]


def _shown(test: SeedTest | None, form: str) -> str:
    if test is None:
        return "–"
    interval = "" if test.low is None else f" [{form.format(test.low)}, {form.format(test.high)}]"
    return form.format(test.estimate) + interval


def _mean_tokens(rung, budget: float) -> float | None:
    seen = [run.summary.get("tokens_seen") for side in rung.runs[budget] for run in side.values()]
    seen = [t for t in seen if t]
    return sum(seen) / len(seen) if seen else None
