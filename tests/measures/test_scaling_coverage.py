"""The scaling savings' intervals mean what they say: synthetic size ladders with a known parameter saving and seed
noise, analysed end to end by lit_resformer.measures.scaling (per-seed fits, the measured-range rule, the t interval over
seeds), are covered at the nominal 95% rate within Monte-Carlo error."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from lit_resformer.measures.scaling import LadderPoint, PowerLaw, Sweep, analyse

LEVEL = 0.95
SAVING = 0.15  # the variant reaches the baseline's loss at x with (1 - SAVING) x, at every x: the truth
SIZES = np.array([1e5, 2e5, 4e5, 8e5, 1.6e6])
BASELINE = PowerLaw(E=2.0, a=3.0, alpha=0.3, x_ref=1e5)
VARIANT = PowerLaw(E=2.0, a=3.0 * (1 - SAVING) ** 0.3, alpha=0.3, x_ref=1e5)
NOISE = 0.01  # nats: each run's own deviation from its law (initialisation and data order)
IMPLAUSIBLE = 1e-3  # a check fails only when its coverage is this improbable under the nominal rate (binomial)


def _sweep(rng: np.random.Generator, seeds: int) -> Sweep:
    points = {name: [LadderPoint(name, f"n{i}", f"{name},n{i}", {"total": float(x)},
                                 {s: float(law(x) + NOISE * rng.standard_normal()) for s in range(seeds)})
                     for i, x in enumerate(SIZES)]
              for name, law in (("vanilla", BASELINE), ("resformer", VARIANT))}
    return Sweep("coverage", "params", "val", "vanilla", points)


def _assert_nominal(covered: list[bool], what: str) -> None:
    k, n = sum(covered), len(covered)
    p = stats.binomtest(k, n, LEVEL).pvalue
    assert p > IMPLAUSIBLE, f"{what}: covered {k / n:.3f} of {n}, nominal {LEVEL} (binomial p = {p:.1e})"


@pytest.mark.integration
@pytest.mark.parametrize("seeds", [2, 3])
def test_per_seed_t_intervals_of_the_savings_cover_the_true_saving(seeds):
    rng = np.random.default_rng(100 + seeds)
    replicates = 400
    mean_covered, largest_covered = [], []
    for _ in range(replicates):
        saving = analyse(_sweep(rng, seeds), level=LEVEL)["savings"]["total"]["resformer"]
        # the smallest size is always refused: there the variant would need (1 - SAVING) x, below its ladder
        assert saving["per_point"][0]["outside"] is not None
        mean, largest = saving["mean"], saving["per_point"][-1]
        assert mean["n"] == seeds and mean["ci_low"] is not None
        mean_covered.append(mean["ci_low"] <= SAVING <= mean["ci_high"])
        if largest["outside"] is None:
            largest_covered.append(largest["ci_low"] <= SAVING <= largest["ci_high"])
    _assert_nominal(mean_covered, f"mean saving over the ladder, {seeds} seeds")
    assert len(largest_covered) > 0.9 * replicates
    _assert_nominal(largest_covered, f"saving at the largest size, {seeds} seeds")


@pytest.mark.integration
def test_the_check_fails_an_interval_too_narrow_for_two_seeds():
    """The check has power: a normal-quantile interval (1.96 standard errors in place of t's 12.7 at one degree of
    freedom) over the same per-seed savings covers about 70% at 2 seeds, and the check rejects it."""
    rng = np.random.default_rng(7)
    covered = []
    for _ in range(200):
        largest = analyse(_sweep(rng, 2), level=LEVEL)["savings"]["total"]["resformer"]["per_point"][-1]
        if largest["outside"] is None:
            values = np.array(list(largest["per_seed"].values()))
            half = stats.norm.ppf(0.5 + LEVEL / 2) * values.std(ddof=1) / np.sqrt(len(values))
            covered.append(abs(values.mean() - SAVING) <= half)
    with pytest.raises(AssertionError, match="nominal 0.95"):
        _assert_nominal(covered, "normal-quantile interval, 2 seeds")
