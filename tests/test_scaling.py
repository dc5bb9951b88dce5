"""Scaling-law fits, bootstrap intervals and equivalence savings (ablations.scaling), from synthetic laws and
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

from ablations import load_grid, write_report
from ablations.scaling import (
    LadderPoint,
    PowerLaw,
    ScalingError,
    Sweep,
    analyse,
    bootstrap_losses,
    curve_savings,
    equivalence_saving,
    fit_power_law,
    load_sweep,
    non_embedding_params,
    scaling_claims,
)
from ablations.spec import GridError
from ablations.stats import verdict
from lit_resformer.cli import main
from lit_resformer.model import ModelConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def law(E, A, alpha):
    """A PowerLaw in x's own units (reference scale 1)."""
    return PowerLaw(E, A, alpha, 1.0)


def direct(E, A, alpha, x):
    return E + A * np.asarray(x, dtype=float) ** -alpha


# ----------------------------------------------------------------------------------------------
# the fit


def ladder_point(variant, label, x, losses, unigram_gap=3.0):
    """A ladder point whose runs' summaries put them `unigram_gap` nats below their unigram loss."""
    summaries = {s: {"final_val_loss": v, "unigram_val_loss": v + unigram_gap} for s, v in losses.items()}
    return LadderPoint(variant, label, f"{variant},{label}", float(x), losses, summaries=summaries)


def sweep_of(laws: dict, xs, seeds: int, noise: float, rng, unigram_gap=3.0) -> Sweep:
    """A sweep whose variant v has, at each x, `seeds` losses drawn around laws[v](x)."""
    points = {
        v: [ladder_point(v, f"s{i}", x, {s: float(direct(*p, x) + noise * rng.standard_normal()) for s in range(seeds)},
                         unigram_gap)
            for i, x in enumerate(xs)]
        for v, p in laws.items()
    }
    return Sweep("synthetic", "params", "val", next(iter(laws)), points)


def test_fit_recovers_a_known_law_within_the_bootstrap_interval():
    true = (2.5, 40.0, 0.28)
    xs = np.geomspace(2e5, 2e7, 6)
    sweep = sweep_of({"vanilla": true}, xs, seeds=6, noise=0.01, rng=np.random.default_rng(7))
    fit = analyse(sweep, replicates=400)["fits"]["vanilla"]
    for name, value in zip(("E", "A", "alpha"), true, strict=True):
        low, high = fit["ci"][name]
        assert low <= value <= high, (name, value, fit["ci"][name])
    # an interval so wide that it contains anything would pass the check above: it must also be informative
    assert fit["ci"]["alpha"][1] - fit["ci"]["alpha"][0] < 0.5 * true[2]
    assert fit["ci"]["E"][1] - fit["ci"]["E"][0] < 0.5
    assert abs(fit["alpha"] - true[2]) < 0.1 and abs(fit["E"] - true[0]) < 0.2


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
    result = analyse(sweep_of(laws, np.geomspace(3e5, 3e6, 4), seeds=4, noise=0.002, rng=rng), replicates=300)
    res, sv = result["savings"]["resformer"]["mean"], result["savings"]["svformer"]["mean"]
    assert res["ci_low"] <= 0.104 <= res["ci_high"] and res["ci_low"] > 0
    assert sv["ci_low"] <= -0.15 <= sv["ci_high"] and sv["ci_high"] < 0
    (claim,) = result["claims"]
    assert claim["verdict"] == "reproduced" and claim["n"] == 4
    assert set(claim) == {"claim", "grid", "verdict", "delta", "ci_low", "ci_high", "n", "metric", "note"}
    assert claim["note"] == ""
    assert claim["delta"] == pytest.approx(0.104, abs=0.03)
    json.dumps(result, allow_nan=False)  # the result is plain JSON


@pytest.mark.parametrize("shift, noise, expected", [(-0.2, 0.002, "contradicted"), (0.0, 0.05, "inconclusive")])
def test_claim_verdict_other_ways(shift, noise, expected):
    E, A, alpha = 2.4, 60.0, 0.3
    laws = {"vanilla": (E, A, alpha), "resformer": (E, A * (1 - shift) ** alpha, alpha)}
    result = analyse(sweep_of(laws, np.geomspace(3e5, 3e6, 4), seeds=3, noise=noise, rng=np.random.default_rng(5)),
                     replicates=200)
    assert result["claims"][0]["verdict"] == expected


