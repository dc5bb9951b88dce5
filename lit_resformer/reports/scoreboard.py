"""The scoreboard as a reader meets it: in a terminal (`lit-resformer claims`) and as one HTML page (`claims --html`).

The terminal gets the tally first, then each tested claim, decisive verdicts first: its verdict, id, Δ with its
interval, Holm p and grid, and beneath its words in full; the claims not tested are counted by reason. A claim with
several comparisons shows the one that decides it best (its verdict, the smallest Holm p) and how many there are;
`--markdown` keeps every comparison. The page adds a forest plot per grid and links to each grid's report.
"""

from __future__ import annotations

import html
import io
import os
import re
import tempfile
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from lit_resformer.reports.forest import cached_forest_plot, short_claim
from lit_resformer.reports.lead import comparison_cells, effect_text
from lit_resformer.reports.page import (
    VERDICT_STYLE,
    Section,
    chip,
    chip_text,
    markdown_body,
    page,
    tally_html,
)
from lit_resformer.verdicts.claims import Verdict
from lit_resformer.verdicts.paper_claims import (
    CLAIM_VERDICTS,
    PaperClaim,
    claim_counts,
    counts_line,
    headline_regime,
)
from lit_resformer.writing import aligned_lines

DECISIVE_FIRST = {name: rank for rank, name in enumerate(("reproduced", "contradicted", "mixed", "inconclusive"))}
RUN_NAME = re.compile(r"\S*seed\d")  # where a reason starts listing the runs it applies to


def deciding(claim: PaperClaim) -> Verdict | None:
    """The counted comparison shown for a claim: one with the claim's own verdict where there is one (for a mixed
    claim, any), the smallest Holm p first."""
    counted = [e.row for e in claim.evidence if e.counted]
    same = [v for v in counted if v.verdict == claim.verdict] or counted
    return min(same, key=lambda v: (v.p_holm is None, v.p_holm or 0.0), default=None)


def not_tested_reason(claim: PaperClaim) -> str:
    """Why a claim is not tested, in a few words that other claims share: its counted comparisons' commonest reason
    (their notes), else what the registry says would test it; without the runs and details it names."""
    notes = [e.row.note.removeprefix("not tested: ") for e in claim.evidence if e.counted and e.row.note]
    text = Counter(notes).most_common(1)[0][0] if notes else claim.reason
    text = re.split(r"[(:;]", text, maxsplit=1)[0]
    text = text[:match.start()] if (match := RUN_NAME.search(text)) else text
    text = re.sub(r"\s+(for|of|in|at|by)$", "", text.strip(" ,"))
    return textwrap.shorten(text, 70, placeholder="…")


def ordered(claims: Sequence[PaperClaim]) -> tuple[list[PaperClaim], list[PaperClaim]]:
    """(tested claims, decisive verdicts first and the registry's order within a verdict; claims not tested)."""
    tested = sorted((c for c in claims if c.verdict != "not tested"), key=lambda c: DECISIVE_FIRST[c.verdict])
    return tested, [c for c in claims if c.verdict == "not tested"]


def _grid(shown: Verdict) -> str:
    """The grid of the comparison shown, "+n" for the other grids it was seen in."""
    grids = shown.grids or (shown.grid,)
    return grids[0] + (f" +{len(grids) - 1}" if len(grids) > 1 else "")


def _of(claim: PaperClaim) -> str:
    """"1/k" where the claim counts k > 1 comparisons (one is shown)."""
    counted = sum(e.counted for e in claim.evidence)
    return f"1/{counted}" if counted > 1 else ""


def _claims_table(title: str, claims: Sequence[PaperClaim], width: int) -> Group:
    """Each tested claim in two lines: its verdict, id, deciding comparison's Δ with its interval, Holm p, "of" and
    grid, in aligned columns (the grid, then "of", give way to a narrow terminal); then its words in full, wrapped,
    never cut, so that claims whose words begin alike still read apart."""
    rows = [("verdict", "claim", "Δ [95% interval]", "p Holm", "of", "grid")]
    for claim in claims:
        cells = comparison_cells([v])[0] if (v := deciding(claim)) else {}
        interval = "" if cells.get("95% CI", "–") == "–" else f" {cells['95% CI']}"
        rows.append((chip_text(claim.verdict) + ("*" if v is not None and v.fragile else ""), claim.id,
                     f"{cells.get('Δ (a − b)', '–')}{interval}", cells.get("p Holm", "–"), _of(claim),
                     _grid(v) if v else "–"))
    for shown in (6, 5, 4):
        header, *lines = aligned_lines([row[:shown] for row in rows], right={3, 4})
        if max(map(len, [header, *lines])) <= width:
            break
    chip = max(len(row[0]) for row in rows)
    parts = [Text(title, style="bold"), Text(header, style="bold"), Text("─" * min(len(header), width))]
    for claim, line in zip(claims, lines, strict=True):
        parts += [Text.assemble((line[:chip], VERDICT_STYLE[claim.verdict][1]), line[chip:]),
                  Padding(Text(short_claim(claim.statement, len(claim.statement))), (0, 0, 0, chip + 2))]
    return Group(*parts)


def _not_tested_table(claims: Sequence[PaperClaim]) -> Table | None:
    if not claims:
        return None
    by_reason: dict[str, list[str]] = {}
    for c in claims:
        by_reason.setdefault(not_tested_reason(c), []).append(c.id)
    table = Table(title=f"{chip_text('not tested')}: {len(claims)} claims, by reason", title_justify="left",
                  title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, expand=True)
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("reason", ratio=3)
    table.add_column("claims", ratio=2, overflow="ellipsis", no_wrap=True)
    for reason, ids in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        table.add_row(str(len(ids)), reason, ", ".join(ids))
    return table


