"""Scaling-law fits, per-seed intervals and equivalence savings (lit_resformer.measures.scaling), from synthetic laws and
synthetic run directories whose answers are known in closed form."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.optimize import brentq

from lit_resformer.cli import main
from lit_resformer.grids import load_grid
from lit_resformer.grids.grid import GridError
from lit_resformer.measures.scaling import (
    LadderPoint,
    OutsideRange,
    PowerLaw,
    ScalingError,
    Sweep,
    analyse,
    curve_savings,
    equivalence_saving,
    fit_power_law,
    load_sweep,
    measured_saving,
    non_embedding_params,
    scaling_claims,
)
from lit_resformer.measures.stats import verdict
from lit_resformer.model import ModelConfig
from lit_resformer.reports.grid_report import write_report
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.runs.summary import epoch_tokens

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def law(E, A, alpha):
    """A PowerLaw in x's own units (reference scale 1)."""
    return PowerLaw(E, A, alpha, 1.0)


def direct(E, A, alpha, x):
    return E + A * np.asarray(x, dtype=float) ** -alpha


# ----------------------------------------------------------------------------------------------
# the fit


def ladder_point(variant, label, x, losses, unigram_gap=3.0):
    """A ladder point whose runs' summaries put them `unigram_gap` nats below their unigram loss (and half as far
    below their bigram reference)."""
    summaries = {s: {"final_val_loss": v, "unigram_val_loss": v + unigram_gap, "bigram_val_loss": v + unigram_gap / 2}
                 for s, v in losses.items()}
    return LadderPoint(variant, label, f"{variant},{label}", {"total": float(x)}, losses, summaries=summaries)


def sweep_of(laws: dict, xs, seeds: int, noise: float, rng, unigram_gap=3.0) -> Sweep:
    """A sweep whose variant v has, at each x, `seeds` losses drawn around laws[v](x)."""
    points = {
        v: [ladder_point(v, f"s{i}", x, {s: float(direct(*p, x) + noise * rng.standard_normal()) for s in range(seeds)},
                         unigram_gap)
            for i, x in enumerate(xs)]
        for v, p in laws.items()
    }
    return Sweep("synthetic", "params", "val", next(iter(laws)), points)


def test_each_seeds_ladder_is_fitted_near_the_known_law():
    true = (2.5, 40.0, 0.28)
    xs = np.geomspace(2e5, 2e7, 6)
    sweep = sweep_of({"vanilla": true}, xs, seeds=6, noise=0.01, rng=np.random.default_rng(7))
    fit = analyse(sweep)["fits"]["total"]["vanilla"]
    assert fit["residual_dof"] == 3 and len(fit["per_seed"]) == 6
    assert abs(fit["alpha"] - true[2]) < 0.1 and abs(fit["E"] - true[0]) < 0.2
    alphas = [f["alpha"] for f in fit["per_seed"].values()]
    assert len(set(alphas)) == 6 and np.median(alphas) == pytest.approx(true[2], abs=0.15)


def test_fit_of_exact_points_is_exact_across_scales():
    for true, xs in (((3.0, 60.0, 0.3), [3e5, 7e5, 1.2e6, 2.7e6]), ((1.7, 400.0, 0.35), [8.2e7, 1.8e8, 4.68e8])):
        fitted, at_bound = fit_power_law(xs, direct(*true, xs))
        assert fitted.E == pytest.approx(true[0], abs=1e-5)
        assert fitted.A == pytest.approx(true[1], rel=1e-4)
        assert fitted.alpha == pytest.approx(true[2], abs=1e-5)
        assert at_bound == []


def test_flat_data_pins_the_fit_on_a_bound_and_says_so():
    _, at_bound = fit_power_law([1e5, 1e6, 1e7, 1e8], [3.0, 2.9, 2.8, 2.7])  # linear in log x: no saturation
    assert at_bound  # a power law cannot bend through this; the fit reports which parameter hit its bound


@pytest.mark.parametrize("x, loss, message", [
    ([1e5, 1e6], [3.0, 2.5], "at least 3 distinct x"),
    ([1e5, 1e5, 1e6], [3.0, 3.1, 2.5], "at least 3 distinct x"),
    ([-1.0, 1e5, 1e6], [3.0, 2.8, 2.5], "positive"),
    ([1e4, 1e5, 1e6], [3.0, float("nan"), 2.5], "finite"),
])
def test_fit_refuses_data_it_cannot_fit(x, loss, message):
    with pytest.raises(ScalingError, match=message):
        fit_power_law(x, loss)


# ----------------------------------------------------------------------------------------------
# savings


def test_saving_of_a_law_shifted_along_x_is_the_shift():
    # variant(x) = baseline(x / (1 - s)): the variant at (1 - s) x has the baseline's loss at x, at every x
    E, A, alpha, s = 2.0, 50.0, 0.3, 0.104
    xs = np.geomspace(1e6, 1e9, 7)
    saving = equivalence_saving(law(E, A, alpha), law(E, A * (1 - s) ** alpha, alpha), xs)
    np.testing.assert_allclose(saving, s, atol=1e-12)


