"""The grid report and the scoreboard as a reader meets them: a table of what each cell changes relative to the base
experiment, step axes with whole-number ticks, files that others may read; a page that answers first (tally and
claims on top, reference sections folded), tables that fit, a forest plot, a scoreboard that fits a terminal."""

import os
import re
import stat

import pandas as pd
import pytest
import yaml

import lit_resformer.reports.document as document_module
from lit_resformer.reports.grid_report import write_report
from lit_resformer.verdicts.rendering import ADJUSTMENT_NOTE
from lit_resformer.writing import atomic_write, atomic_write_json
from tests.helpers.claims_grids import judged_grid
from tests.helpers.grid_dirs import make_grid_dir, synthetic_grid, write_run


def markdown_section(text: str, heading: str) -> list[str]:
    section = text.split(f"## {heading}\n", 1)[1]
    return section.split("\n## ", 1)[0].strip().splitlines()


def test_report_tables_what_each_cell_changes_relative_to_the_base(tmp_path):
    # The report's base: trainer.max_steps 100, model.lr 1e-3, no residual (default target "none").
    grid_dir = make_grid_dir(tmp_path, {
        "baseline": "vanilla",
        "overrides": {"trainer.max_steps": 50},
        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v", "model.config.residual.lam": 0.25},
                  "same-lr": {"model.lr": 1e-3, "model.config.residual.lam": 0.5}},  # base and default values
    })
    for cell in ("vanilla", "resformer", "same-lr"):
        write_run(grid_dir, cell, 0, {step: 3.0 - 0.01 * step for step in range(20)})
    write_report(grid_dir)
    lines = markdown_section((grid_dir / "report.md").read_text(), "Cells")
    assert "Every cell: trainer.max_steps 100 → 50." in lines
    table = [line for line in lines if line.startswith("|")]
    assert table == [
        '| cell | model.config.residual.lam (base 0.5) | model.config.residual.target (base "none") |',
        "|---|---|---|",
        "| vanilla |  |  |",
        '| resformer | 0.25 | "v" |',
        "| same-lr |  |  |",
    ]


def test_report_of_an_older_manifest_shows_the_grid_files_overrides(tmp_path):
    grid_dir = make_grid_dir(tmp_path, {"baseline": "vanilla", "overrides": {"trainer.max_steps": 50},
                                        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}})
    manifest = yaml.safe_load((grid_dir / "grid.yaml").read_text())
    assert "version" not in manifest  # as the runner wrote it before manifests had a version
    for cell in manifest["cells"]:
        del cell["changes"]  # nor did the runner record the changes then
    (grid_dir / "grid.yaml").write_text(yaml.safe_dump(manifest))
    write_report(grid_dir)
    lines = markdown_section((grid_dir / "report.md").read_text(), "Cells")
    assert "Every cell: trainer.max_steps → 50." in lines
    assert [line for line in lines if line.startswith("|")] == [
        "| cell | model.config.residual.target |", "|---|---|", "| vanilla |  |", '| resformer | "v" |']


def test_step_axes_tick_whole_steps(tmp_path, monkeypatch):
    """Four logged steps: matplotlib's default locator would tick 0.5, 1.0, 1.5, ..."""
    ticks = []
    save_figure = document_module.save_figure

    def record(fig, path):
        ticks.append((path.name, list(fig.axes[0].get_xticks())))
        return save_figure(fig, path)

    monkeypatch.setattr(document_module, "save_figure", record)
    plotter = document_module.Plotter(tmp_path, ["a", "b"])
    curves = {"a": pd.Series([3.0, 2.5, 2.2, 2.0], index=[0, 1, 2, 3]), "b": pd.Series([3.1, 2.4, 2.1, 1.9])}
    plotter.curves("loss", curves, "loss", "loss")
    (name, xticks), = ticks
    assert name == "loss.png" and len(xticks) >= 2
    assert all(float(x).is_integer() for x in xticks), xticks


