"""The grid report, from synthetic run directories (metrics CSVs and summaries written here)."""

import base64
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from helpers import chromium

from lit_resformer.measures.stats import critical_point
from lit_resformer.reports.grid_report import write_report
from lit_resformer.writing import screenshot
from tests.helpers.grid_dirs import RESFORMER_VAL, VANILLA_VAL, make_grid_dir, synthetic_grid, write_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def embedded_images(index: Path) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', index.read_text())]


# Final validation losses chosen so the paired differences are known: -0.03, -0.05, -0.01.
def test_report_tables_plots_and_confidence_interval(tmp_path):
    grid_dir = synthetic_grid(tmp_path)
    vanilla_val, resformer_val = VANILLA_VAL, RESFORMER_VAL
    index = write_report(grid_dir)
    report = (grid_dir / "report.md").read_text()

    # every plot is a PNG file next to the report, referenced by report.md and embedded in index.html
    pngs = sorted((grid_dir / "plots").glob("*.png"))
    names = {p.stem for p in pngs}
    assert {"train_loss", "relative_train_loss_w10", "relative_train_loss_w100", "val_loss_by_domain", "val_loss"} <= names
    for png in pngs:
        assert png.read_bytes().startswith(PNG_MAGIC)
        assert f"](plots/{png.name})" in report
    images = embedded_images(index)
    assert len(images) == len(pngs) and all(i.startswith(PNG_MAGIC) for i in images)
    assert 'src="plots/' not in index.read_text()  # self-contained: every image is inlined

    # Δ val with a 95% t interval over n = 3 paired seeds (a seed's runs share its own data order), against scipy
    diffs = np.array([resformer_val[s] - vanilla_val[s] for s in (0, 1, 2)])
    low, high = scipy.stats.t.interval(0.95, df=2, loc=diffs.mean(), scale=scipy.stats.sem(diffs))
    assert f"{diffs.mean():+.4f} [{low:+.4f}, {high:+.4f}] (n=3, paired)" in report
    # mean ± std of the final validation loss (sample std over seeds)
    assert f"{np.mean(list(vanilla_val.values())):.4f} ± {np.std(list(vanilla_val.values()), ddof=1):.4f}" in report

    # Table 5 form: domains, their unweighted average, and the run's overall loss
    table5 = report[report.index("## Validation loss by domain"):]
    assert "| cell | code | english | avg | overall |" in table5
    assert f"| resformer | {np.mean(list(resformer_val.values())) - 0.1:.4f} |" in table5
    # cost table and run status
    assert "| resformer | 1,024 | 512 | 1.000 | 1,000 | unrecorded (3) | 1.000 |" in report
    # the lead names the cells as the grid resolved them
    assert "3 cells: **vanilla** (the baseline), resformer, bad; seeds [0, 1, 2]" in report.split("\n\n")[1]
    assert "| bad/seed0 | diverged |" in report and "diverged at step 2" in report
    assert "| bad/seed1 | failed |" in report and "RuntimeError: out of memory |" in report
    # optional sections only when their files exist
    assert "Zero-shot" not in report and "Attention concentration" not in report


def test_critical_point_of_fig14_grid(tmp_path):
    grid_dir = make_grid_dir(tmp_path, {
        "baseline": "vanilla", "seeds": [0],
        "cells": {"vanilla": {}, "svformer": {"model.config.share.svformer": True}},
        "matrix": {"data.seq_len": [64, 256]},
        "report": {"critical_point_window": 1},
    })
    crossings = {64: 60, 256: 150}
    for seq_len, crossing in crossings.items():
        vanilla = {s: 3 + 2 * math.exp(-s / 50) for s in range(200)}
        # SVFormer ahead early, briefly behind (steps 30-39), ahead again, then overtaken for good
        def relative(s, crossing=crossing):
            if s >= crossing:
                return 0.03
            return 0.02 if 30 <= s < 40 else -0.05
        write_run(grid_dir, f"vanilla,seq_len={seq_len}", 0, vanilla)
        write_run(grid_dir, f"svformer,seq_len={seq_len}", 0, {s: v + relative(s) for s, v in vanilla.items()})
    write_report(grid_dir)
    report = (grid_dir / "report.md").read_text()
    assert "| svformer,seq_len=64 | vanilla,seq_len=64 | 60 |" in report
    assert "| svformer,seq_len=256 | vanilla,seq_len=256 | 150 |" in report
    assert (grid_dir / "plots/critical_point.png").read_bytes().startswith(PNG_MAGIC)


