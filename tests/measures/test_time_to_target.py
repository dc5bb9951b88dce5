"""Time to target (lit_resformer.measures.time_to_target): the reading of a validation curve at a target loss
(interpolated in log tokens, with its bracket), the log-ratio t interval of the data saving and its coverage in
simulated experiments read at the committed runs' evaluation density, the verdict rule for seeds whose variant never
reaches the target (false savings kept at the nominal rate where substituting or dropping them is not), and the
committed fig7-evidence result with its command."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from lit_resformer.measures.stats import verdict
from lit_resformer.measures.time_to_target import (
    Reading,
    combine,
    decide,
    evaluation_curve,
    first_crossing,
    main,
    read_crossings,
    saving_interval,
    seed_row,
    time_to_target,
)
from lit_resformer.runs.results import load_results

REPO = Path(__file__).resolve().parents[2]
FIG7 = REPO / "docs" / "results" / "fig7-evidence"
LEVEL = 0.95
REPLICATES = 2000
SEEDS = 5
IMPLAUSIBLE = 1e-3  # a check fails only when its coverage is this improbable under the nominal rate (binomial)

# The committed fig7-evidence runs: an untrained evaluation at step 0, then one every 100 steps of 2,048 tokens.
STEPS = np.array([0, *range(99, 1000, 100)])
TOKENS = np.where(STEPS == 0, 0.0, (STEPS + 1) * 2048.0)
# L(t) = E + a (t / t_ref)^-alpha: 6.6 nats after 100 steps, 4.6 at the end, as vanilla's validation curve
E, A, ALPHA, T_REF = 3.5, 1.1, 0.45, 2.048e6
UNTRAINED = 8.35


def law(tokens, speed):
    """The loss of a run `speed` log-tokens ahead of the law (it reaches each loss exp(speed) times sooner)."""
    tokens = np.asarray(tokens, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(tokens > 0, E + A * (tokens * np.exp(speed) / T_REF) ** -ALPHA, UNTRAINED)


def simulate(rng, design: str, saving: float, target: float | None = None, replicates: int = REPLICATES,
             eval_noise: float = 0.01):
    """Readings of `replicates` experiments of SEEDS seeds each: (variant readings, baseline readings) as
    read_crossings tuples. Each run is shifted in log tokens by its data order (0.05; shared by a seed's two runs
    when paired) and its initialisation (0.03: the spread of fig7-evidence's per-seed log ratios), and each
    evaluation has its own noise (0.01 nats). The variant reaches every loss (1 - saving) times the baseline's
    tokens: the true saving, of the geometric mean too, since the shifts are symmetric in log tokens."""
    shape = (replicates, SEEDS)
    order_b = rng.normal(0, 0.05, shape)
    order_v = order_b if design == "paired" else rng.normal(0, 0.05, shape)
    speed_b = order_b + rng.normal(0, 0.03, shape)
    speed_v = order_v + rng.normal(0, 0.03, shape) - math.log(1 - saving)
    noise = (replicates, SEEDS, TOKENS.size)
    baseline = law(TOKENS, speed_b[..., None]) + rng.normal(0, eval_noise, noise)
    variant = law(TOKENS, speed_v[..., None]) + rng.normal(0, eval_noise, noise)
    goal = baseline[..., -1] if target is None else np.full(shape, target)
    return read_crossings(TOKENS, variant, goal), read_crossings(TOKENS, baseline, goal)


def assert_coverage(covered: np.ndarray, what: str) -> None:
    """Within 93-97% and consistent with the nominal 95% (binomial)."""
    k, n = int(covered.sum()), covered.size
    p = stats.binomtest(k, n, LEVEL).pvalue
    assert 0.93 <= k / n <= 0.97 and p > IMPLAUSIBLE, f"{what}: covered {k / n:.3f} of {n} (binomial p = {p:.1e})"


# ----------------------------------------------------------------------------------------------
# reading a curve


def test_a_crossing_is_read_in_log_tokens_between_the_evaluations_around_it():
    curve = pd.Series(law(TOKENS, 0.0), index=TOKENS)
    target = float(law(1.3e6, 0.0))  # between the evaluations at 1,228,800 and 1,433,600 tokens
    reading = first_crossing(curve, target)
    assert reading.reached and (reading.low, reading.high) == (1228800.0, 1433600.0)
    # linear in loss against log tokens: on a convex power law the line errs late, by at most alpha gap^2 / 8
    assert reading.gap == pytest.approx(math.log(1433600 / 1228800))
    assert 0 < math.log(reading.tokens / 1.3e6) < ALPHA * reading.gap**2 / 8
    assert reading.error == pytest.approx(max(math.log(reading.tokens / 1228800), math.log(1433600 / reading.tokens)))
    assert reading.error < reading.gap
    low, high = float(law(1228800, 0.0)), float(law(1433600, 0.0))
    fraction = (low - target) / (low - high)
    assert reading.tokens == pytest.approx(1228800 * (1433600 / 1228800) ** fraction)

    # the baseline's own final loss: its last evaluation, unless an earlier one already reached it
    final = first_crossing(curve, float(curve.iloc[-1]))
    assert (final.tokens, final.low, final.high, final.error) == (2048000.0, 2048000.0, 2048000.0, 0.0)
    dipped = curve.copy()
    dipped.iloc[8] = curve.iloc[-1] - 0.01
    assert first_crossing(dipped, float(curve.iloc[-1])).tokens < TOKENS[8]

    # never reached: the run needs more than its whole run
    never = first_crossing(curve, E)
    assert not never.reached and never.tokens == never.last_tokens == 2048000.0 and never.high == math.inf
    # reached before the first trained evaluation: no log-token line from 0 tokens, read at that evaluation
    early = first_crossing(curve, 7.0)
    assert (early.tokens, early.low, early.high, early.gap) == (204800.0, 0.0, 204800.0, math.inf)


def test_vectorised_readings_agree_with_one_curve_at_a_time():
    rng = np.random.default_rng(3)
    curves = law(TOKENS, rng.normal(0, 0.2, (40, 1))) + rng.normal(0, 0.02, (40, TOKENS.size))
    targets = rng.uniform(4.3, 5.5, 40)
    reading, reached, low, high = read_crossings(TOKENS, curves, targets)
    for k in range(40):
        one = first_crossing(pd.Series(curves[k], index=TOKENS), targets[k])
        assert (one.tokens, one.reached, one.low, one.high) == (reading[k], reached[k], low[k], high[k])


def test_a_seed_row_is_measured_bounded_or_undetermined():
    base = Reading(2048000.0, True, 2048000.0, 2048000.0, 2048000.0)
    fast = Reading(1.4e6, True, 1228800.0, 1433600.0, 2048000.0)
    never = Reading(2048000.0, False, 2048000.0, math.inf, 2048000.0)
    row = seed_row(fast, base, 4.6)
    assert row["status"] == "measured" and row["saving"] == pytest.approx(1 - 1.4 / 2.048)
    assert row["saving_bracket"] == pytest.approx([0.3, 0.4])
    bounded = seed_row(never, base, 4.6)
    assert (bounded["status"], bounded["bound"], bounded["saving"]) == ("bounded", "at most", 0.0)
    longer = seed_row(Reading(3e6, False, 3e6, math.inf, 3e6), base, 4.6)  # a variant trained longer
    assert longer["saving"] == pytest.approx(1 - 3 / 2.048)
    below = seed_row(fast, never, 4.4)  # a stated target the baseline never reaches
    assert (below["status"], below["bound"]) == ("bounded", "at least")
    assert below["saving"] == pytest.approx(1 - 1.4 / 2.048)
    assert seed_row(never, never, 4.0)["status"] == "undetermined"


# ----------------------------------------------------------------------------------------------
# the interval


@pytest.mark.parametrize(("design", "target"), [("paired", None), ("unpaired", None), ("unpaired", 4.8)])
def test_the_log_ratio_interval_covers_the_true_saving(design, target):
    """2,000 simulated experiments of 5 seeds with a true saving of 25%, read at the committed evaluation density:
    the 95% interval covers it at its nominal rate, paired when a seed's runs share their data order, Welch on log
    tokens when they do not (against each seed's baseline final loss, and against a stated loss)."""
    rng = np.random.default_rng([{"paired": 1, "unpaired": 2}[design], int(target or 0)])
    (v_tokens, v_reached, *_), (b_tokens, b_reached, *_) = simulate(rng, design, 0.25, target)
    assert b_reached.all() and v_reached.mean() > 0.999
    result = saving_interval(v_tokens, b_tokens, design, LEVEL)
    assert result["design"] == design and result["n"] == SEEDS
    assert abs(np.mean(result["saving"]) - 0.25) < 0.005
    assert_coverage((result["ci_low"] <= 0.25) & (0.25 <= result["ci_high"]), f"{design}, target {target}")
    # the one-sided p of a saving agrees with the interval's lower end at the one-sided level
    one_sided = saving_interval(v_tokens, b_tokens, design, 1 - 2 * (1 - LEVEL))
    assert np.array_equal(result["p_greater"] < 1 - LEVEL, one_sided["ci_low"] > 0)


def test_reading_only_at_the_evaluations_would_not_cover():
    """The check has power, and the interpolation matters: taking the first evaluation at or below the target (the
    bracket's upper end) errs late by half a gap on average and covers well under half the time."""
    rng = np.random.default_rng(5)
    (_, _, _, v_high), (b_tokens, *_) = simulate(rng, "paired", 0.25)
    result = saving_interval(v_high, b_tokens, "paired", LEVEL)
    covered = (result["ci_low"] <= 0.25) & (0.25 <= result["ci_high"])
    assert covered.mean() < 0.6
    with pytest.raises(AssertionError, match="covered"):
        assert_coverage(covered, "read at the evaluations")


def test_variant_seeds_that_never_reach_the_target_keep_false_savings_at_the_nominal_rate():
    """No true saving: about half of the variant's runs never reach the baseline's final loss. `decide` keeps seeds
    at their bound and concludes a saving no more often than the one-sided 2.5% its interval allows; judging the
    substituted bounds as if measured, or dropping the bounded seeds, concludes one far more often."""
    rng = np.random.default_rng(11)
    replicates = REPLICATES
    (v_tokens, v_reached, v_low, v_high), (b_tokens, b_reached, b_low, b_high) = simulate(
        rng, "paired", 0.0, replicates=replicates)
    assert 0.4 < v_reached.mean() < 0.6 and b_reached.all()
    # combine's interval puts a bounded seed in at its last evaluation, as read_crossings' reading of it is
    substituted = saving_interval(v_tokens, b_tokens, "paired", LEVEL)
    for r in range(20):  # (combine itself, on a few: it runs scipy's t tests one experiment at a time)
        rows = {s: seed_row(Reading(v_tokens[r, s], v_reached[r, s], v_low[r, s], v_high[r, s], TOKENS[-1]),
                            Reading(b_tokens[r, s], True, b_low[r, s], b_high[r, s], TOKENS[-1]), 0.0)
                for s in range(SEEDS)}
        combined = combine(rows, "paired", LEVEL)
        assert combined["status"] == ("measured" if v_reached[r].all() else "bounded")
        assert combined["ci_low"] == pytest.approx(substituted["ci_low"][r])
    decided, as_if_measured, dropped = [], [], []
    log_ratios = np.log(v_tokens / b_tokens)
    for r in range(replicates):
        bounded = not v_reached[r].all()
        result = {"status": "bounded" if bounded else "measured", "bound": "at most" if bounded else None,
                  "per_seed": {s: {"status": "measured" if v_reached[r, s] else "bounded"} for s in range(SEEDS)},
                  "saving": substituted["saving"][r], "ci_low": substituted["ci_low"][r],
                  "ci_high": substituted["ci_high"][r], "n": SEEDS}
        decided.append(decide(result, "higher")[0])
        as_if_measured.append(verdict(result["ci_low"], result["ci_high"], SEEDS, "higher"))
        kept = log_ratios[r, v_reached[r]]  # the seeds that got there, alone
        if kept.size >= 2:
            half = stats.t.ppf(0.5 + LEVEL / 2, kept.size - 1) * kept.std(ddof=1) / math.sqrt(kept.size)
            dropped.append(verdict(1 - math.exp(kept.mean() + half), 1 - math.exp(kept.mean() - half), kept.size,
                                   "higher"))
        else:
            dropped.append("inconclusive")
    rate = {name: np.mean([v == "reproduced" for v in values])
            for name, values in (("decide", decided), ("as if measured", as_if_measured), ("dropped", dropped))}
    nominal = (1 - LEVEL) / 2
    assert stats.binomtest(int(rate["decide"] * replicates), replicates, nominal, alternative="greater").pvalue > IMPLAUSIBLE
    assert rate["as if measured"] > 2 * nominal and rate["dropped"] > 4 * nominal, rate
    # equal budgets, the baseline's own final loss: a slower variant is bounded at a saving of at most 0, so the
    # metric never contradicts a saving here (it needs a longer variant run or a target reached before the end)
    assert "contradicted" not in decided


def test_decide_draws_only_the_conclusion_a_bound_supports():
    def result(status, low, high, bound=None, n=5):
        rows = {s: {"status": "bounded" if bound and s == 0 else "measured"} for s in range(n)}
        return {"status": status, "bound": bound, "per_seed": rows, "saving": (low + high) / 2, "ci_low": low,
                "ci_high": high, "n": n}

    assert decide(result("measured", 0.1, 0.3), "higher") == ("reproduced", "")
    assert decide(result("measured", -0.3, -0.1), "higher") == ("contradicted", "")
    assert decide(result("measured", 0.1, 0.3), "higher", evidence=False)[0] == "inconclusive"
    verdict_text, note = decide(result("bounded", 0.1, 0.3, "at most"), "higher")
    assert verdict_text == "inconclusive" and "never reaches the target in seed0" in note and "at most" in note
    assert decide(result("bounded", -0.3, -0.1, "at most"), "higher")[0] == "contradicted"
    assert decide(result("bounded", -0.3, -0.1, "at most"), "lower")[0] == "reproduced"
    assert decide(result("bounded", 0.1, 0.3, "at least"), "higher")[0] == "reproduced"
    assert decide(result("bounded", -0.3, -0.1, "at least"), "higher")[0] == "inconclusive"
    undetermined = {"status": "undetermined", "per_seed": {0: {"status": "undetermined"}, 1: {"status": "measured"}}}
    assert decide(undetermined, "higher") == ("not tested", "not tested: neither run reaches the target in seed0")
    assert decide({"status": "no seeds", "per_seed": {}}, "higher")[0] == "inconclusive"


# ----------------------------------------------------------------------------------------------
# runs on disk


@pytest.fixture(scope="module")
def fig7():
    return load_results(FIG7)


def test_evaluation_tokens_come_from_the_logged_tokens(fig7):
    run = fig7.done["vanilla"][0]
    curve = evaluation_curve(run)
    assert curve.attrs["steps"] == STEPS.tolist() and curve.index.tolist() == TOKENS.tolist()
    assert curve.iloc[-1] == run.final("val_loss") and curve.attrs["tokens_per_step"] == 2048.0
    assert evaluation_curve(run, "val_loss/code").iloc[-1] == run.final("val_loss/code")


def test_fig7_evidence_resformer_saves_data_at_vanillas_final_loss(fig7):
    """The committed result (docs/time-to-target.md): ResFormer reaches each seed's vanilla final validation loss
    with 28.0% fewer tokens (95% CI 26.4-29.5%, paired: a seed's two runs share its data order), against the
    vanilla runs re-derived at a clean commit."""
    result = time_to_target(fig7, "resformer", "vanilla")
    assert (result["design"], result["status"], result["n"]) == ("paired", "measured", 5)
    rows = result["per_seed"]
    assert all(r["baseline_tokens"] == 2048000.0 for r in rows.values())
    assert [round(r["variant_tokens"] / 1e3) for r in rows.values()] == [1443, 1473, 1459, 1505, 1496]
    assert (result["saving"], result["ci_low"], result["ci_high"]) == pytest.approx((0.280, 0.264, 0.295), abs=1e-3)
    assert result["p_greater"] < 1e-4
    assert result["evaluations"]["every_steps"] == [100] and result["evaluations"]["every_tokens"] == [204800.0]
    assert result["evaluations"]["largest_gap"] == pytest.approx(math.log(1638400 / 1433600))
    assert decide(result, "higher") == ("reproduced", "")
    assert json.loads(json.dumps(result, default=float))  # JSON-able


def test_the_command_prints_the_table(capsys):
    assert main([str(FIG7), "--variant", "resformer", "--baseline", "vanilla"]) == 0
    out = capsys.readouterr().out
    assert "| seed0 | 4.5857 | 2.048M | 1.443M | 29.6% |" in out
    assert "**28.0%** | 95% CI [26.4%, 29.5%]" in out and "Evaluations every 100 steps" in out
    assert main([str(FIG7), "--variant", "nope"]) == 2
    assert "no cell 'nope'" in capsys.readouterr().err


def _write_run(grid: Path, cell: str, seed: int, losses, data_seed=None) -> None:
    run = grid / cell / f"seed{seed}"
    (run / "csv" / "version_0").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"cell": cell, "seed": seed, "status": "done"}))
    (run / "experiment.yaml").write_text(yaml.safe_dump({"seed_everything": seed, "data": {"seed": data_seed}}))
    lines = ["epoch,step,train/tokens_seen,val/loss"]
    lines += [f"0,{s},{(s + 1) * 2048.0},{''}" for s in range(0, 1000, 50)]  # logged every 50 steps
    lines += [f"{'' if s == 0 else 0},{s},,{loss}" for s, loss in zip(STEPS, losses, strict=True)]
    (run / "csv" / "version_0" / "metrics.csv").write_text("\n".join(lines) + "\n")


