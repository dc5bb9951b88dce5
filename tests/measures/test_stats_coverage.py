"""The seed statistics mean what they say: simulated grids with a known effect and seed noise, drawn thousands of
times, are covered by the 95% intervals at their nominal rate (paired, unpaired, one- and two-sided, per-seed
scaling savings); p-values agree with the intervals; Holm and Benjamini-Hochberg match hand-computed values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lit_resformer.measures.scaling import PowerLaw, equivalence_saving, fit_power_law
from lit_resformer.measures.stats import (
    benjamini_yekutieli,
    change_between,
    compare_seeds,
    holm,
    paired_t,
    per_seed_t,
    run_data_seed,
    search_crossing,
    seed_design,
    welch_t,
)

REPLICATES = 2000
LEVEL = 0.95
EFFECT = -0.3  # cell - baseline, nats: the truth every interval must cover
# A check fails only when its coverage is this improbable under the nominal rate (binomial): with a fixed RNG seed
# the test is deterministic, and a correct interval sits far from the threshold.
IMPLAUSIBLE = 1e-3


def _covers(test, truth: float) -> np.ndarray:
    if test.alternative == "less":
        return truth <= test.high
    if test.alternative == "greater":
        return test.low <= truth
    return (test.low <= truth) & (truth <= test.high)


def _assert_nominal(covered: np.ndarray, what: str, conservative: bool = False) -> None:
    """Coverage consistent with LEVEL (binomial test); a conservative interval only has to reach LEVEL."""
    k, n = int(covered.sum()), covered.size
    alternative = "less" if conservative else "two-sided"
    p = stats.binomtest(k, n, LEVEL, alternative=alternative).pvalue
    assert p > IMPLAUSIBLE, f"{what}: covered {k / n:.3f} of {n}, nominal {LEVEL} (binomial p = {p:.1e})"
    if conservative:  # valid, but not so wide that it never decides
        assert k / n < 0.99, f"{what}: covered {k / n:.3f}, uselessly wide"


def _assert_p_matches_interval(test) -> None:
    """p < 1 - level exactly when the interval leaves out zero."""
    assert np.array_equal(test.p < 1 - LEVEL, ~_covers(test, 0.0))


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_paired_interval_covers_the_effect_when_seeds_share_the_data_order(n, alternative):
    rng = np.random.default_rng(n)
    # seed s of both cells trains on data order s: that noise is shared and the larger part; the initialisation
    # noise is each run's own, and larger for the baseline (as vanilla's in the demo grid)
    data_order = rng.normal(0, 0.1, (REPLICATES, n))
    baseline = 5.5 + data_order + rng.normal(0, 0.06, (REPLICATES, n))
    cell = 5.5 + EFFECT + data_order + rng.normal(0, 0.03, (REPLICATES, n))
    assert seed_design({s: s for s in range(n)}, {s: s for s in range(n)}) == "paired"
    test = paired_t(cell, baseline, alternative, LEVEL)
    assert test.design == "paired" and test.n == n and test.estimate.shape == (REPLICATES,)
    _assert_nominal(_covers(test, EFFECT), f"paired {alternative}, n={n}")
    _assert_p_matches_interval(test)


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("alternative", ["two-sided", "less"])
def test_unpaired_interval_covers_the_effect_when_every_run_has_its_own_data_order(n, alternative):
    rng = np.random.default_rng(10 + n)
    baseline = 5.5 + rng.normal(0, 0.1, (REPLICATES, n))  # data order and initialisation: independent per run
    cell = 5.5 + EFFECT + rng.normal(0, 0.04, (REPLICATES, n))
    assert seed_design({s: 100 + s for s in range(n)}, {s: 200 + s for s in range(n)}) == "unpaired"
    test = welch_t(cell, baseline, alternative, LEVEL)
    assert test.design == "unpaired" and test.n == n
    # Welch's interval is exact only asymptotically; with few seeds a side it covers at least its nominal rate
    _assert_nominal(_covers(test, EFFECT), f"Welch {alternative}, n={n}", conservative=n < 5)
    _assert_p_matches_interval(test)


@pytest.mark.parametrize("seeds", [2, 3])
def test_per_seed_scaling_saving_covers_the_true_saving(seeds):
    """L(N) = E + A N^-alpha for the baseline and a variant with a smaller A; each seed's ladder is fitted with the
    report's own fit, the saving at the largest size taken per seed, and a t interval drawn over the seeds."""
    rng = np.random.default_rng(seeds)
    replicates = 600  # each replicate costs 2 x seeds curve fits (about 1 ms each)
    sizes = np.array([1e5, 2e5, 4e5, 8e5, 1.6e6])
    baseline_law = PowerLaw(E=2.0, a=3.0, alpha=0.3, x_ref=1e5)
    variant_law = PowerLaw(E=2.0, a=2.7, alpha=0.3, x_ref=1e5)
    truth = float(equivalence_saving(baseline_law, variant_law, sizes[-1]))
    assert truth == pytest.approx(1 - 0.9 ** (1 / 0.3))

    savings = np.empty((replicates, seeds))
    for r in range(replicates):
        for s in range(seeds):
            data_order = rng.normal(0, 0.02, len(sizes))  # seed s at one size: the same order for both variants
            fits = [fit_power_law(sizes, law(sizes) + data_order + rng.normal(0, 0.02, len(sizes)))[0]
                    for law in (baseline_law, variant_law)]
            savings[r, s] = equivalence_saving(*fits, sizes[-1])
    test = per_seed_t(savings, "two-sided", LEVEL)
    assert test.design == "per-seed" and test.n == seeds
    covered = np.where(np.isfinite(test.low) & np.isfinite(test.high), _covers(test, truth), False)
    _assert_nominal(covered, f"per-seed saving, {seeds} seeds")


