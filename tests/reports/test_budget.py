"""The budget table (lit_resformer.reports.budget): parameters, FLOPs, KV bytes and step time per cell, against hand counts, from a
synthetic grid run directory (manifest, run configs, metrics and summaries written here)."""

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml

from lit_resformer.grids import load_grid
from lit_resformer.reports.budget import budget_rows, budget_section
from lit_resformer.reports.grid_report import write_report
from lit_resformer.runs.results import load_results
from lit_resformer.runs.run_dir import RunDir

# tiny (lit_resformer/model/config.py PRESETS) with the CPU presets' vocabulary, trained at 64 tokens
LAYERS, HEADS, D_MODEL, FFN, VOCAB, SEQ_LEN = 6, 4, 128, 352, 4096, 64
BASE = {"seed_everything": 0, "trainer": {"max_steps": 100}, "model": {"config": {"size": "tiny"}, "lr": 1e-3},
        "data": {"seq_len": SEQ_LEN}}
VALUE_EMBED = {"layers": "alternate", "gate_width": 12, "gate_scale": 3.0}  # nanochat: tables on layers 2, 4, 6
CELLS = {"vanilla": {}, "value-embed": {"model.config.value_embed": VALUE_EMBED},
         "resformer": {"model.config.residual.target": "v"}, "deeper": {"model.config.n_layer": 8}}
TOKENS_PER_STEP, STEPS = 512, 100
TOKENS_PER_SEC = {0: 1000.0, 1: 2000.0}  # seed -> its median throughput: 0.512 s and 0.256 s a step

# Hand count of tiny. A layer: q, k, v, o (d x d each), SwiGLU's gate, up and down (d x ffn each), two RMSNorm weights.
LAYER_MATRICES = 4 * D_MODEL * D_MODEL + 3 * D_MODEL * FFN
NON_EMBEDDING = LAYERS * (LAYER_MATRICES + 2 * D_MODEL) + D_MODEL  # and the final norm
EMBEDDINGS = 2 * VOCAB * D_MODEL  # token embedding and LM head (untied)
# nanochat's value embeddings on 3 of the 6 layers: a vocab x d table each (4 KV heads x 32 channels) and a gate of
# one row of gate_width weights per KV head.
VE_LAYERS, VE_TABLE, VE_GATE = 3, VOCAB * D_MODEL, HEADS * 12


def _write_run(grid_dir: Path, cell: str, seed: int, config: dict, status: str = "done") -> None:
    """experiment.yaml as the runner writes it, a metrics CSV in Lightning's layout and summary.json."""
    run = RunDir(grid_dir / cell / f"seed{seed}")
    (run.path / "csv/version_0").mkdir(parents=True)
    run.write_experiment(config)
    with open(run.path / "csv/version_0/metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "train/loss", "val/loss"])
        writer.writeheader()
        for step in range(STEPS):
            writer.writerow({"step": step, "train/loss": 6.0 - step / STEPS})
        writer.writerow({"step": STEPS - 1, "val/loss": 5.2})
    (run.path / "summary.json").write_text(json.dumps({
        "grid": "g", "cell": cell, "seed": seed, "status": status, "steps": STEPS - 1,
        "tokens_seen": float(STEPS * TOKENS_PER_STEP), "tokens_per_sec": TOKENS_PER_SEC[seed]}))


@pytest.fixture(scope="module")
def grid_dir(tmp_path_factory) -> Path:
    """vanilla, value-embed and resformer with two finished seeds (resformer's second failed), deeper not started."""
    tmp_path = tmp_path_factory.mktemp("budget")
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"name": "g", "base": "base.yaml", "baseline": "vanilla", "seeds": [0, 1],
                                    "cells": CELLS}, sort_keys=False))
    grid = load_grid(path)
    grid_dir = tmp_path / "runs/g"
    grid_dir.mkdir(parents=True)
    (grid_dir / "grid.yaml").write_text(yaml.safe_dump(grid.manifest(), sort_keys=False))
    for run in grid.runs():
        if run.cell != "deeper":
            failed = run.cell == "resformer" and run.seed == 1
            _write_run(grid_dir, run.cell, run.seed, run.config, status="failed" if failed else "done")
    return grid_dir


@pytest.fixture(scope="module")
def rows(grid_dir):
    return {row.cell: row for row in budget_rows(load_results(grid_dir))}


def test_parameter_split_matches_a_hand_count(rows):
    vanilla, value_embed = rows["vanilla"], rows["value-embed"]
    assert (vanilla.params, vanilla.non_embedding_params) == (NON_EMBEDDING + EMBEDDINGS, NON_EMBEDDING)
    assert vanilla.params == 2_254_464  # tiny's count in the committed reports' Cost sections
    # the tables count as embeddings; their gates are weights of the transformer
    assert value_embed.params == NON_EMBEDDING + EMBEDDINGS + VE_LAYERS * (VE_TABLE + VE_GATE)
    assert value_embed.non_embedding_params == NON_EMBEDDING + VE_LAYERS * VE_GATE
    assert rows["resformer"].params == vanilla.params  # the value residual adds no parameters


def test_flops_per_token_match_the_hand_formula(rows):
    attention = 12 * LAYERS * D_MODEL * SEQ_LEN
    # 6 x the weight matrices, the LM head included and the embedding not; a lookup table costs no FLOPs
    assert rows["vanilla"].flops_per_token == 6 * (LAYERS * LAYER_MATRICES + VOCAB * D_MODEL) + attention
    assert rows["value-embed"].flops_per_token == rows["vanilla"].flops_per_token + 6 * VE_LAYERS * VE_GATE
    # K and V of every layer, fp32
    assert rows["vanilla"].kv_cache_bytes_per_token == rows["value-embed"].kv_cache_bytes_per_token == \
        2 * LAYERS * D_MODEL * 4


