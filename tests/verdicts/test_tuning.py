"""Claims at the points a grid's select block chose, judged on the confirmation seeds only, and the two-sided
dependence of a gap on a matrix key."""

import math

import pytest

from lit_resformer.runs.claim_spec import Claim
from lit_resformer.runs.results import load_results
from lit_resformer.verdicts.tuning import chosen_points
from tests.helpers.claims_grids import judged, write_summary
from tests.helpers.select_grids import (
    LRS,
    PILOT,
    as_lucky_on_fresh_seeds,
    name,
    surface,
    surface_loss,
    surface_manifest,
    tuned_grid,
    tuned_manifest,
)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return tuned_manifest(tmp_path_factory.mktemp("tuned"))


def test_each_arm_is_compared_at_its_own_best_on_the_confirmation_seeds_only(tmp_path, manifest):
    results = tuned_grid(tmp_path, manifest, {name("vanilla", 1e-3): 4.60, name("resformer", 2e-3): 4.50,
                                    name("resformer", 1e-3): 4.56})
    selection, best, missing = chosen_points(results)
    assert best == {"vanilla": 1e-3, "resformer": 2e-3} and missing == {}
    claim = Claim("tuned", "resformer", "vanilla", "val_loss_each_at_best", "lower")
    verdict = judged(claim, results)
    # the confirmation seeds' mean difference (the pilot's -0.4 at these points is not in it)
    assert verdict.delta == pytest.approx(-0.10 + 0.004 * 3) and verdict.n == 3 and verdict.design == "paired"
    assert verdict.unadjusted == "reproduced"
    assert "resformer,lr=0.002 vs vanilla,lr=0.001" in verdict.note and "confirmation seeds [2, 3, 4]" in verdict.note
    at_vanillas = judged(Claim("at vanilla's", "resformer", "vanilla", "val_loss_at_b_best", "lower"), results)
    assert at_vanillas.delta == pytest.approx(-0.04 + 0.004 * 3)
    assert "resformer,lr=0.001 vs vanilla,lr=0.001" in at_vanillas.note


def test_an_unchosen_or_unbracketed_point_leaves_the_claim_not_tested(tmp_path, manifest):
    results = tuned_grid(tmp_path / "a", manifest, {})
    (results.grid_dir.path / name("vanilla", 4e-3) / "seed1" / "summary.json").unlink()  # a pilot run unfinished
    results = load_results(results.grid_dir)
    verdict = judged(Claim("tuned", "resformer", "vanilla", "val_loss_each_at_best", "lower"), results)
    assert verdict.verdict == "not tested" and "vanilla's pilot runs are not all finished" in verdict.note
    PILOT["resformer"][4.0e-3] = 3.0  # ResFormer's best at the top of the range
    try:
        results = tuned_grid(tmp_path / "b", manifest, {})
    finally:
        PILOT["resformer"][4.0e-3] = 4.8
    verdict = judged(Claim("tuned", "resformer", "vanilla", "val_loss_each_at_best", "lower"), results)
    assert verdict.verdict == "not tested" and "resformer's best model.lr is 0.004, at an end" in verdict.note


def test_a_gap_that_grows_with_the_learning_rate_depends_on_it_either_way(tmp_path, manifest):
    results = tuned_grid(tmp_path, manifest, {})
    claim = Claim("depends", "svformer", "vanilla", "val_loss_gap_dependence", "either", over="model.lr")
    verdict = judged(claim, results)
    assert verdict.n == 2 and verdict.unadjusted == "reproduced" and verdict.delta > 0
    assert verdict.p_raw == verdict.p_two_sided
    # a flat gap is no evidence of dependence, and no evidence against it
    flat = Claim("depends", "resformer", "vanilla", "val_loss_gap_dependence", "either", over="model.lr")
    for seed in (0, 1):
        for lr in LRS:
            path = results.grid_dir.path / name("resformer", lr) / f"seed{seed}"
            for file in path.iterdir():
                file.unlink()
            path.rmdir()
            write_summary(results.grid_dir.path, name("resformer", lr), seed,
                          PILOT["vanilla"][lr] + 0.01 * seed + (0.01 if (seed + LRS.index(lr)) % 2 else -0.01))
    assert judged(flat, load_results(results.grid_dir)).unadjusted == "inconclusive"


@pytest.fixture(scope="module")
def surface_path(tmp_path_factory):
    return surface_manifest(tmp_path_factory.mktemp("surface"))


def test_each_arm_is_tuned_at_each_budget_and_compared_there_on_the_confirmation_seeds(tmp_path, surface_path):
    results = surface(tmp_path, surface_path, surface_loss)
    assert chosen_points(results, 1000)[1] == {"vanilla": 4.0e-3, "resformer": 2.0e-3}
    assert chosen_points(results, 4000)[1] == {"vanilla": 4.0e-3, "resformer": 2.0e-3}  # the pilot's lucky pick
    assert chosen_points(results, 2000)[1] == {"vanilla": 2.0e-3, "resformer": 2.0e-3}
    claims = {c.per["trainer.max_steps"]: c for c in results.claims if c.per}
    at_1000 = judged(claims[1000], results)
    assert "resformer,lr=0.002,max_steps=1000 vs vanilla,lr=0.004,max_steps=1000" in at_1000.note
    assert at_1000.n == 3 and at_1000.delta == pytest.approx(-0.045) and at_1000.unadjusted == "reproduced"
    # judged on the confirmation seeds only, where vanilla's lucky 4e-3 is 0.1 worse than its true best
    at_4000 = judged(claims[4000], results)
    assert at_4000.delta == pytest.approx(-0.05 + 0.02 * 2 - 0.1 + 0.005 + 0.004)
    assert "at trainer.max_steps=4000" in at_4000.note and "confirmation seeds [2, 3, 4]" in at_4000.note


def test_the_tuned_gaps_trend_against_the_budget_is_read_two_sided(tmp_path, surface_path):
    results = surface(tmp_path / "a", surface_path, as_lucky_on_fresh_seeds(surface_loss))
    trend = next(c for c in results.claims if c.metric == "val_loss_each_at_best_slope")
    verdict = judged(trend, results)
    assert verdict.n == 3 and verdict.delta == pytest.approx(0.022)  # 0.02 a doubling, and each seed's own
    assert verdict.unadjusted == "reproduced" and verdict.p_raw == verdict.p_two_sided
    flat = judged(trend, surface(tmp_path / "b", surface_path, as_lucky_on_fresh_seeds(
        lambda arm, lr, budget, seed: surface_loss(arm, lr, budget, seed, trend=0.0)
        + (0.02 * (seed - 3) * math.log2(budget / 1000) if arm == "resformer" else 0.0))))
    assert flat.unadjusted == "inconclusive"  # no trend: no evidence of one, and none against it
