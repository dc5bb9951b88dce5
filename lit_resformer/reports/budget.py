"""What each cell of a grid spends: parameters, training compute, KV cache and time, so that cells can be compared at
equal parameters, equal FLOPs or equal cache as well as at equal steps (value-embedding tables, for one, add many
parameters and almost no FLOPs).

    results = load_results("runs/value-path")
    budget_rows(results)      # one CellBudget per cell
    budget_section(results)   # the report's Budget section (markdown)

Parameters, FLOPs and KV bytes come from the config of the cell's runs (the model built on the meta device: no
checkpoint, no memory); the step time from its finished runs' summaries. Runs that trained on a GPU add their model
FLOP utilisation, against the card's datasheet peak and its measured one (lit_resformer.provenance).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from lit_resformer.measures.scaling import non_embedding_params
from lit_resformer.provenance import spec_peak_flops
from lit_resformer.runs.results import GridResults, RunResult
from lit_resformer.runs.summary import model_stats
from lit_resformer.writing import markdown_table


@dataclass(frozen=True)
class CellBudget:
    cell: str
    params: int | None  # every parameter (the embedding's and head's padding rows not)
    non_embedding_params: int | None  # without the token embedding, the LM head and the value-embedding tables
    flops_per_token: float | None  # training (forward + backward) FLOPs per token at the cell's training length
    kv_cache_bytes_per_token: int | None  # in the dtype the cell trains in
    step_time_s: float | None  # seconds per optimizer step: each finished run's median, mean over them
    timed_runs: int  # finished runs the step time is the mean of


def budget_rows(results: GridResults) -> list[CellBudget]:
    """One CellBudget per cell, in the grid's order. A cell none of whose runs has a config yet (none started) has
    no model figures; one with no finished run, no step time."""
    rows = []
    for cell in results.cells:
        config = next((r.config for r in results.runs[cell] if r.config), None)
        step_times = [t for r in results.done[cell].values() if (t := _step_time(r)) is not None]
        model = _model_budget(config) if config else {}
        rows.append(CellBudget(
            cell=cell,
            params=model.get("params"),
            non_embedding_params=model.get("non_embedding_params"),
            flops_per_token=model.get("flops_per_token"),
            kv_cache_bytes_per_token=model.get("kv_cache_bytes_per_token"),
            step_time_s=float(np.mean(step_times)) if step_times else None,
            timed_runs=len(step_times),
        ))
    return rows


def budget_section(results: GridResults) -> str:
    """The report's Budget section: a table of `budget_rows`, each figure also as a ratio to the cell's baseline."""
    rows = budget_rows(results)
    by_cell = {row.cell: row for row in rows}

    def with_ratio(row: CellBudget, field: str, shown: str) -> str:
        base = by_cell.get(results.cell_info[row.cell]["baseline"])
        value, base_value = getattr(row, field), getattr(base, field) if base else None
        if value is None:
            return "–"
        ratio = f"{value / base_value:.2f}" if base_value else "1.00"
        return shown if ratio == "1.00" else f"{shown} ({ratio}x)"

    table = []
    for row in rows:
        table.append([
            row.cell + (" (baseline)" if results.cell_info[row.cell]["baseline"] == row.cell else ""),
            with_ratio(row, "params", _count(row.params)),
            with_ratio(row, "non_embedding_params", _count(row.non_embedding_params)),
            with_ratio(row, "flops_per_token", "–" if row.flops_per_token is None
                       else f"{row.flops_per_token / 1e6:,.2f}"),
            with_ratio(row, "kv_cache_bytes_per_token", _count(row.kv_cache_bytes_per_token)),
            with_ratio(row, "step_time_s", "–" if row.step_time_s is None else f"{row.step_time_s:.3f}"),
            str(row.timed_runs),
        ])
    note = (
        "What each cell spends, for comparisons at equal parameters, equal compute or equal cache as well as at equal "
        "steps; in brackets, the ratio to the cell's baseline where it is not 1.00. Parameters, FLOPs and KV bytes come from the config of the "
        "cell's runs (the model built on the meta device), with the vocabulary the config gives: a run whose "
        "tokenizer links another has the Cost section's counts, read from its checkpoint. **Non-embedding** "
        "parameters leave out the token embedding, the LM head and the value-embedding tables (all sized by the "
        "vocabulary; the tables are lookups), the scaling fits' convention. **Training FLOPs per token** (forward + "
        "backward) = 6 x the weight-matrix parameters (LM head included, embedding and value-embedding tables not) + "
        "12 x layers x d_model x training length for attention (PaLM's convention; a layer that attends to "
        "several key sources counts once each). **KV-cache bytes per token** in the "
        "training dtype. **Step time**: seconds per optimizer step, tokens per step over the run's median logged "
        "tokens/s, mean over the cell's finished runs (runs that shared a machine are only roughly comparable)."
    )
    header = ["cell", "parameters", "non-embedding parameters", "training MFLOP / token", "KV bytes / token",
              "s / step", "runs timed"]
    return f"## Budget\n\n{note}\n\n{markdown_table(header, table)}\n" + utilisation_section(results, rows)


@dataclass(frozen=True)
class RunUtilisation:
    device: str
    achieved_flops: float  # training FLOPs per token x the run's median tokens/s
    spec_peak_flops: float | None  # the card's dense bf16 datasheet peak
    measured_peak_flops: float | None  # the idle card's bf16 matmul peak, measured by whoever started the runner
    runs_sharing_device: int | None  # runs side by side on the card (the runner's runs per GPU)

    @property
    def mfu_spec(self) -> float | None:
        return self.achieved_flops / self.spec_peak_flops if self.spec_peak_flops else None

    @property
    def mfu_measured(self) -> float | None:
        return self.achieved_flops / self.measured_peak_flops if self.measured_peak_flops else None

    @property
    def card_mfu_spec(self) -> float | None:
        """The card's MFU with every run that shared it (each as fast as this one), against the datasheet peak."""
        return self.mfu_spec * self.runs_sharing_device if self.mfu_spec and self.runs_sharing_device else None


