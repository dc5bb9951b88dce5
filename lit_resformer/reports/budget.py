"""What each cell of a grid spends: parameters, training compute, KV cache and time, so that cells can be compared at
equal parameters, equal FLOPs or equal cache as well as at equal steps (value-embedding tables, for one, add many
parameters and almost no FLOPs).

    results = load_results("runs/value-path")
    budget_rows(results)      # one CellBudget per cell
    budget_section(results)   # the report's Budget section (markdown)

Parameters, FLOPs and KV bytes come from the config of the cell's runs (the model built on the meta device: no
checkpoint, no memory); the step time from its finished runs' summaries.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from lit_resformer.grids.summary import model_stats
from lit_resformer.measures.grid_results import GridResults, RunResult
from lit_resformer.measures.scaling import non_embedding_params
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
    return f"## Budget\n\n{note}\n\n{markdown_table(header, table)}\n"


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
