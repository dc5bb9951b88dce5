"""Claims that a quantity does not depend on a key (direction flat), by the suite's margin rule: a ladder's data
saving constant across budgets (the per-seed slope of the saving against log2 budget) and a gap the same under two
schedules (the per-seed difference of gaps): reproduced within the margin, contradicted clear of it, inconclusive
when the interval reaches into it."""

import math

import pytest

from tests.helpers.claims_grids import judged
from tests.helpers.select_grids import (
    BUDGETS,
    SAVING_CLAIM,
    SCHEDULE_CLAIM,
    ladder,
    ladder_manifest,
    schedule,
    schedule_manifest,
)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return ladder_manifest(tmp_path_factory.mktemp("ladder"))


def test_a_constant_multiplier_reproduces_a_constant_saving(tmp_path, manifest):
    # 25% more data at every budget, with seed-to-seed noise that has no trend
    noise = {(b, s): 0.02 * ((i + s) % 3 - 1) for i, b in enumerate(BUDGETS) for s in range(3)}
    verdict = judged(SAVING_CLAIM, ladder(tmp_path, manifest, lambda budget, seed: 1.25 + noise[budget, seed]))
    assert verdict.n == 3 and abs(verdict.delta) < 0.01
    assert verdict.unadjusted == "reproduced" and "within the margin ±0.05" in verdict.note
    assert verdict.p_two_sided < 0.05  # the two one-sided tests' p, which the grid's Holm adjustment sees
    assert "saving(s) need vanilla's losses extended beyond its rungs" in verdict.note  # the top rung's B' > 8000


def test_a_saving_that_shrinks_with_the_budget_contradicts_it(tmp_path, manifest):
    verdict = judged(SAVING_CLAIM, ladder(tmp_path, manifest,
                                         lambda budget, seed: 1.6 - 0.25 * math.log2(budget / 1000) + 0.01 * seed))
    assert verdict.unadjusted == "contradicted" and verdict.delta < 0 and verdict.high < 0


def test_a_trend_whose_interval_reaches_into_the_margin_is_inconclusive(tmp_path, manifest):
    """The suite's rule as written: an interval neither inside the margin nor clear of it decides nothing (the
    ladder's own slope, -8.5 points [-12.4, -4.6] against a margin of 5, is such a case)."""
    slopes = {0: -0.06, 1: -0.10, 2: -0.08}  # the saving falls 8 points a doubling, give or take 2
    verdict = judged(SAVING_CLAIM, ladder(tmp_path, manifest, lambda budget, seed: 1 / (
        1 - 0.4 - slopes[seed] * math.log2(budget / 1000))))
    assert verdict.delta == pytest.approx(-0.08, abs=0.005)
    assert verdict.low < -0.05 < verdict.high < 0  # excludes zero, reaches into the margin
    assert verdict.unadjusted == "inconclusive" and "reaches into the margin ±0.05" in verdict.note


@pytest.fixture(scope="module")
def schedules(tmp_path_factory):
    return schedule_manifest(tmp_path_factory.mktemp("schedule"))


@pytest.mark.parametrize(("cosine_gap", "decided"), [
    ([-0.05, -0.04, -0.06, -0.05, -0.045], "reproduced"),  # the same gap under both schedules
    ([0.03, 0.04, 0.02, 0.05, 0.035], "contradicted"),  # 0.085 worse under cosine: clear of 0.027
    ([-0.03, 0.0, -0.05, 0.02, -0.01], "inconclusive"),  # +0.036 [-0.001, +0.073]: reaches into the margin
])
def test_a_gap_the_same_under_two_schedules_is_judged_by_the_margin(tmp_path, schedules, cosine_gap, decided):
    verdict = judged(SCHEDULE_CLAIM, schedule(tmp_path, schedules, cosine_gap))
    assert verdict.n == 5 and verdict.delta == pytest.approx(sum(cosine_gap) / 5 + 0.05)
    assert verdict.unadjusted == decided
    assert "minus the gap at model.schedule=wsd" in verdict.note