def terminal(claims: Sequence[PaperClaim], width: int) -> Group:
    """The scoreboard for a terminal `width` columns wide: tally, tested claims, not tested claims by reason."""
    counts = claim_counts(claims)
    parts: list = [Text(counts_line(counts, "paper"), style="bold"), Text(counts_line(counts, "beyond"), style="bold")]
    if regime := headline_regime(claims):
        parts.append(Text(f"regime: {regime}", style="dim"))
    for title, group in (("Claims of the paper", [c for c in claims if not c.beyond_paper]),
                         ("Claims beyond the paper", [c for c in claims if c.beyond_paper])):
        tested, _ = ordered(group)
        if tested:
            parts += [Text(), _claims_table(title, tested, width)]
    notes = ["of: the comparison shown, of the claim's counted comparisons (every one: --markdown)"]
    if any(c.fragile for claim in claims if (c := deciding(claim)) is not None):
        notes.append("*: fragile, Holm p in [0.025, 0.05)")
    parts.append(Text("; ".join(notes), style="dim"))
    if not_tested := _not_tested_table(ordered(claims)[1]):
        parts += [Text(), not_tested]
    parts.append(Text("Every comparison: --markdown (or docs/SCOREBOARD.md); as data: --json; a page with a forest "
                      "plot per grid: --html OUT.html", style="dim"))
    return Group(*parts)


def terminal_text(claims: Sequence[PaperClaim], width: int) -> str:
    """terminal() as plain text `width` columns wide (for --out)."""
    console = Console(width=width, color_system=None, file=io.StringIO())
    console.print(terminal(claims, width))
    return console.file.getvalue()


# ----------------------------------------------------------------------------------------------
# the page


def _grid_link(grid_dir: Path, out: Path) -> str:
    """A link from the page to a grid's report: its index.html where it was written, else report.md."""
    target = grid_dir / "index.html"
    target = target if target.is_file() else grid_dir / "report.md"
    return os.path.relpath(target.resolve(), out.parent.resolve())


def _claim_item(claim: PaperClaim) -> str:
    shown = deciding(claim)
    line = f"{chip(claim.verdict, shown is not None and shown.fragile)} {html.escape(claim.statement)} "
    line += f'<span class="effect">({html.escape(claim.where)}; {html.escape(claim.id)})</span>'
    if shown is not None:
        of = f", 1 of {_of(claim).split('/')[1]} comparisons" if _of(claim) else ""
        line += (f'<br><span class="effect">{html.escape(effect_text(comparison_cells([shown])[0]))} — '
                 f"{html.escape(_grid(shown) + of)}</span>")
    return f"<li>{line}</li>"


def html_page(claims: Sequence[PaperClaim], rows: Sequence[Verdict], grid_dirs: dict[str, Path], out: Path) -> str:
    """The scoreboard page: the tallies, every tested claim (decisive first) with its deciding comparison, the
    claims not tested by reason, and per grid its forest plot and a link to its report. Self-contained: the plots
    are inlined."""
    counts = claim_counts(claims)
    lead = [tally_html({v: counts["paper"][v] for v in CLAIM_VERDICTS}, f"{counts['paper']['total']} claims of the paper"),
            tally_html({v: counts["beyond"][v] for v in CLAIM_VERDICTS},
                       f"{counts['beyond']['total']} claims beyond the paper")]
    if regime := headline_regime(claims):
        lead.append(f'<p class="regime"><b>Regime of the evidence:</b> {html.escape(regime)}. Every verdict holds in '
                    "its grid's regime only.</p>")
    sections = []
    for title, group in (("Claims of the paper", [c for c in claims if not c.beyond_paper]),
                         ("Claims beyond the paper", [c for c in claims if c.beyond_paper])):
        tested, _ = ordered(group)
        if tested:
            sections.append(Section(title, f'<ol class="claims">{"".join(map(_claim_item, tested))}</ol>'))
    if not_tested := ordered(claims)[1]:
        by_reason: dict[str, list[PaperClaim]] = {}
        for c in not_tested:
            by_reason.setdefault(not_tested_reason(c), []).append(c)
        items = "".join(f"<li><b>{len(cs)}</b> {html.escape(reason)}: {html.escape(', '.join(c.id for c in cs))}</li>"
                        for reason, cs in sorted(by_reason.items(), key=lambda item: -len(item[1])))
        sections.append(Section("Not tested", f"<ul>{items}</ul>"))
    by_grid: dict[str, list[Verdict]] = {}
    for v in rows:
        for grid in v.grids or (v.grid,):
            by_grid.setdefault(grid, []).append(v)
    with tempfile.TemporaryDirectory() as tmp:
        parts = []
        for grid in sorted(by_grid):
            link = (f'<a href="{html.escape(_grid_link(grid_dirs[grid], out))}">{html.escape(grid)}</a>'
                    if grid in grid_dirs else html.escape(grid))
            plot = cached_forest_plot(by_grid[grid], Path(tmp) / f"{len(parts)}.png", grid)
            body = (markdown_body(f"![forest plot of {grid}]({plot.name})", Path(tmp)) if plot
                    else "<p>No comparison with an effect yet.</p>")
            parts.append(f'<h3 id="grid-{html.escape(grid)}">{link}</h3>{body}')
        sections.append(Section("Forest plot of each grid", "\n".join(parts)))
    return page("Scoreboard of the paper's claims", "".join(lead), sections)