def test_curves_are_drawn_against_training_tokens_where_every_cell_knows_its_rate(tmp_path, monkeypatch):
    axes = []
    save_figure = document_module.save_figure

    def record(fig, path):
        axes.append(fig.axes[0])
        return save_figure(fig, path)

    monkeypatch.setattr(document_module, "save_figure", record)
    curves = {"a": pd.Series([3.0, 2.5, 2.2], index=[0, 10, 20]), "b": pd.Series([3.1, 2.4, 2.1], index=[0, 10, 20])}
    document_module.Plotter(tmp_path, ["a", "b"], tokens_per_step={"a": 512, "b": 2048}).curves("t", curves, "t", "loss")
    document_module.Plotter(tmp_path, ["a", "b"], tokens_per_step={"a": 512}).curves("s", curves, "s", "loss")
    by_tokens, by_steps = axes
    assert by_tokens.get_xlabel() == "training tokens" and by_steps.get_xlabel() == "step"
    assert [list(line.get_xdata()) for line in by_tokens.get_lines()] == [[0, 5120, 10240], [0, 20480, 40960]]
    assert [list(line.get_xdata()) for line in by_steps.get_lines()] == [[0, 10, 20], [0, 10, 20]]
    # each cell in its own colour and marker, the same on every plot
    assert [(line.get_color(), line.get_marker()) for line in by_tokens.get_lines()] == \
        [(line.get_color(), line.get_marker()) for line in by_steps.get_lines()] == [("#0072B2", "o"), ("#E69F00", "s")]


def labelled_ticks(axis) -> int:
    """The ticks of a drawn axis that carry a label inside its view: what a reader can read values against."""
    low, high = sorted(axis.get_view_interval())
    return sum(1 for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]
               if tick.label1.get_visible() and tick.label1.get_text() and low <= tick.get_loc() <= high)


@pytest.mark.integration  # writes a whole report
def test_every_plot_of_a_report_keeps_legends_off_the_data_and_ticks_both_axes(tmp_path, monkeypatch):
    import lit_resformer.analysis.plots as plots
    import lit_resformer.reports.attention as attention
    import lit_resformer.reports.forest as forest

    figures = {}
    for module in (document_module, plots, attention, forest):
        def keep(fig, path, save=module.save_figure):
            fig.canvas.draw()
            figures[path.name] = fig
            return save(fig, path)

        monkeypatch.setattr(module, "save_figure", keep)
    write_report(synthetic_grid(tmp_path))
    assert {"train_loss.png", "val_loss.png", "relative_train_loss_w10.png", "val_loss_by_domain.png"} <= set(figures)
    for name, fig in figures.items():
        panels = [ax.get_window_extent() for ax in fig.axes]
        for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]:
            box = legend.get_window_extent()
            assert not any(box.overlaps(panel) for panel in panels), f"{name}: the legend covers a panel"
        for ax in fig.axes:
            assert labelled_ticks(ax.xaxis) >= 2 and labelled_ticks(ax.yaxis) >= 2, f"{name}: an axis with < 2 ticks"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_report_files_are_readable_by_others_unless_the_umask_says_otherwise(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        grid_dir = synthetic_grid(tmp_path)
        written = [write_report(grid_dir), grid_dir / "report.md", *(grid_dir / "plots").glob("*.png"),
                   atomic_write(tmp_path / "a.txt", "text"), atomic_write_json(tmp_path / "b.json", {"x": 1})]
    finally:
        os.umask(old)
    assert len(written) > 4
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in written} == {path.name: mode for path in written}
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary file left behind


# ------------------------------------------------------------------------------------------ answers first


def test_index_html_answers_first_and_folds_what_a_reader_looks_up(tmp_path):
    grid_dir = judged_grid(tmp_path)
    page = write_report(grid_dir).read_text()
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    lead, rest = page.split('<nav class="toc">', 1)
    # the lead: the tally as chips (symbol and colour), then each comparison with its Δ and interval
    assert re.search(r'<span class="chip" style="background:#[0-9a-f]{6}">✓ \d+ reproduced</span>', lead)
    assert "✗" in lead and "better ends below vanilla" in lead and "Δ -0.3000 [" in lead
    assert lead.index('class="tally"') < lead.index('<ol class="claims">')
    # a table of contents with an anchor for every section; reference sections and method prose folded
    for anchor in ("claims", "final-losses", "runs", "cells", "provenance"):
        assert f'href="#{anchor}"' in rest and f'id="{anchor}"' in rest
    assert '<details id="provenance">' in rest and '<details id="cells">' in rest and '<section id="runs">' in rest
    assert '<details class="method"><summary>How this is computed</summary>' in rest
    assert page.count("<table>") == len(re.findall(r'<div class="wide[^"]*"><table>', page)) > 0  # each in its box
    # the claims table, verdict first, in the box laid out for verdicts; every cell names its column for a narrow page
    claims = rest.split('<section id="claims">')[1].split("</section>")[0]
    assert re.search(r'<div class="wide verdicts"><table>\n<thead>\n<tr>\n<th>verdict</th>\n<th>claim</th>', claims)
    assert '<td data-label="verdict"><strong>reproduced</strong>' in claims
    assert page.count("<td>") == 0 and page.count("<td ") == page.count("<td data-label=")
    assert ADJUSTMENT_NOTE in claims and ADJUSTMENT_NOTE in (grid_dir / "report.md").read_text()
    report = (grid_dir / "report.md").read_text()
    assert report.index("**Verdicts (") < report.index("## Claims") < report.index("## Final losses")
    assert "![Forest plot" in report.split("## Claims")[1]