def run_utilisation(run: RunResult, flops_per_token: float | None) -> RunUtilisation | None:
    """A finished GPU run's utilisation; None for a CPU run or one without a throughput or a FLOP count."""
    device = (run.provenance or {}).get("device") or ""
    rate = run.summary.get("tokens_per_sec")
    if not device or device.startswith("CPU") or not rate or not flops_per_token:
        return None
    use = run.summary.get("device_use") or {}
    return RunUtilisation(device, flops_per_token * rate, spec_peak_flops(device), use.get("measured_peak_flops"),
                          use.get("runs_sharing_device"))


def utilisation_section(results: GridResults, rows: list[CellBudget]) -> str:
    """Model FLOP utilisation of the cells' GPU runs (mean over each cell's finished GPU runs); "" when none."""
    table = []
    for row in rows:
        runs = [u for r in results.done[row.cell].values() if (u := run_utilisation(r, row.flops_per_token))]
        if not runs:
            continue

        def mean(field: str, runs: list[RunUtilisation] = runs) -> str:
            values = [getattr(u, field) for u in runs]
            return "–" if None in values else f"{100 * float(np.mean(values)):.3g}%"

        sharing = sorted({u.runs_sharing_device for u in runs}, key=lambda n: (n is None, n))
        table.append([row.cell, ", ".join(sorted({u.device for u in runs})), str(len(runs)),
                      ", ".join("–" if n is None else str(n) for n in sharing),
                      f"{np.mean([u.achieved_flops for u in runs]) / 1e12:.3g}",
                      mean("mfu_spec"), mean("mfu_measured"), mean("card_mfu_spec")])
    if not table:
        return ""
    note = (
        "Model FLOP utilisation of the runs that trained on a GPU: achieved = training FLOPs per token (above) x the "
        "run's median tokens/s, against the card's **datasheet** dense bf16 peak whatever the run's precision "
        "(nanochat's convention: 989 TFLOP/s for an H100 SXM or an H200) and against its **measured** bf16 matmul "
        "peak (`python -m lit_resformer.provenance --measure-peak` on the idle card before the runner started; – "
        "where the run did not record one). Runs that shared a card each used a share of it: **card** is a run's "
        "MFU times the runs side by side, what the card did for the grid. Small models on a big card are bound by "
        "the host's per-step overhead, not by the card."
    )
    header = ["cell", "device", "GPU runs", "runs side by side", "achieved TFLOP/s a run", "MFU (datasheet)",
              "MFU (measured peak)", "card MFU (datasheet)"]
    return f"\n### GPU utilisation\n\n{note}\n\n{markdown_table(header, table)}\n"


def _count(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def _model_budget(config: dict) -> dict:
    """Parameters, non-embedding parameters, training FLOPs per token and KV bytes per token of a run's config."""
    import torch

    from lit_resformer.data import LMDataModule
    from lit_resformer.model import ModelConfig, Transformer

    model_config = config["model"]["config"]
    # a config that leaves the training length out trains at the data module's default
    seq_len = (config.get("data") or {}).get("seq_len") or \
        inspect.signature(LMDataModule.__init__).parameters["seq_len"].default
    with torch.device("meta"):
        flops = Transformer(ModelConfig(**model_config)).flops_per_token(seq_len)
    stats = model_stats(config)
    return {"params": stats["params"], "non_embedding_params": non_embedding_params(model_config),
            "flops_per_token": flops, "kv_cache_bytes_per_token": stats["kv_cache_bytes_per_token"]}


def _step_time(run: RunResult) -> float | None:
    """Seconds per optimizer step of a finished run: its tokens per step (tokens seen over steps, as the run counted
    them, devices and accumulation included) over its median logged tokens/s."""
    summary = run.summary
    steps, seen, rate = summary.get("steps"), summary.get("tokens_seen"), summary.get("tokens_per_sec")
    if steps is None or not seen or not rate:
        return None
    return seen / (steps + 1) / rate  # steps is the last 0-based step index