def test_saving_with_another_floor_matches_a_root_finder():
    base, variant = (2.0, 50.0, 0.3), (1.9, 45.0, 0.27)
    for x in (1e6, 1e7, 1e8):
        target = direct(*base, x)
        x_star = brentq(lambda n, target=target: direct(*variant, n) - target, 1.0, 1e12, xtol=1e-6, rtol=1e-12)
        assert equivalence_saving(law(*base), law(*variant), x) == pytest.approx(1 - x_star / x, rel=1e-8)


def test_a_variant_whose_floor_is_above_the_loss_never_reaches_it():
    base, variant = law(2.0, 50.0, 0.3), law(2.9, 50.0, 0.3)
    x = 1e9  # baseline loss 2.1 here, below the variant's floor 2.9
    assert equivalence_saving(base, variant, x) == -math.inf


def test_analyse_recovers_the_savings_and_gives_the_claims_verdict():
    rng = np.random.default_rng(3)
    E, A, alpha = 2.4, 60.0, 0.3
    laws = {"vanilla": (E, A, alpha), "resformer": (E, A * (1 - 0.104) ** alpha, alpha),
            "svformer": (E, A * (1 + 0.15) ** alpha, alpha)}
    result = analyse(sweep_of(laws, np.geomspace(3e5, 3e6, 4), seeds=4, noise=0.002, rng=rng))
    res, sv = (result["savings"]["total"][v] for v in ("resformer", "svformer"))
    assert res["mean"]["ci_low"] <= 0.104 <= res["mean"]["ci_high"] and res["mean"]["ci_low"] > 0
    assert sv["mean"]["ci_low"] <= -0.15 <= sv["mean"]["ci_high"] and sv["mean"]["ci_high"] < 0
    # ResFormer's saving at the smallest size, SVFormer's at the largest, would need the variant off its ladder
    assert res["per_point"][0]["outside"].startswith("outside the measured range 300k–3M: the variant would need 2")
    assert sv["per_point"][-1]["outside"].startswith("outside the measured range 300k–3M: the variant would need 3")
    assert res["mean"]["points"] == ["s1", "s2", "s3"] and sv["mean"]["points"] == ["s0", "s1", "s2"]
    (claim,) = result["claims"]
    assert claim["verdict"] == "reproduced" and claim["n"] == 4 and claim["convention"] == "total"
    assert claim["design"] == "per-seed" and claim["seed_design"] == "unpaired" and claim["p_raw"] < 0.05
    assert claim["note"] == "" and claim["paper"] == 0.104
    assert claim["delta"] == pytest.approx(0.104, abs=0.03)
    json.dumps(result, allow_nan=False)  # the result is plain JSON


@pytest.mark.parametrize("shift, noise, expected", [(-0.2, 0.002, "contradicted"), (0.0, 0.02, "inconclusive")])
def test_claim_verdict_other_ways(shift, noise, expected):
    E, A, alpha = 2.4, 60.0, 0.3
    laws = {"vanilla": (E, A, alpha), "resformer": (E, A * (1 - shift) ** alpha, alpha)}
    result = analyse(sweep_of(laws, np.geomspace(3e5, 3e6, 5), seeds=3, noise=noise, rng=np.random.default_rng(5)))
    assert result["claims"][0]["verdict"] == expected


def test_a_claim_on_runs_at_the_unigram_plateau_is_inconclusive():
    # the same clear saving as above, but the runs end less than 1 nat below their unigram loss
    laws = {"vanilla": (2.4, 60.0, 0.3), "resformer": (2.4, 60.0 * (1 - 0.2) ** 0.3, 0.3)}
    sweep = sweep_of(laws, np.geomspace(3e5, 3e6, 4), seeds=3, noise=0.002, rng=np.random.default_rng(5), unigram_gap=0.5)
    sweep.points["vanilla"][0].summaries[2]["unigram_val_loss"] = None  # and one run logged no unigram loss
    (claim,) = analyse(sweep)["claims"]
    assert claim["ci_low"] > 0 and claim["verdict"] == "inconclusive"
    assert claim["note"].startswith("24 of 24 runs not past the unigram plateau")


def test_a_claim_on_runs_above_their_bigram_reference_is_not_tested():
    laws = {"vanilla": (2.4, 60.0, 0.3), "resformer": (2.4, 60.0 * (1 - 0.2) ** 0.3, 0.3)}
    sweep = sweep_of(laws, np.geomspace(3e5, 3e6, 4), seeds=3, noise=0.002, rng=np.random.default_rng(5))
    summary = sweep.points["resformer"][0].summaries[1]
    summary["bigram_val_loss"] = summary["final_val_loss"] - 0.01
    (claim,) = analyse(sweep)["claims"]
    assert claim["verdict"] == "not tested" and claim["ci_low"] > 0
    assert claim["note"] == "not tested: early-training regime (above the bigram reference): resformer,s0/seed1"


