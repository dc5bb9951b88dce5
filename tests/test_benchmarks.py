"""Benchmarks plumbing: every benchmark runs at tiny sizes and writes contract-shaped JSON and markdown.

Nothing here is timed: values are checked for shape and for the facts that do not depend on the clock
(KV-cache bytes, the batch a budget holds by allocation).
"""

from __future__ import annotations

import json
import math
import os
import signal
import time

import pytest

from benchmarks import harness, targets
from benchmarks.__main__ import main
from benchmarks.harness import (
    BENCHMARKS,
    Metric,
    Result,
    Settings,
    build_within_budget,
    interleaved,
    update_markdown,
)

# The tests read one run of every benchmark (quick_run: all of them, --quick, about 15 s on an idle 2-core machine).
pytestmark = pytest.mark.integration

METRIC_KEYS = {"metric", "value", "unit", "target", "better"}
META_KEYS = {"machine", "cpu_model", "torch", "threads", "date", "device"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """All benchmarks once with --quick, one round, no warm-up (about 15 s on 2 cores)."""
    out = tmp_path_factory.mktemp("bench")
    markdown = out / "BENCHMARKS.md"
    code = main(["--quick", "--reps", "1", "--warmup", "0", "--threads", "1",
                 "--results-dir", str(out), "--markdown", str(markdown)])
    assert code == 0
    return out, markdown


def read_results(out, name):
    entries = json.loads((out / f"{name}.json").read_text())
    metrics = [e for e in entries if "meta" not in e]
    metas = [e["meta"] for e in entries if "meta" in e]
    return {m["metric"]: m for m in metrics}, metas


@pytest.mark.parametrize("name", BENCHMARKS)
def test_json_has_the_contract_shape(quick_run, name):
    out, _ = quick_run
    metrics, metas = read_results(out, name)
    assert metrics, f"{name} wrote no metric"
    for key, m in metrics.items():
        assert set(m) == METRIC_KEYS
        assert key.startswith(f"{name}.")
        assert isinstance(m["value"], float) and math.isfinite(m["value"])
        assert isinstance(m["unit"], str) and m["unit"]
        assert m["target"] is None or isinstance(m["target"], float)
        assert m["better"] in ("lower", "higher")
    assert len(metas) == 1
    assert META_KEYS <= set(metas[0])
    assert metas[0]["threads"] == 1 and metas[0]["quick"] is True


def test_markdown_has_one_table_section_per_benchmark_in_order(quick_run):
    _, markdown = quick_run
    text = markdown.read_text()
    assert text.startswith("# Benchmarks")
    positions = [text.index(f"## {name}\n") for name in BENCHMARKS]
    assert positions == sorted(positions)
    for name, start in zip(BENCHMARKS, positions, strict=True):
        section = text[start:text.index(f"<!-- /benchmark:{name} -->")]
        assert "|---|" in section and "QUICK" in section


def test_targets_are_where_the_issue_puts_them(quick_run):
    out, _ = quick_run
    found = {}
    for name in BENCHMARKS:
        metrics, _ = read_results(out, name)
        found.update({k: m["target"] for k, m in metrics.items() if m["target"] is not None})
    assert found == {
        "variant_overhead.resformer.ratio": 1.02,
        "variant_overhead.svformer.ratio": 1.0,
        "hf_throughput.tiny.ratio": 1.0,  # parity on the CPU, with either loss on HF's side
        "hf_throughput.tiny.ratio_own_loss": 1.0,
        "hf_throughput.mini.ratio": 1.0,
        "hf_throughput.mini.ratio_own_loss": 1.0,
        "loop_overhead.ratio": 0.97,
        "decode.svformer.kv_fraction": 9 / 16,
        "decode.svformer.ctx64.speed_vs_vanilla": 1.0,
        "decode.svformer.max_batch_ratio": 1.7,
        "data_loader.ratio": 20.0,
        "stacked.vs_processes": 1.0,  # stacking costs a CPU nothing
        "cli_refusal.fast.fit_negative_max_steps": 2.0,  # seconds: bad input answered before the heavy imports
        "cli_refusal.fast.grid_missing_file": 2.0,
        "claims_board.warm.claims": 5.0,  # seconds: the board with its judged grids cached
        "claims_board.warm.claims_html": 5.0,
    }


def test_targets_come_from_one_table_and_are_printed_as_they_stand(quick_run):
    """Every target a benchmark sets is today's entry of targets.py, in the same direction, and the markdown's
    header prints that table; a retired target (the CPU's old 1.2x over HF) appears nowhere."""
    out, markdown = quick_run
    for name in BENCHMARKS:
        metrics, _ = read_results(out, name)
        for metric, m in metrics.items():
            if m["target"] is None or metric == "decode.svformer.kv_fraction":  # an identity, computed
                continue
            # a target's key names the benchmark and what it compares; the metric adds the preset or context
            entries = [t for k, t in targets.CPU.items() if set(k.split(".")) <= set(metric.split("."))]
            assert [(t.value, t.better) for t in entries] == [(m["target"], m["better"])], metric
    text = markdown.read_text()
    assert targets.markdown() in text
    hf = text[text.index("## hf_throughput"):text.index("<!-- /benchmark:hf_throughput -->")]
    assert ">= 1 met" in hf or ">= 1 MISSED" in hf
    assert ">= 1.2" not in hf


def test_loss_path_records_both_timings_and_the_choice(quick_run):
    out, markdown = quick_run
    metrics, metas = read_results(out, "loss_path")
    cells = {key.rsplit(".", 1)[0] for key in metrics}
    assert cells == {"loss_path.v128.tiny.t64", "loss_path.v300.tiny.t64"}
    for cell in cells:
        assert {f"{cell}.plain_ms", f"{cell}.chunked_ms", f"{cell}.chunked_vs_plain"} <= set(metrics)
        assert metas[0]["choices"][cell.removeprefix("loss_path.")]["picked"] == "plain"  # a small CPU step
    section = markdown.read_text().split("## loss_path")[1]
    assert "| 300 (384 rows) | tiny (d=32) | 64 |" in section and "| plain |" in section


def test_the_matmul_peak_is_the_best_of_several_sizes_with_its_spread(quick_run):
    out, _ = quick_run
    metrics, metas = read_results(out, "mfu")
    sizes = {k: m["value"] for k, m in metrics.items() if k.startswith("mfu.matmul_n")}
    assert len(sizes) == len(metas[0]["peak_sizes"]) >= 2
    assert metrics["mfu.peak_matmul_flops"]["value"] == max(sizes.values())
    assert metrics["mfu.peak_matmul_spread"]["value"] >= 0.0


def test_cpu_slots_reports_the_slotted_tokens_per_second_of_tiny_and_mini(quick_run):
    out, _ = quick_run
    metrics, _ = read_results(out, "cpu_slots")
    assert {"cpu_slots.slots_tokens_per_s", "cpu_slots.mini_slots_tokens_per_s", "cpu_slots.slots_vs_one_run"} \
        <= set(metrics)


def test_stacked_runs_are_measured_against_processes_and_the_grid_throughput_dry_runs_on_a_cpu(quick_run):
    """The CPU's 2-stack against two processes; the GPU benchmark's plumbing at tiny sizes on the CPU: one run per
    process and stacked (no CUDA graph and no MFU without a GPU)."""
    out, _ = quick_run
    metrics, _ = read_results(out, "stacked")
    assert {"stacked.processes_tokens_per_s", "stacked.stack_tokens_per_s", "stacked.vs_processes"} == set(metrics)
    metrics, _ = read_results(out, "grid_throughput")
    assert set(metrics) == {"grid_throughput.tiny.solo_tokens_per_s", "grid_throughput.tiny.stack_tokens_per_s",
                            "grid_throughput.tiny.stack_vs_one_run_per_process"}


def test_decode_measures_cache_bytes_and_batch_by_allocating(quick_run):
    out, _ = quick_run
    metrics, _ = read_results(out, "decode")
    value = {k: m["value"] for k, m in metrics.items()}
    # mini: 8 layers; SVFormer keeps K in every layer and V once -> 9 of 16 tensors.
    assert value["decode.svformer.kv_fraction"] == 9 / 16
    assert value["decode.gqa.kv_bytes_per_token"] == value["decode.vanilla.kv_bytes_per_token"] / 2
    # 1 MiB budget at 64 positions: vanilla holds 8 sequences (128 KiB each), SVFormer 14 (72 KiB each).
    assert value["decode.vanilla.max_batch_ctx64"] == 8
    assert value["decode.svformer.max_batch_ctx64"] == 14
    assert value["decode.svformer.max_batch_ratio"] == 14 / 8


def test_update_markdown_rewrites_one_section_and_keeps_the_others(tmp_path):
    path = tmp_path / "B.md"
    meta = {"date": "2026-01-01T00:00:00", "cpu_model": "cpu", "cpu_count": 2, "device": "cpu", "dtype": "fp32",
            "torch": "x", "threads": 1, "reps": 10, "warmup": 2, "load_average_1m": 0.0, "quick": False,
            "retain_freed_memory": False}
    update_markdown(Result("decode", [], "decode table v1"), meta, path)
    update_markdown(Result("variant_overhead", [], "variant table"), meta, path)
    update_markdown(Result("decode", [], "decode table v2"), meta, path)
    text = path.read_text()
    assert "variant table" in text and "decode table v2" in text and "decode table v1" not in text
    assert text.index("## variant_overhead") < text.index("## decode")
    assert text.count("## decode") == 1


def test_interleaved_rotates_the_order_and_skips_warmup():
    calls = []
    contenders = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = interleaved(contenders, Settings(reps=2, warmup=1))
    assert calls == list("abc" "bca" "cab")
    assert {k: len(v) for k, v in times.items()} == {"a": 2, "b": 2, "c": 2}


def test_bad_input_is_rejected_with_the_allowed_values(capsys):
    with pytest.raises(SystemExit):
        main(["no_such_benchmark"])
    assert "variant_overhead" in capsys.readouterr().err
    with pytest.raises(ValueError, match="better"):
        Metric("x.y", 1.0, "ms", better="bigger")


def test_gpu_sections_are_kept_apart_from_the_cpu_ones(tmp_path):
    path = tmp_path / "B.md"
    meta = {"date": "2026-01-01T00:00:00", "cpu_model": "cpu", "cpu_count": 16, "device": "cpu", "dtype": "fp32",
            "torch": "x", "threads": 1, "reps": 10, "warmup": 2, "load_average_1m": 0.0, "quick": False,
            "retain_freed_memory": False}
    gpu_meta = {**meta, "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "dtype": "bf16 autocast, torch.compile"}
    update_markdown(Result("mfu", [], "gpu table"), gpu_meta, path)
    update_markdown(Result("mfu", [], "cpu table"), meta, path)
    update_markdown(Result("decode", [], "cpu decode"), meta, path)
    text = path.read_text()
    assert "<!-- benchmark:mfu_cuda -->" in text and "## mfu (GPU: NVIDIA H100 80GB HBM3)" in text
    assert text.index("cpu decode") < text.index("cpu table") < text.index("gpu table")  # CPU sections first


def test_contenders_are_built_in_priority_order_within_the_budget():
    settings = Settings(budget_s=100.0)
    built = []

    def builder(name, spend=0.0, fail=False):
        def build():
            built.append(name)
            settings.started -= spend  # as if building took `spend` seconds
            if fail:
                raise RuntimeError("compiler error")
            return name
        return build

    steps, left_out = build_within_budget(
        {"a": builder("a", 10), "b": builder("b", fail=True), "c": builder("c", 75), "d": builder("d")},
        settings, keep=0.2)
    assert list(steps) == ["a", "c"] and built == ["a", "b", "c"]
    assert left_out == ["b (RuntimeError)", "d"]  # d: only 15 s of 100 left, under the 20 s kept for timing
    with pytest.raises(RuntimeError):  # a required contender that fails stops the benchmark
        build_within_budget({"a": builder("a", fail=True)}, Settings(budget_s=100.0), keep=0.2)


def test_sigterm_stops_building_and_keeps_what_was_built(monkeypatch):
    """The GPU session's time limit (SIGTERM) abandons the contender being built and starts no other."""
    monkeypatch.setattr(harness, "_sigterm", {"received": False, "building": False})
    previous = signal.getsignal(signal.SIGTERM)

    def interrupted():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises long before this ends

    try:
        harness.stop_building_on_sigterm()
        steps, left_out = build_within_budget({"a": lambda: "a", "b": interrupted, "c": lambda: "c"},
                                              Settings(budget_s=1000.0), keep=0.2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert steps == {"a": "a"} and left_out == ["b (BudgetSpent)", "c"]