def test_tables_shorten_hashes_and_footnote_notes_repeated_on_rows():
    from lit_resformer.reports.document import footnote_repeats, short_hashes

    full = "c94743fa3d62ed88c3decf589b9801bc587d98cd"
    assert short_hashes(f"git_commit {full} vs {'1' * 40}") == "git_commit c94743fa vs 11111111"
    rows = [["a", "mean over the middle layers; runs differ"], ["b", "runs differ"], ["c", "own note"]]
    assert footnote_repeats(rows, 1) == (
        [["a", "mean over the middle layers; ¹"], ["b", "¹"], ["c", "own note"]], ["¹ runs differ"])
    assert footnote_repeats([["a", "x"], ["b", "y"]], 1) == ([["a", "x"], ["b", "y"]], [])


def test_forest_plot_reads_the_papers_effect_and_keeps_units_apart(tmp_path, monkeypatch):
    from lit_resformer.reports import forest
    from lit_resformer.runs.claim_spec import Claim

    def claim(metric: str, paper: str | None) -> Claim:
        return Claim(claim="c", a="a", b="b", metric=metric, direction="lower", paper=paper)

    assert forest.paper_effect(claim("val_loss", "-0.0272 at 82M, -0.0323 at 180M (Table 5)")) == -0.0272
    assert forest.paper_effect(claim("time_to_target", "20.3% less data (v5)")) == pytest.approx(0.203)
    assert forest.paper_effect(claim("val_loss", "1,750 -> 1,530 steps to the target loss")) is None
    assert forest.paper_effect(claim("val_loss", None)) is None
    assert forest.short_claim("ResFormer beats NeuTRENO (Fig. 7, right)", 60) == "ResFormer beats NeuTRENO"
    sic = '"ResFormer achieves an even lower final loss than ResFormer" (sic)'  # the quote's typo is marked, not cited
    assert forest.short_claim(sic, len(sic)) == sic

    from lit_resformer.verdicts.judgements import evaluate_grid

    verdicts = evaluate_grid(judged_grid(tmp_path))
    panels = []
    save = forest.save_figure
    monkeypatch.setattr(forest, "save_figure", lambda fig, path: (panels.extend(ax.get_xlabel() for ax in fig.axes),
                                                                   save(fig, path))[1])
    png = forest.forest_plot(verdicts, tmp_path / "forest.png", "g")
    assert png.read_bytes().startswith(b"\x89PNG")
    assert panels == ["Δ loss, a − b (nats; < 0: a is lower)"]  # val_loss, val_loss/code and train_loss share one
    assert forest.forest_plot([], tmp_path / "none.png", "g") is None


def test_a_forest_plot_names_its_rows_as_asked_and_prints_their_numbers_beside_them(tmp_path, monkeypatch):
    from dataclasses import replace

    from lit_resformer.reports import forest
    from tests.helpers.claims_grids import row

    texts = []
    save = forest.save_figure
    monkeypatch.setattr(forest, "save_figure", lambda fig, path: (
        texts.append([[t.get_text() for t in ax.get_yticklabels()] + [t.get_text() for t in ax.texts] for ax in fig.axes]),
        save(fig, path))[1])
    rows = [row("g", "reproduced", "a beats b"), replace(row("transfer-g", "inconclusive", "a beats b"), low=None)]
    forest.forest_plot(rows, tmp_path / "plain.png", "a")
    forest.forest_plot(rows, tmp_path / "across.png", "a", lambda v: f"regime of {v.grid}", numbers=True)
    assert texts == [[["a beats b", "a beats b"]],  # each row's words above it, then its numbers at the line's end
                     [["regime of g", "✓ -0.1000 [-0.2000, -0.0500]", "regime of transfer-g", "~ -0.1000"]]]