def test_step_time_from_finished_runs_only(rows):
    per_seed = [TOKENS_PER_STEP / rate for rate in TOKENS_PER_SEC.values()]
    assert rows["vanilla"].step_time_s == pytest.approx(sum(per_seed) / 2)
    assert rows["vanilla"].timed_runs == 2
    assert (rows["resformer"].step_time_s, rows["resformer"].timed_runs) == (pytest.approx(per_seed[0]), 1)
    deeper = rows["deeper"]  # not started: no config to build, no run to time
    assert (deeper.params, deeper.flops_per_token, deeper.step_time_s, deeper.timed_runs) == (None, None, None, 0)


def test_section_renders_each_cell_with_ratios_to_its_baseline(grid_dir, rows):
    section = budget_section(load_results(grid_dir))
    assert section.startswith("## Budget\n")
    assert "value-embedding tables" in section  # the note says which convention the split follows
    vanilla, value_embed = rows["vanilla"], rows["value-embed"]
    assert (f"| vanilla (baseline) | {vanilla.params:,} | {vanilla.non_embedding_params:,} | "
            f"{vanilla.flops_per_token / 1e6:,.2f} | 6,144 | 0.384 | 2 |") in section
    params_ratio = value_embed.params / vanilla.params
    assert f"| value-embed | {value_embed.params:,} ({params_ratio:.2f}x) |" in section
    assert round(params_ratio, 2) == 1.70
    assert "| resformer | 2,254,464 | 1,205,888 |" in section  # equal to the baseline: no ratio shown
    assert "| 0.512 (1.33x) | 1 |" in section
    assert "| deeper | – | – | – | – | – | 0 |" in section


def test_gpu_runs_state_their_mfu_against_the_datasheet_and_the_measured_peak(tmp_path, grid_dir, rows):
    """vanilla's two runs as if trained on an H200 beside nine others, with the idle card's peak measured: the
    utilisation table's figures by hand; a CPU-only grid has no such table."""
    assert "GPU utilisation" not in budget_section(load_results(grid_dir))
    gpu_dir = tmp_path / "g"
    shutil.copytree(grid_dir, gpu_dir)
    for seed in (0, 1):
        path = gpu_dir / f"vanilla/seed{seed}/summary.json"
        summary = json.loads(path.read_text())
        summary["provenance"] = {"device": "NVIDIA H200"}
        summary["device_use"] = {"measured_peak_flops": 776.4e12, "runs_sharing_device": 10}
        path.write_text(json.dumps(summary))
    section = budget_section(load_results(gpu_dir))
    achieved = rows["vanilla"].flops_per_token * sum(TOKENS_PER_SEC.values()) / 2
    mfu = achieved / 989.4e12
    row = (f"| vanilla | NVIDIA H200 | 2 | 10 | {achieved / 1e12:.3g} | {100 * mfu:.3g}% | "
           f"{100 * achieved / 776.4e12:.3g}% | {100 * mfu * 10:.3g}% |")
    assert row in section.split("### GPU utilisation")[1]
    assert "| value-embed |" not in section.split("### GPU utilisation")[1]  # its runs trained on a CPU


@pytest.mark.integration
def test_the_grid_report_holds_the_budget_section(grid_dir):
    write_report(grid_dir)
    report = (grid_dir / "report.md").read_text()
    assert report.index("## Cost") < report.index("## Budget") < report.index("## Runs")
    assert "| value-embed | 3,827,472 (1.70x) |" in report


def on_machines(grid_dir: Path, copy: Path, devices: dict[tuple[str, int], str]) -> Path:
    """A copy of the grid whose runs (cell, seed) trained on the devices given."""
    shutil.copytree(grid_dir, copy)
    for (cell, seed), device in devices.items():
        path = copy / f"{cell}/seed{seed}/summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "provenance": {"device": device}}))
    return copy


# vanilla on X (1000 and 2000 tokens/s), value-embed's seed 0 on X and seed 1 on Y, resformer on Y alone
MACHINES = {("vanilla", 0): "CPU: X", ("vanilla", 1): "CPU: X", ("value-embed", 0): "CPU: X",
            ("value-embed", 1): "CPU: Y", ("resformer", 0): "CPU: Y"}


def test_step_times_are_compared_on_the_same_machine_only(tmp_path, grid_dir):
    section = budget_section(load_results(on_machines(grid_dir, tmp_path / "g", MACHINES)))
    assert "**A** = CPU: X; **B** = CPU: Y" in section
    assert "| 0.384 [A] | 2 |" in section  # vanilla: both its runs on A
    # value-embed's seed 0 on A against vanilla's mean there, 0.512 / 0.384; its seed 1 on B has no baseline to face
    assert "| 0.384 [A, B] (1.33x) | 2 |" in section
    assert "| 0.512 [B] (other machine than the baseline) | 1 |" in section  # resformer's only run, on B


@pytest.mark.integration
def test_the_cost_table_marks_machines_and_compares_throughput_on_one(tmp_path, grid_dir):
    write_report(on_machines(grid_dir, tmp_path / "g", MACHINES))
    cost = (tmp_path / "g/report.md").read_text().split("## Cost")[1].split("## Budget")[0]
    assert "**A** = CPU: X; **B** = CPU: Y" in cost
    # (these summaries record no parameters or cache bytes)
    assert "| vanilla | – | – | – | 1,500 [A] | A (2) | 1.000 |" in cost
    assert "| 1,000 [A], 2,000 [B] | A (1), B (1) | 0.667 |" in cost  # value-embed on A: 1,000 against 1,500
    assert "| resformer | – | – | – | 1,000 [B] | B (1) | – (other machine) |" in cost