def test_intervals_agree_with_the_audited_demo_grid():
    """demo, final validation loss per seed: the paired interval an independent audit computed, and the unpaired
    standard error it quoted (0.059 against the paired 0.073)."""
    vanilla = {0: 5.645017, 1: 5.545, 2: 5.450}
    resformer = {0: 4.987, 1: 5.019, 2: 5.046}
    paired = compare_seeds(resformer, vanilla, "paired")
    assert (paired.estimate, paired.low, paired.high) == pytest.approx((-0.5290, -0.8449, -0.2132), abs=2e-3)
    differences = np.array([resformer[s] - vanilla[s] for s in range(3)])
    t_statistic = differences.mean() / (differences.std(ddof=1) / np.sqrt(3))
    assert paired.df == 2 and paired.p == pytest.approx(2 * stats.t.sf(abs(t_statistic), df=2))
    unpaired = compare_seeds(resformer, vanilla, "unpaired")
    assert unpaired.estimate == pytest.approx(paired.estimate)
    standard_error = (unpaired.high - unpaired.low) / 2 / stats.t.ppf(0.975, unpaired.df)
    assert standard_error == pytest.approx(0.059, abs=1e-3) and 2 < unpaired.df < 4
    one_sided = compare_seeds(resformer, vanilla, "unpaired", alternative="less")
    assert one_sided.low == -np.inf and one_sided.p == pytest.approx(unpaired.p / 2)
    # a lone seed has an estimate and no interval
    lone = compare_seeds({0: 1.0}, {0: 2.0, 1: 2.5}, "paired")
    assert (lone.n, lone.estimate, lone.low, lone.p) == (1, -1.0, None, None)
    with pytest.raises(ValueError, match="alternative: must be one of two-sided, less, greater"):
        paired_t([1, 2], [1, 3], alternative="lower")
    with pytest.raises(ValueError, match="design: must be 'paired' or 'unpaired'"):
        compare_seeds(vanilla, resformer, "per-seed")


def test_design_follows_whether_seeds_share_the_data_order():
    run = {"seed_everything": 3, "data": {"seed": None}}
    assert run_data_seed(run) == 3
    assert run_data_seed({**run, "data": {"seed": 0}}) == 0
    assert run_data_seed({"seed_everything": True, "data": {}}) is None
    following = {s: run_data_seed({"seed_everything": s, "data": {"seed": None}}) for s in range(3)}
    fixed = {s: run_data_seed({"seed_everything": s, "data": {"seed": 0}}) for s in range(3)}
    assert seed_design(following, following) == "paired"
    assert seed_design(fixed, fixed) == "unpaired"  # one order for all: seeds vary only the initialisation
    assert seed_design(following, fixed) == "unpaired"
    assert seed_design({0: 0}, {0: 0}) == "unpaired"  # a single pair
    assert seed_design({0: None, 1: None}, {0: None, 1: None}) == "unpaired"  # unknown orders


def test_holm_and_benjamini_yekutieli_match_hand_computed_values():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm, sorted 0.005 0.01 0.03 0.04 times 4 3 2 1 = 0.02 0.03 0.06 0.04, made non-decreasing: 0.04 -> 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH, sorted times 4/1 4/2 4/3 4/4 = 0.02 0.02 0.04 0.04, made non-increasing from the top (already so); BY is
    # that times 1 + 1/2 + 1/3 + 1/4 = 25/12
    assert benjamini_yekutieli(p) == pytest.approx([0.02 * 25 / 12, 0.04 * 25 / 12, 0.04 * 25 / 12, 0.02 * 25 / 12])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]).size == 0 and benjamini_yekutieli([]).size == 0
    with pytest.raises(ValueError, match="p-values: must be a 1-d list of numbers in"):
        holm([0.1, 1.2])


