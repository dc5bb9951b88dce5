"""The short report of a GPU session (scripts/gpu-session.sh): test counts and the headline benchmark figures.

    python scripts/gpu_summary.py RESULTS_DIR JUNIT_XML > summary.md

Reads the benchmarks' JSON files (`benchmarks/results/cuda/*.json`) and pytest's junit XML; whatever is missing is
reported as missing, so a session cut short still gets a summary.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# (benchmark, metric suffix, how to print it): the figures the GPU targets are about, model speed first, decoding last.
HEADLINES = [
    ("mfu", "peak_matmul_flops", "tflops"),
    ("mfu", "82M.mfu", "percent"), ("mfu", "180M.mfu", "percent"), ("mfu", "468M.mfu", "percent"),
    ("mfu", "82M-logits.mfu", "percent"), ("mfu", "82M.tokens_per_s", "number"),
    ("variant_overhead", "resformer.ratio", "ratio"), ("variant_overhead", "svformer.ratio", "ratio"),
    ("variant_overhead", "cross_attention.ratio", "ratio"),
    ("hf_throughput", "82M.ratio_own_loss", "ratio"), ("hf_throughput", "82M.ratio", "ratio"),
    ("loop_overhead", "ratio", "ratio"),
    ("decode", "vanilla.batch8.eager_tokens_per_s", "number"), ("decode", "vanilla.batch8.graph_tokens_per_s", "number"),
    ("decode", "vanilla.batch8.graph_speedup", "ratio"), ("decode", "vanilla.batch8.compiled_graph_speedup", "ratio"),
    ("decode", "svformer.ctx32768.speed_vs_vanilla", "ratio"),
    ("decode", "svformer.ctx32768.batch_vs_vanilla", "ratio"),
    ("grid_throughput", "tiny.solo_tokens_per_s", "number"), ("grid_throughput", "tiny.graph_tokens_per_s", "number"),
    ("grid_throughput", "tiny.graph_vs_one_run_per_process", "ratio"),
    ("grid_throughput", "tiny.graph_mfu_datasheet", "percent"),
    ("grid_throughput", "small.graph_mfu_datasheet", "percent"), ("grid_throughput", "small.graph_mfu_measured", "percent"),
]


def formatted(value: float, how: str) -> str:
    if how == "tflops":
        return f"{value / 1e12:.1f} TFLOP/s"
    if how == "percent":
        return f"{100 * value:.1f}%"
    if how == "number":
        return f"{value:,.0f}"
    return f"{value:.3f}"


def benchmark_lines(results: Path) -> list[str]:
    metrics, left_out = {}, {}
    for path in sorted(results.glob("*.json")):
        for entry in json.loads(path.read_text()):
            if "meta" in entry:
                left_out[path.stem] = entry["meta"].get("left_out") or []
            else:
                metrics[entry["metric"]] = entry
    lines = ["| metric | value | target |", "|---|---|---|"]
    for benchmark, suffix, how in HEADLINES:
        m = metrics.get(f"{benchmark}.{suffix}")
        if m is None:
            lines.append(f"| {benchmark}.{suffix} | not measured | |")
            continue
        target = ""
        if m["target"] is not None:
            met = m["value"] >= m["target"] if m["better"] == "higher" else m["value"] <= m["target"]
            target = f"{'>=' if m['better'] == 'higher' else '<='} {m['target']:g} {'met' if met else 'MISSED'}"
        lines.append(f"| {m['metric']} | {formatted(m['value'], how)} | {target} |")
    lines += [f"\nLeft out by the budget in {name}: {', '.join(items)}" for name, items in left_out.items() if items]
    return lines


def test_lines(junit: Path) -> list[str]:
    if not junit.is_file():
        return ["pytest -m gpu: no junit XML (the stage did not finish; see pytest-gpu.log)"]
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    lines = [f"pytest -m gpu: {passed} passed, {counts['failures']} failed, {counts['errors']} errors, "
             f"{counts['skipped']} skipped ({float(suite.get('time', 0)):.0f} s)"]
    return lines + [f"  FAILED {name}" for name in failed]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    results, junit = Path(argv[0]), Path(argv[1])
    print("\n".join(["# GPU session summary", "", *test_lines(junit), "", *benchmark_lines(results)]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