def test_a_forest_plot_s_legend_names_the_paper_s_effect_only_where_it_marks_one(tmp_path, monkeypatch):
    from dataclasses import replace

    from lit_resformer.reports import forest
    from tests.helpers.claims_grids import row

    legends = []
    save = forest.save_figure
    monkeypatch.setattr(forest, "save_figure", lambda fig, path: (
        legends.append([t.get_text() for t in fig.axes[0].get_legend().get_texts()]), save(fig, path))[1])
    without = [row("g", "reproduced", "a beats b")]
    assert forest.paper_effect(without[0].claim) is None
    forest.forest_plot(without, tmp_path / "without.png", "g")
    forest.forest_plot([replace(without[0], claim=replace(without[0].claim, paper="-0.03 at 82M"))],
                       tmp_path / "with.png", "g")
    assert legends == [["reproduced", "95% interval"], ["reproduced", "the paper's effect", "95% interval"]]


def test_scoreboard_fits_the_terminal_tally_first_decisive_first(tmp_path):
    from lit_resformer.board.scoreboard import terminal_text
    from lit_resformer.verdicts.paper_claims import paper_claims
    from lit_resformer.verdicts.scoreboard_rows import scoreboard

    claims = paper_claims(scoreboard([judged_grid(tmp_path)]))
    for width in (80, 120):
        lines = terminal_text(claims, width).splitlines()
        assert max(map(len, lines)) <= width
        assert lines[0].startswith(f"{sum(not c.beyond_paper for c in claims)} claims of the paper:")
        verdicts = [line.split()[1].rstrip("*") for line in lines if line[:2] in ("✓ ", "✗ ", "~ ", "± ")]
        rank = {"reproduced": 0, "contradicted": 1, "mixed": 2, "inconclusive": 3}
        assert verdicts and verdicts == sorted(verdicts, key=rank.get)
        # the registry's claims that no comparison here measures: counted by reason, one line a reason at most
        not_tested = [c for c in claims if c.verdict == "not tested"]
        assert any(line.startswith(f"– not tested: {len(not_tested)} claims, by reason") for line in lines)
        assert len(lines) < len(claims) + 20


def test_claims_command_html_page_and_help(tmp_path, capsys):
    from lit_resformer.cli import main

    grid_dir = judged_grid(tmp_path)
    write_report(grid_dir)
    out = tmp_path / "board/scoreboard.html"
    main(["claims", str(grid_dir.parent), "--html", str(out)])
    page = out.read_text()
    assert '<meta name="viewport"' in page and 'class="tally"' in page
    assert 'href="../runs/g/index.html"' in page and page.count('src="data:image/png;base64,') == 1  # g's forest plot
    with pytest.raises(SystemExit):
        main(["claims", "--help"])
    help_text = capsys.readouterr().out
    assert "95% CI" in help_text and "%%" not in help_text


def test_the_board_draws_a_forest_plot_once_and_reads_it_back_until_its_rows_change(tmp_path, monkeypatch):
    from dataclasses import replace

    from lit_resformer.reports import forest
    from tests.helpers.claims_grids import row

    monkeypatch.setenv("LIT_RESFORMER_VERDICT_CACHE", str(tmp_path / "cache"))
    drawn = []
    draw = forest.forest_plot
    monkeypatch.setattr(forest, "forest_plot", lambda *args: (drawn.append(args[2]), draw(*args))[1])
    rows = [row("g", "reproduced", "a beats b"), row("g", "inconclusive", "c beats d")]
    first = forest.cached_forest_plot(rows, tmp_path / "first.png", "g").read_bytes()
    again = forest.cached_forest_plot(rows, tmp_path / "again.png", "g").read_bytes()
    assert drawn == ["g"] and again == first and first.startswith(b"\x89PNG")
    moved = [replace(rows[0], delta=-0.12), rows[1]]  # one number of what the plot shows
    forest.cached_forest_plot(moved, tmp_path / "moved.png", "g")
    forest.cached_forest_plot(rows, tmp_path / "retitled.png", "h")
    forest.cached_forest_plot(rows, tmp_path / "relabelled.png", "g", lambda v: v.claim.claim.upper())
    forest.cached_forest_plot(rows, tmp_path / "numbered.png", "g", numbers=True)
    assert drawn == ["g", "g", "h", "g", "g"]
    assert forest.cached_forest_plot([replace(rows[0], delta=None)], tmp_path / "none.png", "g") is None


