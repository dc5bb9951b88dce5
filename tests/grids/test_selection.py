"""A grid's `select:` block: each arm's best point chosen from its finished pilot runs, the bracket check, and the
runs the runner adds at the chosen points (confirmation seeds, at_best cells), named and resolved like any cell's."""

import io
import json
import math

import numpy as np
import pytest
import yaml
from scipy import stats

from lit_resformer.grids import GridError, GridOptions, load_grid, run_grid
from lit_resformer.grids.selection import BracketError, Selection, SelectionError, best_point, parse_selection
from lit_resformer.measures.stats import paired_t
from lit_resformer.runs.directory import GridDir

BASE = {
    "seed_everything": 0,
    "trainer": {"max_steps": 20, "val_check_interval": 10, "precision": "32-true"},
    "model": {"config": {"size": "tiny"}, "lr": 2.0e-3, "warmup_steps": 4},
    "data": {"seq_len": 64, "micro_batch_size": 2},
}
LRS = [5.0e-4, 1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3]
SELECT = {
    "over": "model.lr",
    "arms": ["vanilla", "resformer", "svformer"],
    "seeds": [2, 3],
    "confirm": {"vanilla": ["best", 2.0e-3], "resformer": ["best", "best:vanilla", 2.0e-3]},
    "at_best": {"of": "vanilla", "cells": ["vanilla", "svformer"], "matrix": {"model.warmup_steps": [2, 8]},
                "seeds": [0, 1, 2]},
}
GRID = {
    "name": "sweep",
    "baseline": "vanilla",
    "seeds": [0, 1],
    "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"},
              "svformer": {"model.config.share.svformer": True}},
    "matrix": {"model.lr": LRS},
    "select": SELECT,
    "claims": [
        {"claim": "tuned", "a": "resformer", "b": "vanilla", "metric": "val_loss_each_at_best", "direction": "lower"},
        {"claim": "at vanilla's", "a": "resformer", "b": "vanilla", "metric": "val_loss_at_b_best",
         "direction": "lower"},
        {"claim": "lr", "a": "svformer", "b": "vanilla", "metric": "val_loss_gap_dependence", "over": "model.lr",
         "direction": "either"},
        {"claim": "warm-up", "a": "svformer", "b": "vanilla", "metric": "val_loss_gap_dependence",
         "over": "model.warmup_steps", "direction": "either"},
    ],
}


def selection(**changes) -> Selection:
    raw = {**SELECT, **changes}
    return parse_selection(raw, ["vanilla", "resformer", "svformer"], [{"model.lr": lr} for lr in LRS], [0, 1], [],
                           "g.yaml")


def write_grid(tmp_path, grid: dict) -> object:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"base": "base.yaml", **grid}, sort_keys=False))
    return path


def finished(grid_dir, cell: str, seed: int, loss: float | None, status: str = "done") -> None:
    """A pilot run's summary as the runner writes it when training ends."""
    run = GridDir(grid_dir).run_dir(cell, seed)
    run.path.mkdir(parents=True, exist_ok=True)
    (run.path / "summary.json").write_text(json.dumps({"status": status, "final_val_loss": loss}))


def test_the_best_point_is_the_lowest_mean_over_the_pilot_seeds():
    sel = selection()
    finals = {lr: {0: 5.0, 1: 5.0} for lr in LRS}
    finals[1.0e-3] = {0: 4.50, 1: 4.70}  # mean 4.60
    finals[4.0e-3] = {0: 4.40, 1: 4.90}  # mean 4.65: the better seed alone would pick it
    assert best_point(sel, "vanilla", finals) == 1.0e-3


def test_no_choice_while_a_pilot_run_is_unfinished():
    finals = {lr: {0: 5.0, 1: 5.0} for lr in LRS}
    finals[2.0e-3] = {0: 4.0, 1: 4.1}
    del finals[8.0e-3][1]
    assert best_point(selection(), "vanilla", finals) is None


