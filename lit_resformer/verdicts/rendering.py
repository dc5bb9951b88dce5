"""Verdicts as a reader sees them: the verdict's words with what qualifies it (fragile, bounded, underpowered),
the comparisons table of a grid report and of the flat scoreboard, and the count of each verdict."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lit_resformer.measures.stats import VERDICTS
from lit_resformer.verdicts.judges import judging
from lit_resformer.verdicts.regime import regime_text
from lit_resformer.verdicts.verdict import Verdict, is_sub_row
from lit_resformer.writing import markdown_table


def _fmt_p(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def _fmt_mde(v: Verdict, fmt: Callable[[float | None], str]) -> str:
    """The minimum detectable effect at the family's adjusted level, unsigned, in the metric's unit."""
    mde = v.power.get("mde")
    return "–" if mde is None else fmt(mde).lstrip("+")


def verdict_text(v: Verdict) -> str:
    """The verdict as shown everywhere: bold, with "(fragile)" when its adjusted p is in [ALPHA/2, ALPHA), and an
    inconclusive one with what it rules out (lit_resformer.measures.power): bounded (an equivalence result within the
    effect of interest), underpowered (with the seeds that would reach that effect) or unresolved; where neither
    applies, why: the claim declares no effect of interest, or the comparison has no MDE."""
    text = f"**{v.verdict}**" + (" (fragile)" if v.fragile else "")
    if v.verdict != "inconclusive":
        return text
    kind = v.power.get("classification")
    if kind == "underpowered" and v.power.get("seeds_needed"):
        return f"{text} (underpowered: {v.power['seeds_needed']} seeds for ±{v.power['effect']:.3g})"
    if kind == "bounded":
        return f"{text} (bounded within ±{v.power['effect']:.3g})"
    return f"{text} ({kind or _unclassified_reason(v)})"


def _unclassified_reason(v: Verdict) -> str:
    """Why an inconclusive comparison is neither bounded, underpowered nor unresolved (power.classify's None): no
    MDE (no estimate, one seed, or an interval that is not a t interval, e.g. a data saving's log-ratio one), or no
    effect of interest to read it against (no loss difference in the claim's `paper:` text, no `margin`, no smallest
    effect declared in the row's metric: paper_claims)."""
    if v.power.get("mde") is None:
        if v.delta is None:
            return "no estimate"
        return "no MDE: fewer than 2 seeds" if v.n < 2 else "no MDE: not a t interval"
    return "no effect size declared"


# The columns of the comparisons table, in the order a reader needs them: the verdict, what is claimed, the effect
# with its interval and the adjusted p that decide the verdict, the smallest effect the seeds could detect and the
# paper's own effect; then what was compared, how, and the raw p.
COLUMNS = ("verdict", "claim", "Δ (a − b)", "95% CI", "p Holm", "MDE", "paper", "a vs b", "metric", "n", "design",
           "p (two-sided)", "note")
# The columns that hold a number or an interval: each stays on one line where the table is shown as HTML.
NUMBER_COLUMNS = ("Δ (a − b)", "95% CI", "p Holm", "MDE", "n", "p (two-sided)")
# What the interval and the p of a row adjust for, said under every comparisons table: they differ.
ADJUSTMENT_NOTE = ("95% CI: each comparison's own t interval, not adjusted for the grid's other comparisons. p Holm: "
                   "its two-sided p, Holm-adjusted over them. A comparison is decided only when both agree (the "
                   "interval clear of zero, or of the claim's margin, and p Holm below 0.05), so an interval that "
                   "excludes zero beside a p Holm of 0.05 or more is inconclusive.")


def table(verdicts: Sequence[Verdict], with_grid: bool = True) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the comparisons, in COLUMNS' order (the report's Claims section leaves out the grid column,
    the scoreboard has it after the claim): the paper's effect beside ours, the two-sided p of the test beside its
    Holm-adjusted p within the grid (the one rule that decides every verdict, in the report and on the scoreboard
    alike)."""
    rows = []
    for v in verdicts:
        fmt = judging(v.claim).format_value
        note = "; ".join(x for x in (v.note, f"grids differ: {v.disagree}" if v.disagree else "") if x)
        cells = {"verdict": verdict_text(v), "claim": f"↳ {v.claim.claim}" if is_sub_row(v) else v.claim.claim,
                 "Δ (a − b)": fmt(v.delta), "95% CI": "–" if v.low is None else f"[{fmt(v.low)}, {fmt(v.high)}]",
                 "p Holm": _fmt_p(v.p_holm), "MDE": _fmt_mde(v, fmt), "paper": v.claim.paper or "–",
                 "a vs b": f"{v.claim.a} vs {v.claim.b}", "metric": judging(v.claim).label(v.claim), "n": str(v.n),
                 "design": v.design or "–", "p (two-sided)": _fmt_p(v.p_two_sided), "note": note}
        if with_grid:
            cells["grid"] = ", ".join(v.grids or (v.grid,))
        rows.append(cells)
    header = [*COLUMNS[:2], "grid", *COLUMNS[2:]] if with_grid else list(COLUMNS)
    return header, [[cells[name] for name in header] for cells in rows]


def markdown(verdicts: Sequence[Verdict]) -> str:
    """The scoreboard as markdown: the paper's claims, then the claims beyond the paper in their own section, each
    table with a count of each verdict; which of a row's interval and p is adjusted; the regime of each grid; and
    where each grid's runs trained (grids merged from exports; runs from different machines may differ in corpus and
    numerics, so pair within a grid)."""
    paper = [v for v in verdicts if not v.claim.beyond_paper]
    beyond = [v for v in verdicts if v.claim.beyond_paper]
    text = markdown_table(*table(paper)) + "\n" + counts(paper) + "\n"
    if beyond:
        text += ("\nClaims beyond the paper (other published results and our own questions; each decided, like "
                 "every comparison, on its grid's Holm-adjusted p):\n\n" + markdown_table(*table(beyond)) + "\n" + counts(beyond) + "\n")
    text += f"\n{ADJUSTMENT_NOTE}\n"
    regimes = {v.grid: v.regime for v in verdicts if v.regime}
    if regimes:
        text += "\nRegime of each grid:\n" + "".join(f"- {grid}: {regime_text(r)}\n" for grid, r in regimes.items())
    places = {v.grid: v.trained_on for v in verdicts if v.trained_on}
    if places:
        text += "\nWhere the runs trained:\n" + "".join(f"- {grid}: {where}\n" for grid, where in places.items())
    return text


def counts(verdicts: Sequence[Verdict]) -> str:
    """How many claims have each verdict; per-domain sub-rows are part of their claim and not counted."""
    claims = [v for v in verdicts if not is_sub_row(v)]
    tally = ", ".join(f"{sum(v.verdict == name for v in claims)} {name}" for name in VERDICTS)
    return f"{tally} of {len(claims)} claims (per-domain sub-rows not counted)."