def test_three_points_leave_no_residual_and_give_no_interval():
    laws = {"vanilla": (2.4, 60.0, 0.3), "resformer": (2.4, 60.0 * (1 - 0.2) ** 0.3, 0.3)}
    result = analyse(sweep_of(laws, np.geomspace(3e5, 3e6, 3), seeds=3, noise=0.002, rng=np.random.default_rng(5)))
    assert result["fits"]["total"]["vanilla"]["residual_dof"] == 0
    saving = result["savings"]["total"]["resformer"]
    assert all(r["ci_low"] is None for r in saving["per_point"]) and saving["mean"]["ci_low"] is None
    assert saving["mean"]["saving"] == pytest.approx(0.2, abs=0.03)  # an estimate, without an interval
    assert any("3 ladder points fix E, A and α exactly" in note for note in result["notes"])
    (claim,) = result["claims"]
    assert claim["verdict"] == "not tested" and claim["p_raw"] is None
    assert claim["note"] == ("not tested: no interval: the fit of vanilla and resformer has no residual degrees of "
                             "freedom (3 parameters on 3 points)")


def test_a_saving_outside_the_measured_range_isrefused():
    base, variant = law(2.0, 50.0, 0.3), law(2.0, 50.0 * 0.8**0.3, 0.3)  # a saving of 20% at every x
    xs = [1e5, 1e6, 1e7]
    assert measured_saving(base, variant, 1e6, xs, xs) == pytest.approx(0.2)
    for asked, message in ((5e4, "outside the measured range 100k–10M: asked at 50k"),
                           (2e7, "outside the measured range 100k–10M: asked at 20M"),
                           (1e5, "outside the measured range 100k–10M: the variant would need 80k")):
        with pytest.raises(OutsideRange, match=message):
            measured_saving(base, variant, asked, xs, xs)
    never = law(2.9, 50.0, 0.3)  # a floor above the baseline's loss: the variant never gets there
    with pytest.raises(OutsideRange, match="the variant would need ∞"):
        measured_saving(base, never, 1e7, xs, xs)


def test_verdict_rule():
    assert verdict(0.01, 0.2, 2, "higher") == "reproduced"
    assert verdict(-0.3, -0.01, 2, "higher") == "contradicted"
    assert verdict(-math.inf, -0.01, 3, "higher") == "contradicted"
    assert verdict(-math.inf, -0.01, 3, "lower") == "reproduced"
    assert verdict(-0.1, 0.2, 5, "higher") == "inconclusive"
    assert verdict(0.01, 0.2, 1, "higher") == "inconclusive"  # one seed is never evidence
    assert verdict(None, None, 4, "higher") == "inconclusive"
    assert verdict(0.01, 0.2, 4, "higher", evidence=False) == "inconclusive"  # a run at the unigram plateau


def test_single_seed_gives_a_fit_without_intervals_and_says_why():
    laws = {"vanilla": (2.4, 60.0, 0.3), "resformer": (2.4, 58.0, 0.3)}
    sweep = sweep_of(laws, np.geomspace(3e5, 3e6, 4), seeds=1, noise=0.0, rng=np.random.default_rng(0))
    result = analyse(sweep)
    mean = result["savings"]["total"]["resformer"]["mean"]
    assert mean["ci_low"] is None and mean["no_interval"] == "one seed: no spread over seeds to judge it by"
    assert result["claims"][0]["verdict"] == "inconclusive" and result["claims"][0]["ci_low"] is None


def test_each_seed_is_fitted_on_its_own_and_the_interval_is_a_t_over_seeds():
    # seed 0's variant saves 10% at every size, seed 1's 30% (exact laws): per-seed savings 0.1 and 0.3, so the
    # saving is 0.2 with the t interval of two values, 0.2 +- t(0.975, 1) * 0.1
    xs = np.geomspace(3e5, 3e6, 4)
    base = (2.4, 60.0, 0.3)
    points = {"vanilla": [ladder_point("vanilla", f"s{i}", x, {s: float(direct(*base, x)) for s in (0, 1)})
                          for i, x in enumerate(xs)],
              "resformer": [ladder_point("resformer", f"s{i}", x, {s: float(direct(*base, x / (1 - (0.1, 0.3)[s])))
                                                                  for s in (0, 1)}) for i, x in enumerate(xs)]}
    saving = analyse(Sweep("synthetic", "params", "val", "vanilla", points))["savings"]["total"]["resformer"]
    row = saving["per_point"][-1]
    assert row["per_seed"] == pytest.approx({"0": 0.1, "1": 0.3}, abs=1e-6)
    half = 12.7062 * 0.1
    assert (row["saving"], row["ci_low"], row["ci_high"]) == pytest.approx((0.2, 0.2 - half, 0.2 + half), abs=1e-4)
    assert saving["seeds"] == [0, 1]