@pytest.mark.parametrize("n", [3, 5])
def test_crossing_search_trend_covers_the_mean_slope_and_the_crossing_interval_its_mean(n):
    """search_crossing's trend (the gap's slope over the last quarter, per seed, one-sided t over seeds) covers the
    seeds' mean slope at its nominal rate, with logging noise on every step; and where every seed crosses, the
    log-scale t interval of the critical step covers the seeds' geometric-mean crossing step."""
    rng = np.random.default_rng(100 + n)
    replicates, steps = 1000, np.arange(0, 1000, 10)
    # nats per 1,000 steps; the geometric mean (of 1 + step, minus one) of the steps where the seeds' lines cross zero
    true_slope, true_crossing = 0.2, 600.0
    covered_trend, covered_crossing = [], []
    for _ in range(replicates):
        slopes = rng.normal(true_slope, 0.05, n)  # each seed's own rate of closing the gap
        crossings = np.expm1(rng.normal(np.log1p(true_crossing), 0.1, n))
        curves = {seed: pd.Series(slopes[seed] / 1000 * (steps - crossings[seed]) + rng.normal(0, 0.002, steps.size),
                                  index=steps) for seed in range(n)}
        search = search_crossing(curves)
        covered_trend.append(search.trend.low <= true_slope)
        if search.crossed == n:
            _, low, high = search.crossing
            covered_crossing.append(low <= true_crossing <= high)
    _assert_nominal(np.array(covered_trend), f"trend, n={n}")
    # the measured crossing is the last zero of a noisy line: near the true one to within the noise's reach
    _assert_nominal(np.array(covered_crossing), f"critical step, n={n}")


@pytest.mark.parametrize(("n_before", "n_after", "paired_after"), [(5, 5, True), (5, 3, True), (3, 5, False)])
def test_the_change_between_two_regimes_covers_the_true_change(n_before, n_after, paired_after):
    """An effect of -0.15 in one regime (the evidence tier's runs) and -0.02 in another (other runs: independent),
    each judged by its own design: the change's interval covers the true +0.13 at the nominal rate, and its p-value
    agrees with it."""
    rng = np.random.default_rng(100 * n_before + n_after)
    shared = rng.normal(0, 0.1, (REPLICATES, n_before))
    before = paired_t(5.0 - 0.15 + shared + rng.normal(0, 0.03, (REPLICATES, n_before)),
                      5.0 + shared + rng.normal(0, 0.05, (REPLICATES, n_before)))
    if paired_after:
        shared = rng.normal(0, 0.05, (REPLICATES, n_after))
        after = paired_t(3.4 - 0.02 + shared + rng.normal(0, 0.04, (REPLICATES, n_after)),
                         3.4 + shared + rng.normal(0, 0.02, (REPLICATES, n_after)))
    else:
        after = welch_t(3.4 - 0.02 + rng.normal(0, 0.06, (REPLICATES, n_after)),
                        3.4 + rng.normal(0, 0.03, (REPLICATES, n_after)))
    change = change_between(after, before)
    assert change.estimate.shape == (REPLICATES,) and np.all(change.df >= min(before.df.min(), after.df.min()))
    _assert_nominal(_covers(change, 0.13), f"change, {n_before} -> {n_after} seeds")
    _assert_p_matches_interval(change)


def test_the_change_is_welchs_interval_of_the_two_estimates():
    """By hand: paired differences (-0.2, -0.1, -0.15) and a Welch comparison; the change's standard error is the
    two standard errors in quadrature, its degrees of freedom Welch-Satterthwaite's."""
    before = paired_t([4.4, 4.5, 4.45], [4.6, 4.6, 4.6])
    after = welch_t([3.40, 3.42, 3.38, 3.41], [3.41, 3.44, 3.43])
    se_before = np.std([-0.2, -0.1, -0.15], ddof=1) / np.sqrt(3)
    se_after = np.sqrt(np.var([3.40, 3.42, 3.38, 3.41], ddof=1) / 4 + np.var([3.41, 3.44, 3.43], ddof=1) / 3)
    se = np.hypot(se_before, se_after)
    df = se**4 / (se_before**4 / 2 + se_after**4 / after.df)
    change = change_between(after, before)
    assert change.estimate == pytest.approx(after.estimate - before.estimate)
    assert change.df == pytest.approx(df)
    assert change.high - change.estimate == pytest.approx(stats.t.ppf(0.975, df) * se)
    assert change.p == pytest.approx(2 * stats.t.sf(abs(change.estimate) / se, df))


def test_the_change_has_no_interval_where_either_regime_has_none():
    with_interval = paired_t([4.4, 4.5, 4.3], [4.6, 4.6, 4.5])
    one_seed = paired_t([4.4], [4.6])
    assert change_between(with_interval, one_seed).low is None
    assert change_between(one_seed, with_interval).estimate == pytest.approx(-0.2 - with_interval.estimate)
    one_sided = paired_t([4.4, 4.5, 4.3], [4.6, 4.6, 4.5], alternative="less")
    assert change_between(with_interval, one_sided).low is None
