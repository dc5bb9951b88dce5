"""What a grid's report answers first: what the grid compares, its regime, the tally of verdicts and each comparison
in one line (verdict, Δ with its interval, the paper's effect). Written twice from the same
rows, as markdown (report.md) and as HTML with verdict chips (index.html)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from lit_resformer.measures.stats import VERDICTS
from lit_resformer.reports.page import chip, chip_text, markdown_body, tally_html
from lit_resformer.verdicts.rendering import table as claims_table
from lit_resformer.verdicts.verdict import Verdict, is_sub_row


def comparison_cells(verdicts: Sequence[Verdict]) -> list[dict[str, str]]:
    """Each comparison's cells as verdicts.rendering.table formats them, by column name ("Δ (a − b)", "95% CI", …)."""
    header, rows = claims_table(verdicts, with_grid=False)
    return [dict(zip(header, row, strict=True)) for row in rows]


def effect_text(row: dict[str, str]) -> str:
    """"Δ -0.1545 [-0.1851, -0.1240], p Holm 0.0012; paper: …" from a row of verdicts.rendering.table."""
    interval = "" if row["95% CI"] == "–" else f" {row['95% CI']}"
    text = f"Δ {row['Δ (a − b)']}{interval}, p Holm {row['p Holm']}"
    return text + ("" if row["paper"] == "–" else f"; paper: {row['paper']}")


def tally(verdicts: Sequence[Verdict]) -> dict[str, int]:
    claims = [v for v in verdicts if not is_sub_row(v)]
    return {name: sum(v.verdict == name for v in claims) for name in VERDICTS}


def grid_lead(sentence: str, regime: str, verdicts: Sequence[Verdict], warnings: Sequence[str],
              base: Path) -> tuple[str, str]:
    """(markdown, html) of the lead; `warnings` are markdown paragraphs a reader must see before the verdicts."""
    md = [sentence]
    page = [markdown_body(sentence, base)]
    if regime:
        md.append(f"Regime: {regime}.")
        page.append(f'<p class="regime"><b>Regime:</b> {html.escape(regime)}.</p>')
    md += warnings
    page += [markdown_body(w, base) for w in warnings]
    if verdicts:
        counts = tally(verdicts)
        words = f"{sum(counts.values())} claims"
        md.append(f"**Verdicts ({words}):** " + ", ".join(chip_text(v, count=n) for v, n in counts.items() if n) + ".")
        page.append(tally_html(counts, f"Verdicts ({words})"))
        items_md, items_html = [], []
        for v, row in zip(verdicts, comparison_cells(verdicts), strict=True):
            sub = "↳ " if is_sub_row(v) else ""
            items_md.append(f"- {sub}{chip_text(v.verdict, v.fragile)}: {v.claim.claim} — {effect_text(row)}")
            items_html.append(f"<li>{sub}{chip(v.verdict, v.fragile)} {html.escape(v.claim.claim)}<br>"
                              f'<span class="effect">{html.escape(effect_text(row))}</span></li>')
        md.append("\n".join(items_md))
        page.append(f'<ol class="claims">{"".join(items_html)}</ol>')
    return "\n\n".join(md), f'<div class="lead">{"".join(page)}</div>'