@pytest.mark.parametrize("columns", [80, 132])
def test_the_report_prints_its_verdicts_sized_to_the_terminal(tmp_path, monkeypatch, capsys, columns):
    """`report` and the end of `grid` print the lead's verdicts: no line wider than the terminal, each comparison's
    words whole once the lines are joined."""
    from lit_resformer.verdicts.judgements import evaluate_grid

    grid_dir = judged_grid(tmp_path)
    monkeypatch.setenv("COLUMNS", str(columns))
    write_report(grid_dir)
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines and max(map(len, lines)) <= columns
    assert lines[0].startswith("Verdicts (")
    joined = " ".join(line.strip() for line in lines)
    verdicts = evaluate_grid(judged_grid(tmp_path / "again"))
    assert all(v.claim.claim in joined for v in verdicts)
    assert sum(line.startswith("- ") for line in lines) == len(verdicts)  # each comparison starts a line


def _drawn(monkeypatch) -> list:
    figures = []
    save_figure = document_module.save_figure

    def record(fig, path):
        figures.append(fig)
        return save_figure(fig, path)

    monkeypatch.setattr(document_module, "save_figure", record)
    return figures


def _legend(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_a_ladders_rung_is_drawn_from_its_branch_on_in_its_trunks_style(tmp_path, monkeypatch):
    """A rung is its trunk up to its branch: drawn again there, the trunk's curve is hidden under a bundle of copies
    in as many styles, one legend entry each (60 of them on the learning-rate surface)."""
    figures = _drawn(monkeypatch)
    history = pd.Series([5.0, 4.0, 3.5, 3.2, 3.0, 2.9], index=[0, 10, 20, 30, 40, 50])
    curves = {"a,trunk": history[:5], "b,trunk": history[:5] + 0.1, "a,max_steps=50": history,
              "b,max_steps=50": history + 0.05}
    ladder = document_module.LadderLayout.of(
        {"a,trunk": {"family": "a"}, "b,trunk": {"family": "b"},
         **{f"{f},max_steps=50": {"trunk": f"{f},trunk", "overrides": {"model.decay_start": 32}} for f in "ab"}})
    document_module.Plotter(tmp_path, list(curves), ladder=ladder).curves("loss", curves, "loss", "loss")
    (ax,) = figures[0].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    trunk_a, trunk_b = lines["a"], lines["b"]
    rung_a, rung_b = (line for line in ax.get_lines() if line.get_label() == "_branch")
    assert list(rung_a.get_xdata()) == [30, 40, 50]  # from the last point logged at its branch (step 32) on
    assert (rung_a.get_color(), rung_b.get_color()) == (trunk_a.get_color(), trunk_b.get_color())
    assert trunk_a.get_color() != trunk_b.get_color() and list(trunk_a.get_xdata()) == [0, 10, 20, 30, 40]
    assert _legend(ax) == ["a", "b", document_module.BRANCH_LEGEND]


def test_a_ladder_crossed_with_a_matrix_draws_a_panel_per_family_each_point_in_one_style(tmp_path, monkeypatch):
    figures = _drawn(monkeypatch)
    curve = pd.Series([5.0, 4.0, 3.0], index=[0, 10, 20])
    trunks = [f"{family},lr={lr},trunk" for family in ("a", "b") for lr in (0.1, 0.2)]
    rungs = {trunk.replace("trunk", "max_steps=20"): {"trunk": trunk, "overrides": {"model.decay_start": 16}}
             for trunk in trunks}
    ladder = document_module.LadderLayout.of({**{trunk: {"family": trunk[0]} for trunk in trunks}, **rungs})
    assert document_module.LadderLayout.of({trunk: {"family": trunk[0]} for trunk in trunks}) is None  # no rungs
    curves = {cell: curve for cell in [*trunks, *rungs]}
    document_module.Plotter(tmp_path, list(curves), ladder=ladder).curves("loss", curves, "loss", "loss")
    panel_a, panel_b = figures[0].axes
    assert (panel_a.get_title(), panel_b.get_title()) == ("a", "b")

    def colours(ax):
        return {line.get_label(): line.get_color() for line in ax.get_lines() if line.get_label() != "_branch"}

    assert colours(panel_a) == {"lr=0.1": "#0072B2", "lr=0.2": "#E69F00"}
    assert colours(panel_b) == {**colours(panel_a), document_module.BRANCH_LEGEND: "grey"}
    assert _legend(panel_b) == ["lr=0.1", "lr=0.2", document_module.BRANCH_LEGEND]