def test_a_variant_that_never_reaches_the_target_is_bounded_not_dropped(tmp_path):
    grid = tmp_path / "fig7"
    grid.mkdir()
    shutil.copy(FIG7 / "grid.yaml", grid / "grid.yaml")
    for seed, variant_speed in enumerate([0.3, 0.35, -0.02]):  # seed 2's ResFormer ends above vanilla's final loss
        _write_run(grid, "vanilla", seed, law(TOKENS, 0.01 * seed), data_seed=0)
        _write_run(grid, "resformer", seed, law(TOKENS, 0.01 * seed + variant_speed), data_seed=0)
    result = time_to_target(load_results(grid), "resformer", "vanilla")
    assert result["design"] == "unpaired"  # one data order for every run: seeds vary only the initialisation
    assert (result["status"], result["bound"], result["n"]) == ("bounded", "at most", 3)
    row = result["per_seed"][2]
    assert (row["status"], row["variant_tokens"], row["saving"]) == ("bounded", None, 0.0)
    assert result["per_seed"][0]["saving"] == pytest.approx(1 - math.exp(-0.3), abs=0.01)
    verdict_text, note = decide(result, "higher")
    assert verdict_text == "inconclusive" and "seed2" in note
    assert main([str(grid), "--variant", "resformer"]) == 0  # the baseline defaults to the grid's

    stated = time_to_target(load_results(grid), "resformer", "vanilla", target=E + 0.1)  # below every final loss
    assert stated["status"] == "undetermined" and decide(stated, "higher")[0] == "not tested"
