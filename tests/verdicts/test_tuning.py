"""Claims at the points a grid's select block chose, judged on the confirmation seeds only, and the two-sided
dependence of a gap on a matrix key."""

import pytest

from lit_resformer.runs.claim_spec import Claim
from lit_resformer.runs.results import load_results
from lit_resformer.verdicts.tuning import chosen_points
from tests.helpers.claims_grids import judged, write_summary
from tests.helpers.select_grids import LRS, PILOT, name, tuned_grid, tuned_manifest


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