def test_a_diverged_run_ranks_its_point_last():
    finals = {lr: {0: 5.0, 1: 5.0} for lr in LRS}
    finals[4.0e-3] = {0: 3.0, 1: None}  # one seed diverged: worse than any finished point
    finals[2.0e-3] = {0: 4.9, 1: 4.9}
    assert best_point(selection(), "vanilla", finals) == 2.0e-3


@pytest.mark.parametrize("end", [LRS[0], LRS[-1]])
def test_the_bracket_check_names_the_arm_and_its_best_rate(end):
    finals = {lr: {0: 5.0, 1: 5.0} for lr in LRS}
    finals[end] = {0: 4.0, 1: 4.0}
    with pytest.raises(BracketError, match=rf"resformer's best model.lr is {end:g}, at an end"):
        best_point(selection(), "resformer", finals)


def test_the_arms_compared_on_fresh_seeds_at_their_chosen_rates_are_covered_and_on_the_pilot_seeds_are_not():
    """The module's promise, simulated: vanilla with a sharp optimum, ResFormer with a flat one (its rates within
    noise of each other, as on transfer-lr-sweep), each run's loss its rate's truth plus its seed's data order (shared
    by every run of the seed) plus its own luck. best_point chooses each arm's rate on two pilot seeds; five fresh
    seeds' paired interval covers the true gap at the chosen rates at its nominal 95% and is unbiased, while the gap
    read on the pilot seeds that chose is biased in favour of the flatter arm, which picks its luckiest rate."""
    rng, replicates, confirmation_seeds = np.random.default_rng(74), 2000, 5
    sel, log2_rates = selection(), np.log2(LRS)
    truth = {"vanilla": 3.41 + 0.08 * (log2_rates - math.log2(2.0e-3)) ** 2,
             "resformer": 3.40 + 0.004 * (log2_rates - math.log2(2.0e-3)) ** 2}

    def losses(arm, seeds_order):  # (rate, seed): truth + the seed's data order + each run's own luck
        return truth[arm][:, None] + seeds_order[None, :] + rng.normal(0, 0.02, (len(LRS), seeds_order.size))

    true_gap, pilot_gap, fresh = [], [], {"resformer": [], "vanilla": []}
    for _ in range(replicates):
        pilot_order, fresh_order = rng.normal(0, 0.03, 2), rng.normal(0, 0.03, confirmation_seeds)
        pilot = {arm: losses(arm, pilot_order) for arm in truth}
        try:
            chosen = {arm: LRS.index(best_point(sel, arm, {lr: {s: float(pilot[arm][i, s]) for s in (0, 1)}
                                                             for i, lr in enumerate(LRS)})) for arm in truth}
        except BracketError:  # the real grid stops here until its range is widened: nothing is compared
            continue
        true_gap.append(truth["resformer"][chosen["resformer"]] - truth["vanilla"][chosen["vanilla"]])
        pilot_gap.append((pilot["resformer"][chosen["resformer"]] - pilot["vanilla"][chosen["vanilla"]]).mean())
        for arm in truth:
            fresh[arm].append(losses(arm, fresh_order)[chosen[arm]])
    true_gap, pilot_gap = np.array(true_gap), np.array(pilot_gap)
    assert true_gap.size > replicates // 2

    test = paired_t(np.array(fresh["resformer"]), np.array(fresh["vanilla"]), "two-sided", 0.95)
    covered = (test.low <= true_gap) & (true_gap <= test.high)
    p = stats.binomtest(int(covered.sum()), covered.size, 0.95).pvalue
    assert p > 1e-3, f"fresh seeds covered {covered.mean():.3f} of the true gaps at the chosen rates"
    for estimate, biased in ((test.estimate, False), (pilot_gap, True)):
        error = estimate - true_gap
        z = error.mean() / (error.std(ddof=1) / math.sqrt(error.size))
        assert (z < -4) if biased else (abs(z) < 4), f"mean error {error.mean():+.4f} (z {z:+.1f})"


