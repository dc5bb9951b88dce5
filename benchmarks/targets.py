"""Every benchmark target, in one place: what a metric must reach today, on the CPU and on a GPU.

A key is `<benchmark>.<what>`; the benchmark looks it up with `target(key, settings)` for every metric it
applies to (each preset, each variant), so a target that is not listed here is not set and not printed.
`docs/BENCHMARKS.md` prints this table under its header. One target is not a number to choose and is not
here: SVFormer's KV cache is exactly (L+1)/(2L) of vanilla's, computed from the model by `decode`.
"""

from __future__ import annotations

from dataclasses import dataclass

from lit_resformer import writing


@dataclass(frozen=True)
class Target:
    value: float
    better: str  # "lower" | "higher", as the metric it applies to
    what: str  # what the number compares, for the table in docs/BENCHMARKS.md


# On the CPU, vanilla against HF Llama is parity: both run the same PyTorch kernels eagerly, so there is
# nothing to win but overhead (compiling would gain 1.06-1.12x, and the CPU recipe does not compile).
CPU = {
    "variant_overhead.resformer": Target(1.02, "lower", "ResFormer step time, x vanilla"),
    "variant_overhead.svformer": Target(1.00, "lower", "SVFormer step time, x vanilla"),
    "hf_throughput.ratio": Target(1.0, "higher", "vanilla tokens/s, x HF Llama with the project's loss on its logits"),
    "hf_throughput.ratio_own_loss": Target(1.0, "higher", "vanilla tokens/s, x HF Llama with its own `labels=` loss"),
    "loop_overhead.ratio": Target(0.97, "higher", "Lightning tokens/s, x a bare PyTorch loop"),
    "decode.svformer.speed_vs_vanilla": Target(1.0, "higher",
                                               "SVFormer decode tokens/s at the longest context, x vanilla"),
    "decode.svformer.max_batch_ratio": Target(1.7, "higher", "SVFormer's largest batch in a cache budget, x vanilla"),
    "data_loader.ratio": Target(20.0, "higher", "train loader tokens/s, x the model's training tokens/s"),
    "stacked.vs_processes": Target(1.0, "higher", "two runs stacked in one process, tokens/s x two processes side by "
                                                  "side (no worse)"),
    "cli_refusal.fast": Target(2.0, "lower", "CPU seconds (user + system) from start to refusal of a command given "
                                             "bad input: what it costs an idle core"),
    "claims_board.warm": Target(5.0, "lower", "seconds for the board (`claims docs/results`, and with --html), its "
                                              "judged grids cached"),
}

# On a GPU (compiled, bf16, the paper's sizes): what the best small-model trainers reach on an H100.
CUDA = {
    "variant_overhead.resformer": CPU["variant_overhead.resformer"],
    "variant_overhead.svformer": CPU["variant_overhead.svformer"],
    "variant_overhead.cross_attention": Target(1.2, "lower", "cross-layer attention step time, x vanilla"),
    "hf_throughput.ratio": Target(1.2, "higher", CPU["hf_throughput.ratio"].what),
    "hf_throughput.ratio_own_loss": Target(1.3, "higher", CPU["hf_throughput.ratio_own_loss"].what),
    "loop_overhead.ratio": Target(0.95, "higher", CPU["loop_overhead.ratio"].what),
    "mfu.82M": Target(0.45, "higher", "82M model FLOP utilisation, fraction of the measured matmul peak"),
    "mfu.180M": Target(0.50, "higher", "180M model FLOP utilisation, fraction of the measured matmul peak"),
    "decode.vanilla.graph_speedup": Target(5.0, "higher", "CUDA-graph decode tokens/s, x eager (batch 8)"),
    "decode.svformer.long_speed_vs_vanilla": Target(1.5, "higher",
                                                    "SVFormer decode tokens/s at 32k, largest batch, x vanilla"),
    "grid_throughput.tiny.graph_tokens_per_s": Target(5e6, "higher", "`tiny` tokens/s per card, runs stacked as one "
                                                                     "CUDA graph (10x one run per process)"),
    "grid_throughput.small.graph_mfu_datasheet": Target(0.30, "higher", "`small` stacked and graphed, model FLOP "
                                                                        "utilisation of the datasheet peak"),
}


def target(key: str, cuda: bool) -> float | None:
    """Today's target for `key` on this device kind, None where there is none."""
    found = (CUDA if cuda else CPU).get(key)
    return None if found is None else found.value


def markdown() -> str:
    """The table of every target, for the header of docs/BENCHMARKS.md."""
    def cell(table: dict[str, Target], key: str) -> str:
        found = table.get(key)
        return "" if found is None else f"{'<=' if found.better == 'lower' else '>='} {found.value:g}"

    keys = list(CPU) + [k for k in CUDA if k not in CPU]
    return writing.markdown_table(["target", "what", "CPU", "GPU"],
                          [[f"`{k}`", (CPU.get(k) or CUDA[k]).what, cell(CPU, k), cell(CUDA, k)] for k in keys])