def test_a_claim_on_runs_at_the_unigram_plateau_is_inconclusive():
    # the same clear saving as above, but the runs end less than 1 nat below their unigram loss
    laws = {"vanilla": (2.4, 60.0, 0.3), "resformer": (2.4, 60.0 * (1 - 0.2) ** 0.3, 0.3)}
    sweep = sweep_of(laws, np.geomspace(3e5, 3e6, 4), seeds=3, noise=0.002, rng=np.random.default_rng(5), unigram_gap=0.5)
    sweep.points["vanilla"][0].summaries[2]["unigram_val_loss"] = None  # and one run logged no unigram loss
    (claim,) = analyse(sweep, replicates=100)["claims"]
    assert claim["ci_low"] > 0 and claim["verdict"] == "inconclusive"
    assert claim["note"].startswith("24 of 24 runs not past the unigram plateau")


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
    with pytest.raises(ScalingError, match="at least 2 seeds at every ladder point"):
        next(bootstrap_losses(sweep.points, 10, np.random.default_rng(0)))
    result = analyse(sweep, replicates=100)
    assert result["replicates"] == 0 and result["fits"]["vanilla"]["ci"] is None
    assert any("No confidence intervals" in note and "one seed only" in note for note in result["notes"])
    assert result["claims"][0]["verdict"] == "inconclusive" and result["claims"][0]["ci_low"] is None


def test_bootstrap_draws_the_same_seeds_for_variants_that_share_them():
    # resformer = vanilla - 0.1 seed by seed: paired draws keep every replicate's difference at exactly 0.1
    points = {
        v: [ladder_point(v, f"s{i}", 10 ** (i + 5), {s: 3.0 - 0.2 * i + 0.05 * s - (0.1 if v == "resformer" else 0.0)
                                                    for s in range(3)})
            for i in range(3)]
        for v in ("vanilla", "resformer")
    }
    for replicate in bootstrap_losses(points, 50, np.random.default_rng(1)):
        np.testing.assert_allclose(replicate["vanilla"] - replicate["resformer"], 0.1, atol=1e-12)