@pytest.mark.parametrize(("changes", "message"), [
    ({"over": "model.warmup_steps"}, "select.over must name a matrix key"),
    ({"arms": ["vanilla", "gqa"]}, "select.arms must be a list of distinct `cells` entries"),
    ({"seeds": [1, 2]}, r"select.seeds: \[1\] are pilot seeds"),
    ({"confirm": {"vanilla": [3.0e-3]}}, "is not 'best', 'best:<arm>' or a swept value"),
    ({"confirm": {"vanilla": ["best:gqa"]}}, "'best:gqa' names no arm"),
    ({"at_best": {**SELECT["at_best"], "matrix": {"model.lr": [1]}}}, "select.at_best.matrix must be"),
    ({"at_best": {**SELECT["at_best"], "of": "gqa"}}, "select.at_best.of must be one of the arms"),
])
def test_a_malformed_select_block_is_refused_naming_the_field(changes, message):
    with pytest.raises(SelectionError, match=message):
        selection(**changes)


def test_a_grid_with_a_select_block_loads_its_pilot_and_checks_its_claims(tmp_path):
    grid = load_grid(write_grid(tmp_path, GRID))
    assert len(grid.runs()) == 30  # 3 arms x 5 rates x 2 pilot seeds
    assert grid.pilot_cells("svformer")[2.0e-3] == "svformer,lr=0.002"
    assert grid.manifest()["select"]["seeds"] == [2, 3]
    # a claim at chosen points needs its arms there on the confirmation seeds
    no_confirm = {**GRID, "select": {**SELECT, "confirm": {"vanilla": ["best"], "resformer": ["best"]}}}
    with pytest.raises(GridError, match=r"needs resformer at 'best:vanilla'.*select.confirm.resformer"):
        load_grid(write_grid(tmp_path, no_confirm))


def test_a_call_that_trains_some_pilot_seeds_chooses_on_all_of_them(tmp_path):
    """`--seeds 0` (scripts/grid-by-seed.sh's one seed a call) trains seed 0's pilot runs only, but the rates are
    chosen on the file's pilot seeds: seed 0 finished everywhere chooses nothing and launches no confirmation run."""
    grid = load_grid(write_grid(tmp_path, GRID), seeds=[0])
    assert len(grid.runs()) == 15 and grid.selection.pilot_seeds == (0, 1)
    grid_dir = tmp_path / "runs" / "sweep"
    for arm in ("vanilla", "resformer", "svformer"):
        for lr, cell in grid.pilot_cells(arm).items():
            finished(grid_dir, cell, 0, 4.0 + lr)
    chosen, best, waiting = chosen_runs(grid, grid_dir)
    # only the fixed 2e-3 confirmation points, which wait for no choice
    assert not best and waiting and {run.cell for run in chosen} == {"vanilla,lr=0.002", "resformer,lr=0.002"}


def chosen_runs(grid, grid_dir):
    """What the runner's round adds: the select block's choice from the folder's finished pilot runs, as runs."""
    try:
        choice = grid.selection.choose(GridDir(grid_dir).survey(grid.run_keys).finals)
    except SelectionError as e:
        raise GridError(f"{grid.path}: select: {e}") from None
    return grid.chosen_runs(choice), choice.best, choice.waiting