def test_crossing_searched_seed_by_seed_with_interval_gap_and_trend(tmp_path):
    """Fig. 14's evidence form: at 64 tokens every seed crosses (mean critical step with its t interval over
    seeds, in steps and tokens); at 256 none does, so the table gives the lead at the last step, its trend and the
    extrapolated close, each per seed with a one-sided t over seeds."""
    grid_dir = make_grid_dir(tmp_path, {
        "baseline": "vanilla", "seeds": [0, 1, 2],
        "cells": {"vanilla": {}, "svformer": {"model.config.share.svformer": True}},
        "matrix": {"data.seq_len": [64, 256]},
        "report": {"critical_point_window": 1},
    })
    crossings = {0: 100, 1: 120, 2: 170}
    leads = {0: -0.10, 1: -0.12, 2: -0.08}  # relative loss at step 0 at 256 tokens, shrinking linearly
    shrink = {0: 0.0003, 1: 0.0004, 2: 0.0002}  # nats a step
    for seed in (0, 1, 2):
        vanilla = {s: 3 + 2 * math.exp(-s / 50) + 0.01 * seed for s in range(200)}
        summary = {"tokens_seen": 200 * 2048, "steps": 199}
        write_run(grid_dir, "vanilla,seq_len=64", seed, vanilla, **summary)
        write_run(grid_dir, "svformer,seq_len=64", seed,
                  {s: v + (0.02 + 0.01 * seed if s >= crossings[seed] else -0.05) for s, v in vanilla.items()},
                  **summary)
        write_run(grid_dir, "vanilla,seq_len=256", seed, vanilla, **summary)
        write_run(grid_dir, "svformer,seq_len=256", seed,
                  {s: v + leads[seed] + shrink[seed] * s for s, v in vanilla.items()}, **summary)
    write_report(grid_dir)
    report = (grid_dir / "report.md").read_text()
    critical = report[report.index("## Critical points"):].splitlines()
    logs = np.log1p(list(crossings.values()))  # the interval is the log scale's, back-transformed
    low, high = np.expm1(scipy.stats.t.interval(0.95, 2, loc=logs.mean(), scale=scipy.stats.sem(logs)))
    geometric = np.expm1(logs.mean())
    row64 = next(line for line in critical if line.startswith("| svformer,seq_len=64 |"))
    assert f"| 100, 120, 170 | {geometric:,.0f} [{low:,.0f}, {high:,.0f}] ({geometric * 2048 / 1e6:.2f}M tokens) |" in row64
    row256 = next(line for line in critical if line.startswith("| svformer,seq_len=256 |"))
    assert "| –, –, – | none within 199 steps (0.4M tokens) in 3 of 3 seeds |" in row256
    gaps = np.array([leads[s] + shrink[s] * 199 for s in (0, 1, 2)])
    gap_p = scipy.stats.ttest_1samp(gaps, 0, alternative="less").pvalue
    assert f"| {gaps.mean():+.4f} (< " in row256 and f"p {gap_p:.3g}, n=3) |" in row256
    slopes = np.array([shrink[s] for s in (0, 1, 2)]) * 1000  # nats per 1,000 steps, exactly linear here
    assert f"| {slopes.mean():+.4f} (> " in row256 and "from step 150 |" in row256
    closes = -gaps.mean() / slopes.mean() * 1000
    assert f"| ~{closes:,.0f} more steps (~{closes * 2048 / 1e6:.0f}M tokens) |" in row256


