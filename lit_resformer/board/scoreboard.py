"""The scoreboard as a reader meets it: in a terminal (`lit-resformer claims`) and as one HTML page (`claims --html`).

The terminal gets the tally first, then each tested claim, decisive verdicts first: its verdict, id, Δ with its
interval, Holm p and grid, and beneath its words in full; the claims not tested are counted by reason. A claim with
several comparisons shows the one that decides it best (its verdict, the smallest Holm p) and how many there are;
`--markdown` keeps every comparison. The page holds every claim in one table that filters by verdict, grid and regime
and sorts by any column, a forest plot across regimes for each claim judged in several (the transfer table as a
picture), and per grid its forest plot and a link to its report.
"""

from __future__ import annotations

import html
import io
import os
import re
import tempfile
import textwrap
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from lit_resformer.board.transfer import TransferRow, claim_markdown, regime_label, transfer_row
from lit_resformer.reports.forest import cached_forest_plot, short_claim
from lit_resformer.reports.lead import comparison_cells
from lit_resformer.reports.page import (
    VERDICT_STYLE,
    Section,
    chip,
    chip_text,
    image_html,
    markdown_body,
    page,
    tally_html,
)
from lit_resformer.verdicts.paper_claims import (
    CLAIM_VERDICTS,
    PaperClaim,
    base_text,
    claim_counts,
    counts_line,
    headline_regime,
)
from lit_resformer.verdicts.verdict import Verdict, is_sub_row
from lit_resformer.writing import aligned_lines

# the board page's own style and script, in files beside this one: inlined, the page stays one file
BOARD_STYLE, BOARD_SCRIPT = ((Path(__file__).parent / name).read_text() for name in ("board.css", "board.js"))

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


def _counted(claim: PaperClaim) -> int:
    """How many comparisons decide the claim (one is shown)."""
    return sum(e.counted for e in claim.evidence)


def _of(claim: PaperClaim) -> str:
    """"1/k" where the claim counts k > 1 comparisons."""
    return f"1/{_counted(claim)}" if _counted(claim) > 1 else ""


def _claims_table(title: str, claims: Sequence[PaperClaim], width: int) -> Group:
    """Each tested claim in two lines: its verdict, id, deciding comparison's Δ with its interval, Holm p, "of" and
    grid, in aligned columns (the grid, then "of", give way to a narrow terminal, then the id, which leads the words
    instead: a cell never wraps onto a line of its own); then its words in full, wrapped, never cut, so that claims
    whose words begin alike still read apart."""
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
    id_beneath = max(map(len, [header, *lines])) > width
    if id_beneath:
        header, *lines = aligned_lines([(row[0], *row[2:4]) for row in rows], right={2})
    chip = max(len(row[0]) for row in rows)
    parts = [Text(title, style="bold"), Text(header, style="bold"), Text("─" * min(len(header), width))]
    for claim, line in zip(claims, lines, strict=True):
        words = Text(short_claim(claim.statement, len(claim.statement)))
        parts += [Text.assemble((line[:chip], VERDICT_STYLE[claim.verdict][1]), line[chip:]),
                  Padding(Text.assemble((claim.id, "bold"), ": ", words) if id_beneath else words, (0, 0, 0, chip + 2))]
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
    parts.append(Text("Every comparison: --markdown (or docs/SCOREBOARD.md); as data: --json; a page that filters and "
                      "sorts, with forest plots across regimes and per grid: --html OUT.html", style="dim"))
    return Group(*parts)


def terminal_text(claims: Sequence[PaperClaim], width: int) -> str:
    """terminal() as plain text `width` columns wide (for --out)."""
    console = Console(width=width, color_system=None, file=io.StringIO())
    console.print(terminal(claims, width))
    return console.file.getvalue()


# ----------------------------------------------------------------------------------------------
# the page


def _grid_link(grid_dir: Path, out: Path) -> str:
    """A link from the page to a grid's report: its page (index.html) where `lit-resformer report` wrote it, else its
    report.md. The pages of committed grids are not committed (git ignores them: each holds its plots inlined), so in
    a fresh clone the links go to report.md until the reader writes a grid's page (GRID_PAGES says how)."""
    target = grid_dir / "index.html"
    target = target if target.is_file() else grid_dir / "report.md"
    return os.path.relpath(target.resolve(), out.parent.resolve())


def _grid_pages_note(grid_dirs: Iterable[Path]) -> str:
    """How many of the grids linked below link to their page and how the others get one (a grid linked to its
    report.md reads as text in a browser)."""
    folders = list(grid_dirs)
    without = [folder for folder in folders if not (folder / "index.html").is_file()]
    if not without:
        return "<p>Each grid's name links to its report's page.</p>"
    example = html.escape(str(without[0]))
    return (f"<p>Each grid's name links to its report's page where it has been written ({len(folders) - len(without)} "
            f"of {len(folders)}), else to its report.md, which a browser shows as text. "
            f"<code>lit-resformer report {example}</code> writes a grid's page (index.html, beside its report.md; git "
            "ignores it, and nothing tracked changes); then write this page again.</p>")