def test_the_runner_adds_the_chosen_runs_once_the_pilot_is_finished(tmp_path):
    grid = load_grid(write_grid(tmp_path, GRID))
    grid_dir = tmp_path / "runs" / "sweep"
    chosen, best, waiting = chosen_runs(grid, grid_dir)
    # nothing chosen yet: only the fixed shared rate trains the confirmation seeds
    assert best == {} and {r.name for r in chosen} == {f"sweep/{arm},lr=0.002/seed{s}" for arm in ("vanilla", "resformer")
                                                        for s in (2, 3)}
    assert any("vanilla's best model.lr: waits for its pilot runs (0 of 10 finished)" in line for line in waiting)
    bests = {"vanilla": 1.0e-3, "resformer": 4.0e-3, "svformer": 2.0e-3}
    for arm, chosen_lr in bests.items():
        for lr, cell in grid.pilot_cells(arm).items():
            for seed in (0, 1):
                finished(grid_dir, cell, seed, 4.0 if lr == chosen_lr else 5.0 + lr)
    chosen, best, waiting = chosen_runs(grid, grid_dir)
    assert best == bests and waiting == []
    names = [r.name for r in chosen]
    confirm = [f"sweep/{cell}/seed{s}" for cell in ("vanilla,lr=0.001", "vanilla,lr=0.002", "resformer,lr=0.004",
                                                     "resformer,lr=0.001", "resformer,lr=0.002") for s in (2, 3)]
    at_best = [f"sweep/{family},lr=0.001,warmup_steps={w}/seed{s}" for family in ("vanilla", "svformer")
               for w in (2, 8) for s in (0, 1, 2)]
    assert names == confirm + at_best
    by_name = {r.name: r for r in chosen}
    warmup = by_name["sweep/svformer,lr=0.001,warmup_steps=8/seed2"].config["model"]
    assert math.isclose(warmup["lr"], 1.0e-3) and warmup["warmup_steps"] == 8
    assert warmup["config"]["share"] == {"svformer": True}
    cell = next(c for c in grid.cells if c.name == "svformer,lr=0.001,warmup_steps=8")
    assert (cell.family, cell.coords, cell.at, cell.baseline) == (
        "svformer", {"model.warmup_steps": 8}, {"model.lr": 1.0e-3}, "vanilla,lr=0.001,warmup_steps=8")
    # choosing again adds nothing new
    assert [r.name for r in chosen_runs(grid, grid_dir)[0]] == names


def test_a_pilot_whose_best_is_at_an_end_fails_the_grid(tmp_path):
    grid = load_grid(write_grid(tmp_path, GRID))
    grid_dir = tmp_path / "runs" / "sweep"
    for lr, cell in grid.pilot_cells("svformer").items():
        for seed in (0, 1):
            finished(grid_dir, cell, seed, 5.0 - lr)  # the highest rate is best
    with pytest.raises(GridError, match="svformer's best model.lr is 0.008, at an end of the swept range"):
        chosen_runs(grid, grid_dir)


def test_dry_run_lists_the_pilot_and_what_waits(tmp_path):
    out = io.StringIO()
    run_grid(load_grid(write_grid(tmp_path, GRID)), GridOptions(runs_dir=tmp_path / "runs", dry_run=True), progress=False,
             out=out)
    text = out.getvalue()
    assert "15 cells x 2 seeds = 30 runs, 4 more from its select block so far" in text
    assert "sweep/svformer,lr=0.008/seed1" in text and "sweep/vanilla,lr=0.002/seed3" in text
    assert "waiting: vanilla, svformer at vanilla's best model.lr x model.warmup_steps" in text
    assert "dry run: 34 of 34 runs would start" in text
    assert not (tmp_path / "runs").exists()


def test_an_at_best_cell_is_checked_at_load_at_every_value_its_arm_may_choose(tmp_path):
    """A grid is refused before any run starts, not once the pilot has chosen the point a bad at_best cell trains at."""
    bad = {**SELECT, "at_best": {**SELECT["at_best"], "matrix": {"model.warmup_steps": [2, "many"]}}}
    with pytest.raises(GridError, match=r"cell 'vanilla,lr=0.0005,warmup_steps=many'.*model.warmup_steps"):
        load_grid(write_grid(tmp_path, {**GRID, "select": bad}))


