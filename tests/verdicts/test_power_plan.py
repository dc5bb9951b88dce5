"""`lit-resformer plan` (lit_resformer.verdicts.power_plan) on synthetic grids: each comparison's spread, MDE and
seeds at its Holm family's level, the family of a comparison judged where its runs trained, metrics not in nats,
and the refusals of bad input before anything is judged."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from lit_resformer.cli import main
from lit_resformer.measures.power import Spread, family_level, mde, seeds_needed
from lit_resformer.runs.claim_spec import Claim
from lit_resformer.runs.directory import GridDir
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.verdicts.power_plan import PILOT_VERDICT, plan, plan_row, plan_summary
from lit_resformer.verdicts.verdict import Verdict
from tests.helpers.claims_grids import CELLS, EFFECT, VANILLA, grid_dir_from, write_summary
from tests.helpers.select_grids import SURFACE_BUDGETS, SURFACE_GRID, SURFACE_LRS, surface_loss

TABLE5 = "-0.0272 at 82M (Table 5)"


def paper_grid(tmp_path):
    """vanilla, better (about 0.3 nats below it) and same (no effect), 3 paired seeds; the two val_loss claims carry
    the paper's Table 5 effect."""
    claims = [{"claim": f"{cell} ends below vanilla", "a": cell, "b": "vanilla", "metric": "val_loss",
               "direction": "lower", "paper": TABLE5} for cell in ("better", "same")]
    claims.append({"claim": "better is ahead on code", "a": "better", "b": "vanilla", "metric": "val_loss/code",
                   "direction": "lower"})
    grid_dir = grid_dir_from(tmp_path, "pilot", {"baseline": "vanilla", "seeds": [0, 1, 2], "cells": {
        cell: CELLS[cell] for cell in ("vanilla", "better", "same")}, "claims": claims})
    for seed, base in VANILLA.items():
        write_summary(grid_dir, "vanilla", seed, base)
        for cell in ("better", "same"):
            write_summary(grid_dir, cell, seed, base + EFFECT[cell][seed])
    return grid_dir


def test_each_comparison_gets_its_spread_mde_and_seeds_at_its_familys_level(tmp_path):
    rows = {(r["a"], r["metric"]): r for r in plan(paper_grid(tmp_path), 0.1)}
    better, same = rows["better", "val_loss"], rows["same", "val_loss"]
    level = family_level(3)
    for row, cell in ((better, "better"), (same, "same")):
        sd = np.std(EFFECT[cell], ddof=1)  # the per-seed differences a - b of the synthetic grid
        assert (row["design"], row["n"], row["family_size"], row["level"]) == ("paired", 3, 3, level)
        assert row["sd"] == pytest.approx(sd, rel=1e-9)
        spread = Spread("paired", sd, 3, 2)
        assert row["mde"] == pytest.approx(mde(spread, level), rel=1e-6)
        assert row["seeds_for_plan_effect"] == seeds_needed(spread, 0.1, level)
        assert (row["paper_effect"], row["seeds_for_paper_effect"]) == (0.0272, seeds_needed(spread, 0.0272, level))
    assert better["verdict"] == "reproduced" and better["classification"] is None
    # no effect measured with 3 seeds: the paper's 0.0272 is far below what 3 seeds detect
    assert same["verdict"] == "inconclusive" and same["classification"] == "underpowered"
    assert same["seeds_needed"] == same["seeds_for_paper_effect"] and same["mde"] > 0.0272
    code = rows["better", "val_loss/code"]
    assert code["paper_effect"] is None and code["seeds_for_paper_effect"] is None and code["classification"] is None


def test_a_tuned_grid_is_planned_on_its_pilot_at_the_points_it_chose_before_its_confirmation_runs(tmp_path):
    """The learning-rate surface's seeds are sized before its confirmation runs: on the pilot seeds, each arm at the
    rate they chose at each budget, the spread of their paired differences there; their verdicts decide nothing."""
    grid_dir = grid_dir_from(tmp_path, "surface", SURFACE_GRID)
    for arm in ("vanilla", "resformer"):
        for lr in SURFACE_LRS:
            for budget in SURFACE_BUDGETS:
                for seed in (0, 1):  # the pilot only: no confirmation seed has run
                    write_summary(grid_dir, f"{arm},lr={lr:g},max_steps={budget}", seed,
                                  surface_loss(arm, lr, budget, seed))
    assert {row["verdict"] for row in plan(grid_dir, 0.027) if row["metric"] == "val_loss_each_at_best"} == \
        {"not tested"}  # judged on the confirmation seeds, which have not run
    rows = {row["claim"]: row for row in plan(grid_dir, 0.027, pilot=True)}
    at_4000 = next(row for claim, row in rows.items() if claim.endswith("[max_steps=4000]"))
    # vanilla's chosen point there is the pilot's lucky 4e-3: its differences are the ones planned from
    gaps = [surface_loss("resformer", 2.0e-3, 4000, seed) - surface_loss("vanilla", 4.0e-3, 4000, seed)
            for seed in (0, 1)]
    assert (at_4000["verdict"], at_4000["n"]) == (PILOT_VERDICT, 2)
    assert at_4000["sd"] == pytest.approx(np.std(gaps, ddof=1), rel=1e-9) and at_4000["seeds_for_plan_effect"]
    with pytest.raises(ValueError, match="no select block"):
        plan(paper_grid(tmp_path / "plain"), 0.027, pilot=True)


