"""A ladder's claim that a's data saving is constant across budgets: contradicted by a trend, reproduced within its
margin, judged on the per-seed slope of the saving against log2 budget."""

import math

import pytest

from tests.helpers.claims_grids import judged
from tests.helpers.select_grids import BUDGETS, SAVING_CLAIM, ladder, ladder_manifest


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return ladder_manifest(tmp_path_factory.mktemp("ladder"))


def test_a_constant_multiplier_reproduces_a_constant_saving(tmp_path, manifest):
    # 25% more data at every budget, with seed-to-seed noise that has no trend
    noise = {(b, s): 0.02 * ((i + s) % 3 - 1) for i, b in enumerate(BUDGETS) for s in range(3)}
    verdict = judged(SAVING_CLAIM, ladder(tmp_path, manifest, lambda budget, seed: 1.25 + noise[budget, seed]))
    assert verdict.n == 3 and abs(verdict.delta) < 0.01
    assert verdict.unadjusted == "reproduced" and "within the margin +-0.05" in verdict.note
    assert verdict.p_two_sided < 0.05  # the two one-sided tests' p, which the grid's Holm adjustment sees
    assert "saving(s) need vanilla's losses extended beyond its rungs" in verdict.note  # the top rung's B' > 8000


def test_a_saving_that_shrinks_with_the_budget_contradicts_it(tmp_path, manifest):
    verdict = judged(SAVING_CLAIM, ladder(tmp_path, manifest,
                                         lambda budget, seed: 1.6 - 0.1 * math.log2(budget / 1000) + 0.01 * seed))
    assert verdict.unadjusted == "contradicted" and verdict.delta < 0 and verdict.high < 0