def _filtered_by(verdicts: Iterable[str], grids: Iterable[str], regimes: Iterable[str]) -> str:
    """The attributes the page's filters read (board.js): each a "|"-separated list of what it matches."""
    return " ".join(f'data-{key}="{html.escape("|".join(dict.fromkeys(values)))}"'
                    for key, values in (("verdict", verdicts), ("grid", grids), ("regime", regimes)))


# the claims table's columns: (header, numeric); a numeric column sorts by its cells' data-sort
COLUMNS = (("verdict", True), ("claim", False), ("words", False), ("Δ (a − b)", True), ("95% CI", True),
           ("p Holm", True), ("MDE", True), ("grid", False), ("regime", False))


def _td(content: str, css: str = "", sort: object = None, label: str = "") -> str:
    """A cell of the claims table: `sort`, what it sorts by (None: its text; a number; "": no number); `label`, its
    name on a narrow screen."""
    attributes = "".join(f' {name}="{html.escape(str(value))}"' for name, value in
                         (("class", css or None), ("data-sort", sort), ("data-label", label or None)) if value is not None)
    return f"<td{attributes}>{content}</td>"


def _claim_row(claim: PaperClaim) -> str:
    """A claim as a row of the claims table: its verdict, id, words (and where the paper makes it), its deciding
    comparison's Δ, interval, Holm p, MDE, grid and regime; a claim not tested says why."""
    shown = deciding(claim)
    judged = transfer_row(claim)
    words = (f'{html.escape(claim.statement)} <span class="where">({html.escape(claim.where)})</span>'
             + (f'<br><span class="where">not tested: {html.escape(not_tested_reason(claim))}</span>'
                if claim.verdict == "not tested" else ""))
    tds = [_td(chip(claim.verdict, shown is not None and shown.fragile), sort=DECISIVE_FIRST.get(claim.verdict, 4)),
           _td(html.escape(claim.id), "id"), _td(words, "words")]
    if shown is None:
        tds += [_td("–", "num", sort="")] * 4 + [_td("–"), _td("–")]
    else:
        cells = comparison_cells([shown])[0]
        of = f"<br><small>1 of {_counted(claim)} compared</small>" if _counted(claim) > 1 else ""
        more = len(judged.by_regime) - 1
        more = f' <a href="#across-{html.escape(claim.id)}">+{more} more ↓</a>' if more else ""
        tds += [_td(html.escape(cells[name]) + (of if name == "Δ (a − b)" else ""), "num", "" if x is None else x, label)
                for name, x, label in (("Δ (a − b)", shown.delta, "Δ"), ("95% CI", shown.low, "95% CI"),
                                       ("p Holm", shown.p_holm, "p Holm"), ("MDE", shown.power.get("mde"), "MDE"))]
        grids = shown.grids or (shown.grid,)
        tds += [_td(f'<span title="{html.escape(", ".join(grids))}">{html.escape(_grid(shown))}</span>', sort=grids[0],
                    label="grid"),
                _td(html.escape(regime_label(shown)) + more, "regime", label="regime")]
    return f'<tr {_filtered_by([claim.verdict], judged.grids, judged.by_regime)}>{"".join(tds)}</tr>'


def _across_label(v: Verdict, several: bool) -> str:
    """A row of a claim's plot across regimes, in two lines: its regime, then its grid (and, where the regime holds
    `several` of the claim's comparisons, what sets this one apart: its matrix point, else its words)."""
    point = v.claim.claim[len(base_text(v.claim.claim)):].strip(" []")
    grid = _grid(v) + (f": {point or short_claim(v.claim.claim, 60)}" if several else "")
    return f"{regime_label(v)}\n{textwrap.shorten(grid, 48, placeholder='…')}"


def _across_regimes(row: TransferRow, plot_path: Path) -> str:
    """One claim judged in several regimes: its forest plot across them, one row per comparison with its verdict,
    Δ and interval printed beside it and the paper's effect where it gives a number; then, folded, the transfer
    table's cells of each comparison (how far a transfer effect moved from the counted one)."""
    several = {label for label, vs in row.by_regime.items() if len(vs) > 1}
    plot = cached_forest_plot(row.comparisons, plot_path, row.claim.id,
                              lambda v: _across_label(v, regime_label(v) in several), numbers=True)
    claim = row.claim
    return (f'<div class="across" id="across-{html.escape(claim.id)}" '
            f"{_filtered_by([claim.verdict], row.grids, row.by_regime)}>"
            f"<h3>{chip(claim.verdict)} {html.escape(claim.id)}: <small>{html.escape(claim.statement)}</small></h3>"
            + (image_html(plot, f"forest plot of {claim.id} across regimes") if plot else "")
            + f"<details><summary>Each comparison</summary>{markdown_body(claim_markdown(row), plot_path.parent)}"
            "</details></div>")