def test_a_comparison_judged_where_its_runs_trained_is_planned_in_that_family(tmp_path):
    """An overlay's comparison of runs another grid trained is tested in that grid's family (of one here), the
    overlay's own comparisons in the overlay's (of three)."""
    owner = grid_dir_from(tmp_path, "owner", {"baseline": "vanilla", "seeds": [0, 1, 2], "cells": {
        "vanilla": {}, "weak": {"model.lr": 4e-3}}, "claims": [
        {"claim": "weak ends below vanilla", "a": "weak", "b": "vanilla", "metric": "val_loss", "direction": "lower"}]})
    overlay = grid_dir_from(tmp_path, "overlay", {"baseline": "vanilla", "seeds": [0, 1, 2], "cells": {
        **CELLS, "weak": {"model.lr": 4e-3}}, "claims": [
        {"claim": f"{cell} ends below vanilla", "a": cell, "b": "vanilla", "metric": "val_loss", "direction": "lower"}
        for cell in ("weak", "better", "worse", "same")]})
    for seed, base in VANILLA.items():
        write_summary(owner, "vanilla", seed, base, grid="owner")
        write_summary(owner, "weak", seed, base + [-0.2, -0.1, -0.15][seed], grid="owner")
        for cell in ("vanilla", "weak"):
            GridDir(overlay).share(cell, seed, RunDir(owner / cell / f"seed{seed}"))
        for cell, effect in EFFECT.items():
            write_summary(overlay, cell, seed, base + effect[seed], grid="overlay")
    rows = {r["a"]: r for r in plan(overlay, 0.05)}
    assert (rows["weak"]["family_size"], rows["weak"]["level"]) == (1, family_level(1))
    assert "judged in owner" in rows["weak"]["note"]
    assert {rows[c]["family_size"] for c in ("better", "worse", "same")} == {3}


def verdict_of(metric: str, df: float | None, paper: str | None = None, verdict: str = "inconclusive") -> Verdict:
    return Verdict("g", Claim("x", "a", "b", metric, "higher", paper=paper), verdict, 0.05, -0.02, 0.12, 5,
                   design="paired", df=df, unadjusted=verdict)


def test_a_metric_not_in_nats_says_so_and_gets_no_seeds_for_an_effect_in_nats():
    saving = plan_row(verdict_of("time_to_target", None, "20.3% less data (v5)"), 4, 0.027)
    assert saving["unit"] == "fraction of tokens" and saving["mde"] is None and saving["sd"] is None
    assert saving["seeds_for_plan_effect"] is None and saving["paper_effect"] is None
    assert "its interval is no t interval" in saving["note"] and "not nats" in saving["note"]
    slope = plan_row(verdict_of("val_loss_gap_slope", 4.0, "-0.02 at 82M"), 4, 0.027)
    assert slope["mde"] is not None and slope["seeds_for_plan_effect"] is None and slope["paper_effect"] is None
    assert "nats per doubling, not nats" in slope["note"]
    loss = plan_row(verdict_of("val_loss", 4.0, TABLE5), 4, 0.027)
    assert loss["note"] == "" and loss["seeds_for_plan_effect"] is not None and loss["paper_effect"] == 0.0272
    json.dumps([saving, slope, loss])