def test_compute_counts_the_grids_own_runs_and_leaves_shared_ones_to_their_grid(tmp_path):
    grid_dir = make_grid_dir(tmp_path, {"baseline": "vanilla", "seeds": [0, 1],
                                        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}})
    curve = {s: 5 - s / 100 for s in range(50)}
    for seed, wall in ((0, 1800.0), (1, 900.0)):  # trained as another grid's runs: their summaries say so
        run = write_run(grid_dir, "vanilla", seed, {s: v + 0.1 * seed for s, v in curve.items()}, wall_time_sec=wall)
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "grid": "other"}))
    write_run(grid_dir, "resformer", 0, curve, wall_time_sec=3600.0)
    write_run(grid_dir, "resformer", 1, {s: v - 0.05 for s, v in curve.items()}, wall_time_sec=5400.0)
    write_report(grid_dir)
    assert ("Compute: 2 runs trained in this grid, 2.50 run-hours (the sum of their wall times, every attempt; times "
            "the threads each run used for CPU-hours); 2 runs shared from other grids, counted there.") in \
        (grid_dir / "report.md").read_text()


def test_critical_point_definition():
    steps = [0, 10, 20, 30, 40]
    assert critical_point(pd.Series([-1, 1, -1, 1, 1], index=steps)) == 30
    assert critical_point(pd.Series([1, 1, 1, 1, 1], index=steps)) == 0  # behind from the start
    assert critical_point(pd.Series([1, 1, 1, 1, -1], index=steps)) is None  # ahead at the end
    assert critical_point(pd.Series([-1, 1, 0, 1, 1], index=steps)) == 30  # a tie is not "above"


def real_analysis_json(tmp_path: Path) -> str:
    """An analysis.json written by lit_resformer.analysis itself, for a small random model."""
    import torch

    from lit_resformer.analysis import analyze
    from lit_resformer.model import ModelConfig, Transformer

    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layer=3, n_head=2, d_model=16, ffn_dim=32, vocab_size=50, max_seq_len=16))
    analyze({"run": model}, torch.randint(0, 50, (2, 8)), tmp_path / "analysis")
    return (tmp_path / "analysis/analysis.json").read_text()


def test_zero_shot_and_analysis_sections_appear_when_results_exist(tmp_path):
    grid_dir = make_grid_dir(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}})
    analysis = real_analysis_json(tmp_path)
    for cell, shift in (("vanilla", 0.0), ("resformer", 0.02)):
        for seed, noise in ((0, -0.01), (1, 0.01)):  # two seeds: the table shows their mean
            run = write_run(grid_dir, cell, seed, {s: 3.0 - shift for s in range(20)}, {19: {"all": 3.0 - shift}})
            (run / "eval").mkdir()
            (run / "eval/results.json").write_text(json.dumps({"results": {
                "piqa": {"alias": "piqa", "acc,none": 0.6 + shift + noise, "acc_stderr,none": 0.01,
                         "acc_norm,none": 0.61 + shift + noise},
                "arc_easy": {"acc,none": 0.4 + shift, "acc_norm,none": 0.38 + shift},
            }}))
            (run / "analysis").mkdir()
            (run / "analysis/analysis.json").write_text(analysis)
    index = write_report(grid_dir)
    report = (grid_dir / "report.md").read_text()
    zero_shot = report[report.index("## Zero-shot accuracy"):]
    assert "| cell | metric | ARC-e | PIQA | Avg |" in zero_shot  # paper column order and labels
    assert "| resformer | acc | 0.420 | 0.620 | 0.520 |" in zero_shot
    assert "| resformer | acc_norm | 0.400 | 0.630 | 0.515 |" in zero_shot
    analysis = report[report.index("## Attention concentration"):]
    assert "| vanilla | 2 |" in analysis  # two analysed runs
    pngs = list((grid_dir / "plots").glob("*.png"))
    assert any(p.name == "analysis_entropy_by_layer.png" for p in pngs)
    assert len(embedded_images(index)) == len(pngs)