def _filters(verdicts: Sequence[str], grids: Sequence[str], regimes: Sequence[str]) -> str:
    """The filter bar: a choice each of verdict, grid and regime ("all" hides nothing), and how many claims show."""
    def choice(name: str, values: Sequence[str]) -> str:
        options = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in values)
        return f'<label>{name} <select name="{name}"><option value="">all</option>{options}</select></label>'

    return (f'<form class="filters">{choice("verdict", verdicts)}{choice("grid", grids)}{choice("regime", regimes)}'
            '<button type="reset">show all</button> <output></output></form>')


def html_page(claims: Sequence[PaperClaim], rows: Sequence[Verdict], grid_dirs: dict[str, Path], out: Path) -> str:
    """The scoreboard page: the tallies and the filters (verdict, grid, regime); every claim in a table that sorts
    by any column (decisive first), with its deciding comparison; each claim judged in several regimes, its forest
    plot across them; per grid, folded, its forest plot and a link to its report. Self-contained: the plots are
    inlined (and marked to load lazily), the filters and the sorting are inline script."""
    counts = claim_counts(claims)
    lead = [tally_html({v: counts["paper"][v] for v in CLAIM_VERDICTS}, f"{counts['paper']['total']} claims of the paper"),
            tally_html({v: counts["beyond"][v] for v in CLAIM_VERDICTS},
                       f"{counts['beyond']['total']} claims beyond the paper")]
    if regime := headline_regime(claims):
        lead.append(f'<p class="regime"><b>Regime of the evidence:</b> {html.escape(regime)}. Every verdict holds in '
                    "its grid's regime only.</p>")
    by_grid: dict[str, list[Verdict]] = {}
    for v in rows:
        for grid in v.grids or (v.grid,):
            by_grid.setdefault(grid, []).append(v)
    lead.append(_filters([v for v in CLAIM_VERDICTS if any(c.verdict == v for c in claims)], sorted(by_grid),
                         list(dict.fromkeys(map(regime_label, rows)))))
    head = "".join(('<th data-type="number">' if numeric else "<th>")
                   + f'<button type="button">{html.escape(name)}</button></th>' for name, numeric in COLUMNS)
    sections = []
    for title, group in (("Claims of the paper", [c for c in claims if not c.beyond_paper]),
                         ("Claims beyond the paper", [c for c in claims if c.beyond_paper])):
        if group:  # tested claims decisive first, then those not tested
            body = "".join(map(_claim_row, [c for part in ordered(group) for c in part]))
            sections.append(Section(title, f'<div class="wide"><table class="board"><thead><tr>{head}</tr></thead>'
                                           f"<tbody>{body}</tbody></table></div>"))
    with tempfile.TemporaryDirectory() as tmp:
        if across := [r for r in map(transfer_row, claims) if len(r.by_regime) > 1]:
            sections.append(Section("Claims across regimes", ACROSS_REGIMES + "\n".join(
                _across_regimes(r, Path(tmp) / f"across-{i}.png") for i, r in enumerate(across))))
        parts = []
        for grid in sorted(by_grid):
            link = (f'<a href="{html.escape(_grid_link(grid_dirs[grid], out))}">{html.escape(grid)}</a>'
                    if grid in grid_dirs else html.escape(grid))
            plot = cached_forest_plot(by_grid[grid], Path(tmp) / f"grid-{len(parts)}.png", grid)
            body = image_html(plot, f"forest plot of {grid}") if plot else "<p>No comparison with an effect yet.</p>"
            verdicts = Counter(v.verdict for v in by_grid[grid] if not is_sub_row(v))
            tally = " ".join(chip(v, count=verdicts[v]) for v in VERDICT_STYLE if verdicts[v])
            parts.append(f'<details class="grid-plot" id="grid-{html.escape(grid)}" '
                         f"{_filtered_by(verdicts, [grid], map(regime_label, by_grid[grid]))}>"
                         f"<summary><h3>{link}</h3> {tally}</summary>{body}</details>")
        sections.append(Section("Forest plot of each grid", "<p>Folded: open a grid to see its plot (choosing a grid "
                                "above opens it).</p>"
                                + _grid_pages_note(grid_dirs[grid] for grid in sorted(by_grid) if grid in grid_dirs)
                                + "\n".join(parts)))
    return page("Scoreboard of the paper's claims", "".join(lead), sections, BOARD_STYLE, BOARD_SCRIPT)


ACROSS_REGIMES = (
    "<p>Each claim judged in more than one regime (optimizer, training tokens, model, corpus, as its runs record them): "
    "Δ with its 95% interval, zero (dashed) and the paper's effect (|) where it gives a number. The counted comparisons "
    "decide the verdict; a transfer regime's is read beside them.</p>")