def test_curve_reading_of_the_data_saving():
    # vanilla falls linearly to f at step S=200; the variant is 0.205 lower (train) / 0.105 lower (val), so it
    # reaches f when 2(1 - s/S) <= 0.205, i.e. at s = 180 (train), and at the eval at 180 for val: 1 - 180/200
    steps = np.arange(1, 201)
    final = 3.0

    def point(variant, train_shift, val_shift, seeds=(0, 1)):
        train = pd.Series(final + 2 * (1 - steps / 200) - train_shift, index=steps).rolling(10, min_periods=1).mean()
        evals = np.arange(20, 201, 20)
        val = pd.Series(final + (1 - evals / 200) - val_shift, index=evals)
        return LadderPoint(variant, "d=64", f"{variant},d=64", {"total": 1.0}, dict.fromkeys(seeds, final),
                           {"train": dict.fromkeys(seeds, train), "val": dict.fromkeys(seeds, val)})

    (row,) = curve_savings([point("vanilla", 0, 0)], [point("resformer", 0.205, 0.105)])
    assert row["train"]["mean"] == pytest.approx(0.1) and row["val"]["mean"] == pytest.approx(0.1)
    assert row["train"]["n"] == 2 and row["train"]["not_reached"] == 0
    (row,) = curve_savings([point("vanilla", 0, 0)], [point("svformer", -0.5, -0.5)])
    assert row["train"] == {"n": 2, "not_reached": 2, "mean": None, "ci_low": None, "ci_high": None}


# ----------------------------------------------------------------------------------------------
# synthetic run directories, the CLI and the report

BASE = {
    "seed_everything": 0,
    "trainer": {"max_steps": 40},
    "model": {"config": {"size": "tiny"}, "lr": 1e-3},
    "data": {"seq_len": 64},
}
WIDTHS = (64, 96, 128, 192)
VARIANTS = {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}, "svformer": {"model.config.share.svformer": True}}
SAVING = {"vanilla": 0.0, "resformer": 0.104, "svformer": -0.05}
LAW = (3.0, 60.0, 0.3)
TOKENS_PER_STEP = 2048
VOCAB = 4096  # the tiny preset's vocabulary: embedding and LM head are VOCAB x d each
CURVE_DROP = 0.1  # how far each synthetic training curve falls over its run


def width_matrix(widths=WIDTHS, extra=None):
    return {"model.config.d_model": {d: {"model.config.n_head": d // 32, "model.config.ffn_dim": d * 11 // 4,
                                         **(extra or {}).get(d, {})} for d in widths}}


def analytic_n(d, layers=6, svformer=False):
    """Llama block without embeddings/head: q, k, v, o (d x d), SwiGLU (3 d x ffn), two RMSNorm weights;
    plus the final norm. SVFormer layers 2..L have no W_V."""
    ffn = d * 11 // 4
    return layers * (4 * d * d + 3 * d * ffn + 2 * d) + d - (layers - 1) * d * d * svformer


def size_law(variant, config):
    """Final loss: the variant at N has vanilla's law at N / (1 - saving), i.e. the closed-form saving."""
    d = config["model"]["config"]["d_model"]
    n = analytic_n(d, svformer=variant == "svformer")
    return float(direct(*LAW, n / (1 - SAVING[variant])))


def make_sweep_dir(tmp_path, matrix=None, variants=VARIANTS, scaling="params", skip=(), loss=size_law, epoch_steps=None):
    """A grid run directory as the runner leaves it (manifest from a real grid file, experiment.yaml, metrics,
    summary), every run's final losses from `loss(variant, config)` +- 0.004 by seed; a pass over the training
    split takes `epoch_steps` steps (None: longer than any run)."""
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    grid = {"name": "sweep", "base": "base.yaml", "baseline": "vanilla", "seeds": [0, 1], "cells": variants,
            "matrix": matrix or width_matrix()}
    if scaling:
        grid["report"] = {"scaling": scaling}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(grid, sort_keys=False))
    spec = load_grid(tmp_path / "sweep.yaml")
    grid_dir = tmp_path / "runs/sweep"
    grid_dir.mkdir(parents=True)
    (grid_dir / "grid.yaml").write_text(yaml.safe_dump(spec.manifest(), sort_keys=False))
    for run in spec.runs():
        if run.cell in skip:
            continue
        variant = run.cell.split(",")[0]
        write_run(grid_dir / run.cell / f"seed{run.seed}", run.config, loss(variant, run.config) + (0.004 if run.seed else -0.004),
                  epoch_steps)
    return grid_dir


