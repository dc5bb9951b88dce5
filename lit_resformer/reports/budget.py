"""What each cell of a grid spends: parameters, training compute, KV cache and time, so that cells can be compared at
equal parameters, equal FLOPs or equal cache as well as at equal steps (value-embedding tables, for one, add many
parameters and almost no FLOPs).

    results = load_results("runs/value-path")
    budget_rows(results)      # one CellBudget per cell
    budget_section(results)   # the report's Budget section (markdown)

Parameters, FLOPs and KV bytes come from the config of the cell's runs (the model built on the meta device: no
checkpoint, no memory); the step time from its finished runs' summaries. Runs that trained on a GPU add their model
FLOP utilisation, against the card's datasheet peak and its measured one (lit_resformer.provenance).

Speed is compared on one machine only: a run's machine is the device its provenance names, and a cell's time or
throughput is set against its baseline's on the machines both trained on (`same_machine_ratio`), never across two.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

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
    step_time_by_machine: dict[str, float] = field(default_factory=dict)  # machine -> the mean over its runs


def budget_rows(results: GridResults) -> list[CellBudget]:
    """One CellBudget per cell, in the grid's order. A cell none of whose runs has a config yet (none started) has
    no model figures; one with no finished run, no step time."""
    rows = []
    for cell in results.cells:
        config = next((r.config for r in results.runs[cell] if r.config), None)
        finished = list(results.done[cell].values())
        step_times = [t for r in finished if (t := _step_time(r)) is not None]
        model = _model_budget(config) if config else {}
        rows.append(CellBudget(
            cell=cell,
            params=model.get("params"),
            non_embedding_params=model.get("non_embedding_params"),
            flops_per_token=model.get("flops_per_token"),
            kv_cache_bytes_per_token=model.get("kv_cache_bytes_per_token"),
            step_time_s=float(np.mean(step_times)) if step_times else None,
            timed_runs=len(step_times),
            step_time_by_machine=by_machine(finished, _step_time),
        ))
    return rows


def machine(run: RunResult) -> str:
    """The device a run trained on, as its provenance names it (e.g. "CPU: AMD EPYC")."""
    return run.provenance.get("device") or "unrecorded"


def by_machine(runs: Iterable[RunResult], value: Callable[[RunResult], float | None]) -> dict[str, float]:
    """machine -> the mean of `value` over the runs that trained on it (runs without a value left out)."""
    values: dict[str, list[float]] = {}
    for run in runs:
        if (v := value(run)) is not None:
            values.setdefault(machine(run), []).append(v)
    return {name: float(np.mean(found)) for name, found in values.items()}


def same_machine_ratio(values: dict[str, float], base: dict[str, float]) -> float | None:
    """A cell's figure over its baseline's on the machines both trained on (the mean of the per-machine ratios);
    None when they share no machine, where a ratio would compare the machines."""
    shared = [values[name] / base[name] for name in values if base.get(name)]
    return float(np.mean(shared)) if shared else None


def machine_labels(results: GridResults) -> dict[str, str]:
    """A letter for every machine the grid's finished runs trained on, in the order of the cells; {} for one."""
    machines = dict.fromkeys(machine(r) for cell in results.cells for r in results.done[cell].values())
    return {} if len(machines) < 2 else {name: chr(ord("A") + i) for i, name in enumerate(machines)}


def machines_note(labels: dict[str, str]) -> str:
    """What the machine letters of the Cost and Budget tables stand for."""
    return "Machines (the device each run's provenance names): " + "; ".join(
        f"**{letter}** = {name}" for name, letter in labels.items()) + "."


def budget_section(results: GridResults) -> str:
    """The report's Budget section: a table of `budget_rows`, each figure also as a ratio to the cell's baseline."""
    rows = budget_rows(results)
    by_cell = {row.cell: row for row in rows}

    labels = machine_labels(results)

    def with_ratio(row: CellBudget, field: str, shown: str) -> str:
        base = by_cell.get(results.cell_info[row.cell]["baseline"])
        value, base_value = getattr(row, field), getattr(base, field) if base else None
        if value is None:
            return "–"
        ratio = f"{value / base_value:.2f}" if base_value else "1.00"
        return shown if ratio == "1.00" else f"{shown} ({ratio}x)"

    def step_time(row: CellBudget) -> str:
        """The step time with its machines' letters, and its ratio to the baseline's on the same machine only."""
        if row.step_time_s is None:
            return "–"
        shown = f"{row.step_time_s:.3f}" + (f" [{', '.join(labels[m] for m in row.step_time_by_machine)}]"
                                             if labels else "")
        base = by_cell.get(results.cell_info[row.cell]["baseline"])
        if base is None or base is row or not base.step_time_by_machine:
            return shown
        ratio = same_machine_ratio(row.step_time_by_machine, base.step_time_by_machine)
        if ratio is None:
            return f"{shown} (other machine than the baseline)"
        return shown if f"{ratio:.2f}" == "1.00" else f"{shown} ({ratio:.2f}x)"

    table = []
    for row in rows:
        table.append([
            row.cell + (" (baseline)" if results.cell_info[row.cell]["baseline"] == row.cell else ""),
            with_ratio(row, "params", _count(row.params)),
            with_ratio(row, "non_embedding_params", _count(row.non_embedding_params)),
            with_ratio(row, "flops_per_token", "–" if row.flops_per_token is None
                       else f"{row.flops_per_token / 1e6:,.2f}"),
            with_ratio(row, "kv_cache_bytes_per_token", _count(row.kv_cache_bytes_per_token)),
            step_time(row),
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
        "tokens/s, mean over the cell's finished runs (runs that shared a machine are only roughly comparable); its "
        "ratio to the baseline's is taken on the machines both trained on, never across machines."
        + (f" {machines_note(labels)}" if labels else "")
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