def test_the_command_prints_the_short_answer_the_table_on_request_and_the_json(tmp_path, capsys, monkeypatch):
    """Without an option, per comparison the seeds it has and those it needs (plan's numbers), in lines that fit the
    terminal; --table every number, --json the rows; the two are one or the other."""
    grid_dir = paper_grid(tmp_path)
    rows = plan(grid_dir, 0.1)
    for columns in (80, 120):
        monkeypatch.setenv("COLUMNS", str(columns))
        main(["plan", str(grid_dir), "--effect", "0.1"])
        text = capsys.readouterr().out
        assert " ".join(text.split()).startswith("pilot: the seeds each comparison has, and those it needs for 80% "
                                                  "power to detect 0.1 nats and the paper's effect (in brackets)")
        assert max(map(len, text.splitlines())) <= columns
        assert "every number (spread, level, MDE, power, notes): --table; as data: --json" in text
    # at 120 columns each comparison is one line: its sides, metric, verdict, seeds it has, needs, needs for the paper
    shown = [line.split() for line in text.splitlines() if " − " in line]
    assert shown == [[r["a"], "−", r["b"], *([] if r["metric"] == "val_loss" else [f"({r['metric']})"]), r["verdict"],
                      str(r["n"]), str(r["seeds_for_plan_effect"]),
                      *(["–"] if r["paper_effect"] is None else [str(r["seeds_for_paper_effect"]), "(0.0272)"])]
                     for r in rows]
    main(["plan", str(grid_dir), "--effect", "0.1", "--table"])
    text = capsys.readouterr().out
    assert text.startswith("pilot: seeds for 80% power, two-sided at each comparison's Holm level ALPHA / m")
    assert "| better − vanilla | val_loss | reproduced | paired | 3 |" in text and "underpowered" in text
    main(["plan", str(grid_dir), "--effect", "0.1", "--json"])
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(rows))
    with pytest.raises(SystemExit):
        main(["plan", str(grid_dir), "--effect", "0.1", "--json", "--table"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_short_answer_counts_what_it_cannot_plan_in_nats():
    """A comparison in nats without a spread needs "–" seeds; one in another unit is counted under the table, not
    shown in it (its MDE is in --table)."""
    one_seed = plan_row(replace(verdict_of("val_loss", None, TABLE5), n=1, low=None, high=None), 4, 0.027)
    saving = plan_row(verdict_of("time_to_target", None, "20.3% less data (v5)"), 4, 0.027)
    loss = plan_row(verdict_of("val_loss/code", 4.0), 4, 0.027)
    text = plan_summary([one_seed, saving, loss], 0.027, "g", 80)
    shown = [line.split() for line in text.splitlines() if " − " in line]
    assert shown == [["a", "−", "b", "inconclusive", "1", "–", "–", "(0.0272)"],
                     ["a", "−", "b", "(val_loss/code)", "inconclusive", "5", str(loss["seeds_for_plan_effect"]), "–"]]
    assert max(map(len, text.splitlines())) <= 80
    words = " ".join(text.split())
    assert "–: no spread to plan from (fewer than 2 seeds, or no t interval)" in words
    assert "1 more comparison is measured in another unit than nats: no seeds for an effect in nats" in words
    assert plan_summary([], 0.027, "g", 80) == "g: no comparisons to plan (its grid file declares no claims)\n"


@pytest.mark.parametrize("argv, message", [
    (["--effect", "0"], "--effect must be a positive number of nats, got 0"),
    (["--effect", "-0.02"], "--effect must be a positive number of nats, got -0.02"),
    (["--effect", "nan"], "--effect must be a positive number of nats, got nan"),
    (["--effect", "inf"], "--effect must be a positive number of nats, got inf"),
])
def test_a_bad_effect_is_refused_in_one_line(tmp_path, argv, message):
    with pytest.raises(SystemExit) as refused:
        main(["plan", str(tmp_path), *argv])
    assert str(refused.value.code) == f"lit-resformer plan: error: {message}"


def test_a_folder_that_is_no_grid_is_refused_in_one_line(tmp_path):
    with pytest.raises(SystemExit) as refused:
        main(["plan", str(tmp_path / "missing"), "--effect", "0.03"])
    assert str(refused.value.code) == (f"lit-resformer plan: error: {tmp_path / 'missing'}: no such folder (a grid's run "
                                       "directory, e.g. docs/results/fig7-evidence)")
    paper_grid(tmp_path)
    with pytest.raises(SystemExit) as refused:
        main(["plan", str(tmp_path / "runs"), "--effect", "0.03"])
    assert str(refused.value.code) == (f"lit-resformer plan: error: {tmp_path / 'runs'} is not a grid run directory "
                                       "(no grid.yaml); grids under it: pilot")


def test_bad_input_is_refused_before_the_statistics_are_imported(tmp_path):
    """The checks run before the grids package, the verdicts and statsmodels are imported (they take seconds)."""
    script = ("import sys\nfrom lit_resformer.cli import main\n"
              f"try:\n    main(['plan', {str(tmp_path)!r}, '--effect', '0.03'])\n"
              "except SystemExit as refused:\n    print(refused.code)\n"
              "print(sorted(m for m in sys.modules if m.startswith(('lit_resformer.grids', 'lit_resformer.verdicts', "
              "'lit_resformer.measures', 'statsmodels'))))")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert shown.stdout.splitlines() == [f"lit-resformer plan: error: {tmp_path} is not a grid run directory (no "
                                         "grid.yaml)", "[]"]