def write_run(path, config, final, epoch_steps=None):
    """Training loss falls linearly to `final` (final + CURVE_DROP (1 - s/S) at step s of S); validation at S/2 and S;
    Lightning's epoch column counts passes of `epoch_steps` steps."""
    steps = config["trainer"]["max_steps"]
    (path / "csv/version_0").mkdir(parents=True)
    (path / "experiment.yaml").write_text(yaml.safe_dump(config))
    with open(path / "csv/version_0/metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["epoch", "step", "train/loss", "train/tokens_seen", "val/loss"])
        writer.writeheader()
        for step in range(1, steps + 1):
            writer.writerow({"epoch": (step - 1) // (epoch_steps or steps), "step": step,
                             "train/loss": final + CURVE_DROP * (1 - step / steps), "train/tokens_seen": step * TOKENS_PER_STEP})
            if step % (steps // 2) == 0:
                writer.writerow({"step": step, "val/loss": final + CURVE_DROP * (1 - step / steps)})
    d = config["model"]["config"].get("d_model", 128)
    total = analytic_n(d, svformer=config["model"]["config"].get("share", {}).get("svformer", False)) + 2 * VOCAB * d
    (path / "summary.json").write_text(json.dumps({"status": "done", "params": total, "final_val_loss": final,
                                                  "unigram_val_loss": final + 3.0, "bigram_val_loss": final + 1.5}))


@pytest.mark.integration
def test_sweep_reads_n_from_each_run_and_d_from_its_metrics(tmp_path):
    sweep = load_sweep(make_sweep_dir(tmp_path))
    assert sweep.axis == "params" and sweep.baseline == "vanilla"
    assert [p.x["non-embedding"] for p in sweep.points["vanilla"]] == [analytic_n(d) for d in WIDTHS]
    assert [p.x["non-embedding"] for p in sweep.points["svformer"]] == [analytic_n(d, svformer=True) for d in WIDTHS]
    assert [p.label for p in sweep.points["resformer"]] == [f"d_model={d}" for d in WIDTHS]
    assert analytic_n(192) / analytic_n(64) > 8


@pytest.mark.integration
def test_savings_are_given_over_all_parameters_and_without_the_embeddings(tmp_path):
    grid_dir = make_sweep_dir(tmp_path, variants={k: VARIANTS[k] for k in ("vanilla", "resformer")})
    sweep = load_sweep(grid_dir)
    assert sweep.conventions == ["total", "non-embedding"]  # the paper's first
    assert [p.x["total"] for p in sweep.points["vanilla"]] == [analytic_n(d) + 2 * VOCAB * d for d in WIDTHS]
    result = analyse(sweep)
    # the law holds over non-embedding N, so the saving is exact there; over all parameters it is another number
    inside = [r for r in result["savings"]["non-embedding"]["resformer"]["per_point"] if r["saving"] is not None]
    assert [r["saving"] for r in inside] == pytest.approx([SAVING["resformer"]] * 3, abs=1e-4)
    total = result["savings"]["total"]["resformer"]["mean"]["saving"]
    assert 0 < total < SAVING["resformer"] - 0.01  # the embeddings dilute a saving in the transformer's N
    (claim,) = result["claims"]
    assert claim["convention"] == "total" and claim["delta"] == pytest.approx(total)
    # a run whose summary gives no parameter count: only the non-embedding count, and the claim says so
    summary_file = grid_dir / "vanilla,d_model=64/seed0/summary.json"
    summary_file.write_text(json.dumps({k: v for k, v in json.loads(summary_file.read_text()).items() if k != "params"}))
    result = analyse(load_sweep(grid_dir))
    assert result["conventions"] == ["non-embedding"] and "No savings over all parameters" in result["notes"][0]
    assert result["claims"][0]["note"].startswith("judged over non-embedding parameters")


def test_the_papers_table_5_gives_its_headline_under_its_size_names():
    # The paper names its models by all their parameters (82M, 180M, 468M). Its Table 5 average validation
    # losses, fitted per variant over those N, give a mean saving of 10.5%: its published 10.4%.
    vanilla, resformer = [2.7389, 2.5015, 2.2806], [2.7117, 2.4692, 2.2537]
    n = np.array([82e6, 180e6, 468e6])
    saving = equivalence_saving(fit_power_law(n, vanilla)[0], fit_power_law(n, resformer)[0], n)
    assert saving.mean() == pytest.approx(0.104, abs=0.002)


@pytest.mark.integration
def test_cli_end_to_end_on_synthetic_runs(tmp_path, capsys):
    grid_dir = make_sweep_dir(tmp_path)
    main(["scaling", str(grid_dir)])
    assert "ResFormer needs fewer parameters for the same loss: reproduced" in capsys.readouterr().out
    result = json.loads((grid_dir / "scaling/scaling.json").read_text())
    (sweep,) = result["sweeps"]
    vanilla = sweep["fits"]["non-embedding"]["vanilla"]
    assert vanilla["E"] == pytest.approx(LAW[0], abs=1e-3) and vanilla["alpha"] == pytest.approx(LAW[2], abs=1e-3)
    assert sweep["design"] == {"resformer": "paired", "svformer": "paired"}  # each seed's runs share its data order
    for variant in ("resformer", "svformer"):
        rows = sweep["savings"]["non-embedding"][variant]["per_point"]
        assert sum(r["outside"] is not None for r in rows) == 1  # a constant saving leaves the ladder at one end
        for row in rows:
            if row["outside"] is None:
                assert row["saving"] == pytest.approx(SAVING[variant], abs=1e-3)
                # the seeds' ladders differ by a constant, which E absorbs: their savings agree to the fit's precision
                assert row["ci_low"] - 1e-6 <= SAVING[variant] <= row["ci_high"] + 1e-6
    assert result["claims"] == sweep["claims"] and result["claims"][0]["verdict"] == "reproduced"
    markdown = (grid_dir / "scaling/scaling.md").read_text()
    for text in ("Over all parameters (the paper's convention)", "Over non-embedding parameters",
                 "the paper's reading, within one run", "**reproduced**", "10.4%", "outside the measured range"):
        assert text in markdown
    for name in ("scaling_sweep_fit_total.png", "scaling_sweep_saving_non-embedding.png"):
        assert (grid_dir / "scaling" / name).read_bytes().startswith(PNG_MAGIC)
        assert f"({name})" in markdown


@pytest.mark.integration
def test_curve_reading_on_run_folders_matches_the_written_curves(tmp_path):
    grid_dir = make_sweep_dir(tmp_path, variants={k: VARIANTS[k] for k in ("vanilla", "resformer")})
    result = analyse(load_sweep(grid_dir))
    steps = BASE["trainer"]["max_steps"]
    for row in result["curve_savings"]["resformer"]:
        config = {"model": {"config": {"d_model": int(row["label"].split("=")[1])}}}
        per_seed = []
        for offset in (-0.004, 0.004):
            raw = {v: [size_law(v, config) + offset + CURVE_DROP * (1 - s / steps) for s in range(1, steps + 1)]
                   for v in ("vanilla", "resformer")}
            smooth = [np.mean(raw["resformer"][max(0, i - 9):i + 1]) for i in range(steps)]
            target = np.mean(raw["vanilla"][-10:])
            first = next(i + 1 for i, value in enumerate(smooth) if value <= target)
            per_seed.append(1 - first / steps)
        assert row["train"]["mean"] == pytest.approx(np.mean(per_seed))
        assert row["train"]["mean"] > 0  # resformer is lower all along, so it gets there early


@pytest.mark.integration
def test_report_has_a_scaling_section_for_a_sweep_grid(tmp_path, monkeypatch):
    analyses = []
    original = analyse

    def counted(*args, **kwargs):
        analyses.append(args[0].grid)
        return original(*args, **kwargs)

    monkeypatch.setattr("lit_resformer.measures.scaling.analyse", counted)
    grid_dir = make_sweep_dir(tmp_path, variants={k: VARIANTS[k] for k in ("vanilla", "resformer")})
    write_report(grid_dir)
    report = (grid_dir / "report.md").read_text()
    assert "## Scaling: sweep (L(N) over model size)" in report and "(plots/scaling_sweep_fit_total.png)" in report
    assert analyses == ["sweep"]  # one analysis serves both the scaling section and the Claims table
    claim_row = next(line for line in report.splitlines() if "| ResFormer needs fewer parameters for the same loss |" in line)
    assert "| resformer vs vanilla |" in claim_row
    assert (grid_dir / "plots/scaling_sweep_fit_total.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.integration
def test_report_of_a_sweep_that_cannot_be_fitted_says_why(tmp_path):
    grid_dir = make_sweep_dir(tmp_path, matrix=width_matrix((64, 128)))
    write_report(grid_dir)
    assert "No fit: sweep: vanilla has finished runs at 2 ladder point(s)" in (grid_dir / "report.md").read_text()


def test_token_budget_sweep_fits_l_of_d(tmp_path):
    def token_law(variant, config):
        tokens = config["trainer"]["max_steps"] * TOKENS_PER_STEP
        return float(direct(2.0, 500.0, 0.35, tokens / (1 - (0.136 if variant == "resformer" else 0.0))))

    grid_dir = make_sweep_dir(tmp_path, matrix={"trainer.max_steps": [20, 40, 80, 160]}, loss=token_law,
                              scaling="tokens", variants={k: VARIANTS[k] for k in ("vanilla", "resformer")})
    result = analyse(load_sweep(grid_dir))
    assert result["axis"] == "tokens" and result["x"] == "D" and result["conventions"] == ["tokens"]
    assert [p["x"]["tokens"] for p in result["points"]["vanilla"]] == [s * TOKENS_PER_STEP for s in (20, 40, 80, 160)]
    assert [p["epochs"] for p in result["points"]["vanilla"]] == [None] * 4  # one pass is longer than every run
    assert result["savings"]["tokens"]["resformer"]["mean"]["saving"] == pytest.approx(0.136, abs=1e-3)
    assert result["claims"][0]["claim"] == "ResFormer needs less data for the same loss"
    assert result["claims"][0]["verdict"] == "reproduced"


# ----------------------------------------------------------------------------------------------
# degenerate sweeps: one clear message each, never a silently wrong fit


def test_fewer_than_three_sizes(tmp_path):
    with pytest.raises(ScalingError, match=r"vanilla has finished runs at 2 ladder point\(s\).*at least 3"):
        load_sweep(make_sweep_dir(tmp_path, matrix=width_matrix((64, 128))))


@pytest.mark.integration
def test_non_monotone_ladder(tmp_path):
    def undertrained(variant, config):  # the largest model ends above the next one
        return size_law(variant, config) + (0.5 if config["model"]["config"]["d_model"] == 192 else 0.0)

    with pytest.raises(ScalingError, match=r"vanilla's loss does not fall along the ladder: d_model=192"):
        load_sweep(make_sweep_dir(tmp_path, loss=undertrained))


@pytest.mark.integration
def test_missing_variant(tmp_path):
    grid_dir = make_sweep_dir(tmp_path, skip={f"svformer,d_model={d}" for d in WIDTHS})
    with pytest.raises(ScalingError, match=r"\['svformer'\] have no finished runs"):
        load_sweep(grid_dir)
    assert set(load_sweep(grid_dir, variants=["resformer"]).points) == {"vanilla", "resformer"}
    with pytest.raises(ScalingError, match=r"\['denseformer'\] are not in the grid"):
        load_sweep(grid_dir, variants=["denseformer"])


def test_missing_size_of_one_variant(tmp_path):
    grid_dir = make_sweep_dir(tmp_path, skip={"resformer,d_model=96", "resformer,d_model=128"})
    with pytest.raises(ScalingError, match=r"resformer has finished runs at 2 ladder point\(s\)"):
        load_sweep(grid_dir)


@pytest.mark.integration
def test_both_axes_varying(tmp_path):
    steps = {64: {"trainer.max_steps": 20}, 96: {"trainer.max_steps": 40}}
    grid_dir = make_sweep_dir(tmp_path, matrix=width_matrix(extra=steps), scaling=None)
    with pytest.raises(ScalingError, match="not a sweep over one axis"):
        load_sweep(grid_dir)
    with pytest.raises(ScalingError, match="varies training tokens too"):
        load_sweep(grid_dir, axis="params")


def test_unmarked_sweep_infers_its_axis(tmp_path):
    assert load_sweep(make_sweep_dir(tmp_path, scaling=None)).axis == "params"


def test_bad_options_and_directories(tmp_path):
    grid_dir = make_sweep_dir(tmp_path)
    with pytest.raises(ScalingError, match=r"metric='loss' is not allowed; choose one of \['val', 'train'\]"):
        load_sweep(grid_dir, metric="loss")
    with pytest.raises(ScalingError, match=r"axis='size' is not allowed"):
        load_sweep(grid_dir, axis="size")
    with pytest.raises(ScalingError, match="no grid.yaml"):
        load_sweep(tmp_path)
    with pytest.raises(ScalingError, match=r"level=1.5 must be in \(0, 1\)"):
        analyse(load_sweep(grid_dir), level=1.5)
    with pytest.raises(SystemExit, match="holds no sweep grid"):
        main(["scaling", str(tmp_path)])


def test_grid_files_reject_an_unknown_scaling_axis(tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "baseline": "a", "cells": {"a": {}},
                                                     "report": {"scaling": "size"}}))
    with pytest.raises(GridError, match=r"report.scaling='size' is not allowed; choose one of \['params', 'tokens'\]"):
        load_grid(tmp_path / "g.yaml")


def test_scaling_claims_for_the_scoreboard(tmp_path):
    (claim,) = scaling_claims(make_sweep_dir(tmp_path))
    assert claim["grid"] == "sweep" and claim["verdict"] == "reproduced" and claim["convention"] == "total"
    assert claim["ci_low"] - 1e-9 <= claim["delta"] <= claim["ci_high"] + 1e-9 and claim["ci_low"] > 0
    assert claim["df"] == claim["n"] - 1  # a t interval over the per-seed savings: what its MDE reads


@pytest.mark.integration
def test_the_claims_scoreboard_judges_a_sweep_on_its_fitted_saving(tmp_path):
    from lit_resformer.verdicts.scoreboard_rows import scoreboard

    (verdict,) = scoreboard([make_sweep_dir(tmp_path)])
    assert verdict.claim.claim == "ResFormer needs fewer parameters for the same loss"
    assert verdict.verdict == "reproduced" and 0 < verdict.delta < SAVING["resformer"]
    assert verdict.df == verdict.n - 1 and verdict.power["mde"] > 0  # its design can say what it detects
    # the fitted runs recorded no provenance block (as the sweeps trained before runs did): the row says so
    assert "provenance unknown: 16 run(s)" in verdict.note, verdict.note  # two variants x 4 sizes x 2 seeds
    (tmp_path / "flat").mkdir()
    flat = make_sweep_dir(tmp_path / "flat", loss=lambda variant, config: 3.0)  # no law to fit
    (verdict,) = scoreboard([flat])
    # nothing was measured: not tested (as a grid's own saving claim on the same sweep is), never an inconclusive
    # verdict that no number backs
    assert verdict.verdict == "not tested" and verdict.note.startswith("not tested: no fit:")


def test_epoch_tokens_come_from_lightnings_epoch_column(tmp_path):
    config = {"trainer": {"max_steps": 10}, "model": {"config": {"d_model": 64}}}
    write_run(tmp_path / "repeats", config, 3.0, epoch_steps=4)
    assert epoch_tokens(RunDir(tmp_path / "repeats")) == 4 * TOKENS_PER_STEP  # the last step of the first pass
    write_run(tmp_path / "once", config, 3.0)
    assert epoch_tokens(RunDir(tmp_path / "once")) is None
    assert epoch_tokens(RunDir(tmp_path / "no-logs")) is None


@pytest.mark.integration
def test_a_sweep_that_repeats_data_says_how_many_epochs_it_saw(tmp_path):
    def token_law(variant, config):
        return float(direct(2.0, 500.0, 0.35, config["trainer"]["max_steps"] * TOKENS_PER_STEP))

    grid_dir = make_sweep_dir(tmp_path, matrix={"trainer.max_steps": [20, 40, 80, 160]}, loss=token_law,
                              scaling="tokens", variants={k: VARIANTS[k] for k in ("vanilla", "resformer")},
                              epoch_steps=50)
    # the summaries predate the epoch_tokens field, except one that recorded it: both load
    summary_file = grid_dir / "vanilla,max_steps=160/seed0/summary.json"
    summary_file.write_text(json.dumps({**json.loads(summary_file.read_text()), "epoch_tokens": 50 * TOKENS_PER_STEP}))
    result = analyse(load_sweep(grid_dir))
    assert [p["epochs"] for p in result["points"]["vanilla"]] == [None, None, 1.6, 3.2]
    assert ("Data repeats: 4 of 8 ladder points passed over their training split more than once, up to 3.20 times "
            "(vanilla at max_steps=160: 328k tokens seen of a 102k-token split); the paper trains one epoch, and D "
            "counts the repeated tokens.") in result["notes"]
    write_report(grid_dir)
    assert "| vanilla | max_steps=160 | 327,680 | 3.20 |" in (grid_dir / "report.md").read_text()


# ----------------------------------------------------------------------------------------------
# the sweep grid files

REPO = Path(__file__).resolve().parents[2]
VARIANT_NAMES = {"vanilla", "resformer", "svformer"}


def tokens_per_run(config):
    per_step = config["global_batch_tokens"] or config["data"]["micro_batch_size"] * config["data"]["seq_len"]
    return config["trainer"]["max_steps"] * per_step


@pytest.mark.integration
@pytest.mark.parametrize("grid_file", ["scaling-size.yaml", "scaling-size-small.yaml"])
def test_cpu_size_ladder_grid(grid_file):
    grid = load_grid(REPO / "configs/grids" / grid_file)
    assert grid.report["scaling"] == "params" and len(grid.seeds) >= 2
    assert {c.family for c in grid.cells} == VARIANT_NAMES and grid.baseline == "vanilla"
    vanilla = [c for c in grid.cells if c.family == "vanilla"]
    n = sorted(non_embedding_params(grid.configs[c.name]["model"]["config"]) for c in vanilla)
    assert len(n) >= 4 and n[-1] / n[0] >= 8
    for cell in grid.cells:
        config = grid.configs[cell.name]
        assert ModelConfig(**{**config["model"]["config"], "vocab_size": 1}).n_layer >= 6
        assert tokens_per_run(config) >= 1_000_000
        assert config["trainer"]["accelerator"] == "cpu"
    assert len({tokens_per_run(grid.configs[c.name]) for c in grid.cells}) == 1  # one budget: L(N) at fixed D


@pytest.mark.integration
def test_cpu_token_budget_grid():
    grid = load_grid(REPO / "configs/grids/scaling-tokens.yaml")
    assert grid.report["scaling"] == "tokens" and len(grid.seeds) >= 2 and grid.baseline == "vanilla"
    for variant in {c.family for c in grid.cells}:
        cells = [c for c in grid.cells if c.family == variant]
        budgets = {tokens_per_run(grid.configs[c.name]) for c in cells}
        assert len(budgets) == len(cells) >= 3 and min(budgets) >= 1_000_000
        # one size (each budget is its own full schedule: the cosine ends at the run's own max_steps)
        assert len({non_embedding_params(grid.configs[c.name]["model"]["config"]) for c in cells}) == 1


@pytest.mark.integration
def test_paper_size_ladder_grid():
    grid = load_grid(REPO / "configs/grids/paper/scaling-size.yaml")
    assert grid.report["scaling"] == "params" and {c.family for c in grid.cells} == VARIANT_NAMES
    sizes = {c.coords["model.config.size"] for c in grid.cells}
    assert sizes == {"82M", "180M", "320M", "468M"}
    for cell in grid.cells:
        assert tokens_per_run(grid.configs[cell.name]) == 10_000 * 2_097_152  # the paper's 20B tokens