def test_curve_reading_of_the_data_saving():
    # vanilla falls linearly to f at step S=200; the variant is 0.205 lower (train) / 0.105 lower (val), so it
    # reaches f when 2(1 - s/S) <= 0.205, i.e. at s = 180 (train), and at the eval at 180 for val: 1 - 180/200
    steps = np.arange(1, 201)
    final = 3.0

    def point(variant, train_shift, val_shift, seeds=(0, 1)):
        train = pd.Series(final + 2 * (1 - steps / 200) - train_shift, index=steps).rolling(10, min_periods=1).mean()
        evals = np.arange(20, 201, 20)
        val = pd.Series(final + (1 - evals / 200) - val_shift, index=evals)
        return LadderPoint(variant, "d=64", f"{variant},d=64", 1.0, dict.fromkeys(seeds, final),
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


def make_sweep_dir(tmp_path, matrix=None, variants=VARIANTS, scaling="params", skip=(), loss=size_law):
    """A grid run directory as the runner leaves it (manifest from a real grid file, experiment.yaml, metrics,
    summary), every run's final losses from `loss(variant, config)` +- 0.004 by seed."""
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
        write_run(grid_dir / run.cell / f"seed{run.seed}", run.config, loss(variant, run.config) + (0.004 if run.seed else -0.004))
    return grid_dir


def write_run(path, config, final):
    """Training loss falls linearly to `final` (final + CURVE_DROP (1 - s/S) at step s of S); validation at S/2 and S."""
    steps = config["trainer"]["max_steps"]
    (path / "csv/version_0").mkdir(parents=True)
    (path / "experiment.yaml").write_text(yaml.safe_dump(config))
    with open(path / "csv/version_0/metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "train/loss", "train/tokens_seen", "val/loss"])
        writer.writeheader()
        for step in range(1, steps + 1):
            writer.writerow({"step": step, "train/loss": final + CURVE_DROP * (1 - step / steps), "train/tokens_seen": step * TOKENS_PER_STEP})
            if step % (steps // 2) == 0:
                writer.writerow({"step": step, "val/loss": final + CURVE_DROP * (1 - step / steps)})
    d = config["model"]["config"].get("d_model", 128)
    total = analytic_n(d, svformer=config["model"]["config"].get("share", {}).get("svformer", False)) + 2 * VOCAB * d
    (path / "summary.json").write_text(json.dumps({"status": "done", "params": total, "final_val_loss": final,
                                                  "unigram_val_loss": final + 3.0}))


def test_sweep_reads_n_from_each_run_and_d_from_its_metrics(tmp_path):
    sweep = load_sweep(make_sweep_dir(tmp_path))
    assert sweep.axis == "params" and sweep.baseline == "vanilla"
    assert [p.x for p in sweep.points["vanilla"]] == [analytic_n(d) for d in WIDTHS]
    assert [p.x for p in sweep.points["svformer"]] == [analytic_n(d, svformer=True) for d in WIDTHS]
    assert [p.label for p in sweep.points["resformer"]] == [f"d_model={d}" for d in WIDTHS]
    assert analytic_n(192) / analytic_n(64) > 8


def test_total_parameter_count_comes_from_the_run_summaries(tmp_path):
    sweep = load_sweep(make_sweep_dir(tmp_path), param_count="total")
    assert [p.x for p in sweep.points["vanilla"]] == [analytic_n(d) + 2 * VOCAB * d for d in WIDTHS]
    with pytest.raises(ScalingError, match=r"param_count='all' is not allowed; choose one of \['non-embedding', 'total'\]"):
        load_sweep(tmp_path / "runs/sweep", param_count="all")


def test_the_papers_table_5_gives_its_headline_under_its_size_names():
    # The paper names its models by all their parameters (82M, 180M, 468M). Its Table 5 average validation
    # losses, fitted per variant over those N, give a mean saving of 10.5%: its published 10.4%.
    vanilla, resformer = [2.7389, 2.5015, 2.2806], [2.7117, 2.4692, 2.2537]
    n = np.array([82e6, 180e6, 468e6])
    saving = equivalence_saving(fit_power_law(n, vanilla)[0], fit_power_law(n, resformer)[0], n)
    assert saving.mean() == pytest.approx(0.104, abs=0.002)


def test_cli_end_to_end_on_synthetic_runs(tmp_path, capsys):
    grid_dir = make_sweep_dir(tmp_path)
    main(["scaling", str(grid_dir), "--replicates", "200"])
    assert "ResFormer needs fewer parameters for the same loss: reproduced" in capsys.readouterr().out
    result = json.loads((grid_dir / "scaling/scaling.json").read_text())
    (sweep,) = result["sweeps"]
    vanilla = sweep["fits"]["vanilla"]
    assert vanilla["E"] == pytest.approx(LAW[0], abs=1e-3) and vanilla["alpha"] == pytest.approx(LAW[2], abs=1e-3)
    for variant in ("resformer", "svformer"):
        for row in sweep["savings"][variant]["per_point"]:
            assert row["saving"] == pytest.approx(SAVING[variant], abs=1e-3)
            assert row["ci_low"] <= SAVING[variant] <= row["ci_high"]
    assert result["claims"] == sweep["claims"] and result["claims"][0]["verdict"] == "reproduced"
    markdown = (grid_dir / "scaling/scaling.md").read_text()
    for text in ("Parameter-equivalence saving", "the paper's reading, within one run", "**reproduced**", "10.4%"):
        assert text in markdown
    for name in ("scaling_sweep_fit.png", "scaling_sweep_saving.png"):
        assert (grid_dir / "scaling" / name).read_bytes().startswith(PNG_MAGIC)
        assert f"({name})" in markdown


def test_curve_reading_on_run_folders_matches_the_written_curves(tmp_path):
    grid_dir = make_sweep_dir(tmp_path, variants={k: VARIANTS[k] for k in ("vanilla", "resformer")})
    result = analyse(load_sweep(grid_dir), replicates=100)
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


def test_report_has_a_scaling_section_for_a_sweep_grid(tmp_path, monkeypatch):
    monkeypatch.setattr("ablations.scaling.REPORT_REPLICATES", 100)  # fewer bootstrap fits: the section is tested here
    bootstraps = []
    original = bootstrap_losses

    def counted(*args, **kwargs):
        bootstraps.append(args[1])
        return original(*args, **kwargs)

    monkeypatch.setattr("ablations.scaling.bootstrap_losses", counted)
    grid_dir = make_sweep_dir(tmp_path, variants={k: VARIANTS[k] for k in ("vanilla", "resformer")})
    write_report(grid_dir)
    report = (grid_dir / "report.md").read_text()
    assert "## Scaling: sweep (L(N) over model size)" in report and "(plots/scaling_sweep_fit.png)" in report
    assert bootstraps == [100]  # one bootstrap serves both the scaling section and the Claims table
    assert "| ResFormer needs fewer parameters for the same loss | resformer vs vanilla |" in report
    assert (grid_dir / "plots/scaling_sweep_fit.png").read_bytes().startswith(PNG_MAGIC)


def test_report_of_a_sweep_that_cannot_be_fitted_says_why(tmp_path):
    grid_dir = make_sweep_dir(tmp_path, matrix=width_matrix((64, 128)))
    write_report(grid_dir)
    assert "No fit: sweep: vanilla has finished runs at 2 ladder point(s)" in (grid_dir / "report.md").read_text()


def test_token_budget_sweep_fits_l_of_d(tmp_path):
    def token_law(variant, config):
        tokens = config["trainer"]["max_steps"] * TOKENS_PER_STEP
        return float(direct(2.0, 500.0, 0.35, tokens / (1 - (0.136 if variant == "resformer" else 0.0))))

    grid_dir = make_sweep_dir(tmp_path, matrix={"trainer.max_steps": [20, 40, 80]}, loss=token_law, scaling="tokens",
                              variants={k: VARIANTS[k] for k in ("vanilla", "resformer")})
    result = analyse(load_sweep(grid_dir), replicates=200)
    assert result["axis"] == "tokens" and result["x"] == "D"
    assert [p["x"] for p in result["fits"]["vanilla"]["points"]] == [s * TOKENS_PER_STEP for s in (20, 40, 80)]
    assert result["savings"]["resformer"]["mean"]["saving"] == pytest.approx(0.136, abs=1e-3)
    assert result["claims"][0]["claim"] == "ResFormer needs less data for the same loss"
    assert result["claims"][0]["verdict"] == "reproduced"


# ----------------------------------------------------------------------------------------------
# degenerate sweeps: one clear message each, never a silently wrong fit


def test_fewer_than_three_sizes(tmp_path):
    with pytest.raises(ScalingError, match=r"vanilla has finished runs at 2 ladder point\(s\).*at least 3"):
        load_sweep(make_sweep_dir(tmp_path, matrix=width_matrix((64, 128))))


def test_non_monotone_ladder(tmp_path):
    def undertrained(variant, config):  # the largest model ends above the next one
        return size_law(variant, config) + (0.5 if config["model"]["config"]["d_model"] == 192 else 0.0)

    with pytest.raises(ScalingError, match=r"vanilla's loss does not fall along the ladder: d_model=192"):
        load_sweep(make_sweep_dir(tmp_path, loss=undertrained))


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
    with pytest.raises(ScalingError, match="replicates=10 is too few"):
        analyse(load_sweep(grid_dir), replicates=10)
    with pytest.raises(SystemExit, match="holds no sweep grid"):
        main(["scaling", str(tmp_path)])


def test_grid_files_reject_an_unknown_scaling_axis(tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "baseline": "a", "cells": {"a": {}},
                                                     "report": {"scaling": "size"}}))
    with pytest.raises(GridError, match=r"report.scaling='size' is not allowed; choose one of \['params', 'tokens'\]"):
        load_grid(tmp_path / "g.yaml")


def test_scaling_claims_for_the_scoreboard(tmp_path):
    (claim,) = scaling_claims(make_sweep_dir(tmp_path), replicates=100)
    assert claim["grid"] == "sweep" and claim["verdict"] == "reproduced"
    assert claim["delta"] == pytest.approx(0.104, abs=1e-3) and claim["ci_low"] <= 0.104 <= claim["ci_high"]


def test_the_claims_scoreboard_judges_a_sweep_on_its_fitted_saving(tmp_path):
    from ablations.claims import scoreboard

    (verdict,) = scoreboard([make_sweep_dir(tmp_path)])
    assert verdict.claim.claim == "ResFormer needs fewer parameters for the same loss"
    assert verdict.verdict == "reproduced" and verdict.delta == pytest.approx(0.104, abs=1e-3)
    (tmp_path / "flat").mkdir()
    flat = make_sweep_dir(tmp_path / "flat", loss=lambda variant, config: 3.0)  # no law to fit
    (verdict,) = scoreboard([flat])
    assert verdict.verdict == "inconclusive" and verdict.note.startswith("no fit:")


# ----------------------------------------------------------------------------------------------
# the sweep grid files

REPO = Path(__file__).resolve().parent.parent
VARIANT_NAMES = {"vanilla", "resformer", "svformer"}


def tokens_per_run(config):
    per_step = config["global_batch_tokens"] or config["data"]["micro_batch_size"] * config["data"]["seq_len"]
    return config["trainer"]["max_steps"] * per_step


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


def test_cpu_token_budget_grid():
    grid = load_grid(REPO / "configs/grids/scaling-tokens.yaml")
    assert grid.report["scaling"] == "tokens" and len(grid.seeds) >= 2 and grid.baseline == "vanilla"
    for variant in {c.family for c in grid.cells}:
        cells = [c for c in grid.cells if c.family == variant]
        budgets = {tokens_per_run(grid.configs[c.name]) for c in cells}
        assert len(budgets) == len(cells) >= 3 and min(budgets) >= 1_000_000
        # one size (each budget is its own full schedule: the cosine ends at the run's own max_steps)
        assert len({non_embedding_params(grid.configs[c.name]["model"]["config"]) for c in cells}) == 1


def test_paper_size_ladder_grid():
    grid = load_grid(REPO / "configs/grids/scaling-size-paper.yaml")
    assert grid.report["scaling"] == "params" and {c.family for c in grid.cells} == VARIANT_NAMES
    sizes = {c.coords["model.config.size"] for c in grid.cells}
    assert sizes == {"82M", "180M", "320M", "468M"}
    for cell in grid.cells:
        assert tokens_per_run(grid.configs[cell.name]) == 10_000 * 2_097_152  # the paper's 20B tokens
