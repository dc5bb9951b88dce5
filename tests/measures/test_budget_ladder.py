"""A ladder's rungs read as budgets: the budget at which b reaches a loss, a's data saving at each rung, and trends
against log2 budget."""

import math

import pytest

from lit_resformer.measures.budget_ladder import budget_for_loss, slopes, trend


def test_the_budget_for_a_loss_is_read_linearly_in_log2_budget_between_rungs():
    losses = {1000: 5.0, 2000: 4.6, 4000: 4.3}
    assert budget_for_loss(losses, 4.6) == (2000.0, False)
    assert budget_for_loss(losses, 4.8) == (pytest.approx(2 ** (math.log2(1000) + 0.5)), False)
    # beyond the rungs, along the last (first) segment, and said so
    assert budget_for_loss(losses, 4.15) == (pytest.approx(2 ** (math.log2(4000) + 0.5)), True)
    assert budget_for_loss(losses, 5.2) == (pytest.approx(2 ** (math.log2(1000) - 0.5)), True)
    assert budget_for_loss({1000: 5.0, 2000: 5.1, 4000: 4.3}, 4.6) == (None, False)  # no inverse: it does not fall


def test_a_constant_multiplier_is_a_constant_saving_with_a_flat_trend():
    # b's loss falls 0.3 nats per doubling; a reaches at every budget what b reaches with 1.25x the data: a
    # saving of 1 - 1/1.25 = 20% everywhere
    budgets = [1000, 2000, 4000, 8000]

    def b_loss(x):
        return 6.0 - 0.3 * math.log2(x / 1000)

    saving = {}
    for seed in (0, 1, 2):
        b = {x: b_loss(x) + 0.01 * seed for x in budgets}
        a = {x: b_loss(1.25 * x) + 0.01 * seed for x in budgets}
        saving[seed] = {x: 1 - x / budget_for_loss(b, a[x])[0] for x in budgets}
    assert all(v == pytest.approx(0.2) for values in saving.values() for v in values.values())
    assert all(abs(s) < 1e-9 for s in slopes(saving).values())
    line = trend(saving, budgets)
    assert line[2000].estimate == pytest.approx(0.2)


def test_a_saving_that_falls_with_the_budget_has_a_negative_slope():
    per_seed = {seed: {1000: 0.3 + e, 2000: 0.2 + e, 4000: 0.1 + e} for seed, e in enumerate((0.0, 0.01, -0.01))}
    assert all(s == pytest.approx(-0.1) for s in slopes(per_seed).values())
    line = trend(per_seed, [1000, 4000])
    assert line[1000].estimate == pytest.approx(0.3) and line[4000].estimate == pytest.approx(0.1)