def test_report_refuses_a_directory_without_grid(tmp_path):
    (tmp_path / "runs/g").mkdir(parents=True)
    (tmp_path / "runs/g/grid.yaml").write_text("name: g\n")
    with pytest.raises(FileNotFoundError, match=r"no grid.yaml.*\['g'\]"):
        write_report(tmp_path / "runs")


@pytest.mark.slow
def test_index_html_shows_every_image_in_headless_chromium(tmp_path):
    chromium.browser()
    index = write_report(synthetic_grid(tmp_path))
    expected = len(list((index.parent / "plots").glob("*.png")))
    # How many of the report's images decoded.
    dom = chromium.framed_dom(index, "const images = Array.from(frame.images);"
                                     "const shown = images.filter(i => i.complete && i.naturalWidth > 0).length;"
                                     'document.body.setAttribute("data-images", shown + "/" + images.length);',
                              tmp_path, budget_ms=10000)
    assert f'data-images="{expected}/{expected}"' in dom, dom[-500:]
    shot = tmp_path / "report.png"
    screenshot(chromium.browser(), index, shot, 1200, 3000)
    assert shot.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize("axis, coords, heading, plot", [
    ("trainer.max_steps", {20: {"model.warmup_steps": 2}, 40: {"model.warmup_steps": 4}},
     "## Gap against training length", "gap_by_training_length"),
    ("data.seq_len", {16: {"data.micro_batch_size": 8}, 32: {"data.micro_batch_size": 4}},
     "## Gap against training sequence length", "gap_by_sequence_length"),
])
def test_gap_against_training_length_of_fig7_grid(tmp_path, axis, coords, heading, plot):
    """Fig. 7 left: the final gap to vanilla at each training length (steps, or tokens a sequence as the paper has
    it) with a t interval; these runs record no data order, so nothing says a seed's two runs share one: Welch's
    unpaired interval."""
    grid_dir = make_grid_dir(tmp_path, {
        "baseline": "vanilla", "seeds": [0, 1, 2],
        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}},
        "matrix": {axis: coords},
    })
    short = axis.split(".")[1]
    gaps = dict(zip(coords, [[-0.10, -0.20, -0.15], [-0.05, -0.02, -0.08]], strict=True))
    for length, by_seed in gaps.items():
        for seed, gap in enumerate(by_seed):
            vanilla = 3.0 + 0.1 * seed - length / 100
            write_run(grid_dir, f"vanilla,{short}={length}", seed, {s: 4.0 for s in range(20)},
                      {19: {"code": vanilla}})
            write_run(grid_dir, f"resformer,{short}={length}", seed, {s: 4.0 for s in range(20)},
                      {19: {"code": vanilla + gap}})
    write_report(grid_dir)
    report = (grid_dir / "report.md").read_text()
    section = report[report.index(heading):]
    for length, by_seed in gaps.items():
        vanilla = [3.0 + 0.1 * seed - length / 100 for seed in range(3)]
        resformer = [v + gap for v, gap in zip(vanilla, by_seed, strict=True)]
        low, high = scipy.stats.ttest_ind(resformer, vanilla, equal_var=False).confidence_interval(0.95)
        assert (f"| resformer | {length} | {np.mean(by_seed):+.4f} [{low:+.4f}, {high:+.4f}] (n=3, unpaired) | "
                "+0.0000") in section
    assert "| vanilla |" not in section.split("![")[0]  # the baseline is not compared with itself
    assert (grid_dir / f"plots/{plot}.png").read_bytes().startswith(PNG_MAGIC)
    assert report.count("## Gap against") == 1