SURFACE = {  # a ladder at three peak rates per arm, each arm's rate chosen at each budget apart
    "name": "surface",
    "baseline": "vanilla",
    "seeds": [0, 1],
    "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}},
    "matrix": {"model.lr": [1.0e-3, 2.0e-3, 4.0e-3]},
    "ladder": {"budgets": [10, 20, 30], "decay_fraction": 0.2},
    "select": {"over": "model.lr", "per": "trainer.max_steps", "arms": ["vanilla", "resformer"], "seeds": [2, 3],
               "confirm": {"vanilla": ["best"], "resformer": ["best"]}},
    "claims": [{"claim": "tuned at each budget", "a": "resformer", "b": "vanilla", "metric": "val_loss_each_at_best",
                "direction": "lower"}],
}


def test_a_ladders_rate_is_chosen_at_each_budget_and_confirmed_on_its_rung_and_trunk(tmp_path):
    grid = load_grid(write_grid(tmp_path, SURFACE))
    assert len(grid.runs()) == 2 * 3 * (1 + 3) * 2  # arms x rates x (trunk + rungs) x pilot seeds
    assert grid.pilot_cells("resformer", 20) == {lr: f"resformer,lr={lr},max_steps=20" for lr in (0.001, 0.002, 0.004)}
    assert grid.manifest()["select"]["per"] == "trainer.max_steps"
    # the claim at chosen points holds at each budget, one comparison each
    assert [(c["claim"], c["per"]) for c in grid.claims] == [
        (f"tuned at each budget [max_steps={b}]", {"trainer.max_steps": b}) for b in (10, 20, 30)]
    assert Selection.from_dict(grid.manifest()["select"]).per_values == (10, 20, 30)
    grid_dir = tmp_path / "runs" / "surface"
    # vanilla is best at 2e-3 at every budget; resformer at 2e-3 at budgets 10 and 20, its rungs at 30 not finished
    best_at = {("vanilla", b): 2.0e-3 for b in (10, 20, 30)} | {("resformer", 10): 2.0e-3, ("resformer", 20): 2.0e-3}
    for arm in ("vanilla", "resformer"):
        for budget in (10, 20):
            for lr, cell in grid.pilot_cells(arm, budget).items():
                for seed in (0, 1):
                    finished(grid_dir, cell, seed, 4.0 if lr == best_at[arm, budget] else 5.0 + lr)
    for lr, cell in grid.pilot_cells("vanilla", 30).items():
        for seed in (0, 1):
            finished(grid_dir, cell, seed, 4.0 if lr == 2.0e-3 else 5.0)
    chosen, best, waiting = chosen_runs(grid, grid_dir)
    assert best == {"vanilla": {10: 2.0e-3, 20: 2.0e-3, 30: 2.0e-3}, "resformer": {10: 2.0e-3, 20: 2.0e-3}}
    assert waiting == ["at trainer.max_steps=30: resformer's best model.lr: waits for its pilot runs (0 of 6 finished)",
                       "at trainer.max_steps=30: resformer at best: confirmation seeds [2, 3] wait for resformer's best"]
    names = [r.name for r in chosen]
    # each chosen rung trains the confirmation seeds after its trunk, the trunk once
    assert names == [f"surface/{cell}/seed{s}" for cell in (
        "vanilla,lr=0.002,trunk", "vanilla,lr=0.002,max_steps=10", "resformer,lr=0.002,trunk",
        "resformer,lr=0.002,max_steps=10", "vanilla,lr=0.002,max_steps=20", "resformer,lr=0.002,max_steps=20",
        "vanilla,lr=0.002,max_steps=30") for s in (2, 3)]
    # a best rate at an end of the range at any budget fails the grid, naming the budget
    for lr, cell in grid.pilot_cells("resformer", 30).items():
        for seed in (0, 1):
            finished(grid_dir, cell, seed, 5.0 - 100 * lr)  # the highest rate is best
    with pytest.raises(GridError, match=r"at trainer.max_steps=30: resformer's best model.lr is 0.004, at an end"):
        chosen_runs(grid, grid_dir)
