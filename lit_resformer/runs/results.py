"""A grid's runs, loaded once into one object that the report, the claims and the scaling fits all read.

    results = load_results("runs/fig7")
    results.done["resformer"][0].final("val_loss")      # seed 0's final validation loss, from its summary
    results.done["resformer"][0].train_curve(10)        # its training loss, smoothed over 10 logged steps

A final or best loss has one definition: the run's summary.json, computed when the run ended
(lit_resformer.runs.summary). A summary that lacks those fields (a run still training, one whose results could not be
read when it ended, or one written before a field existed) has them computed from its logged metrics, by the same
code, when it is read. Metrics are read only when a curve or such a field is asked for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

import lit_resformer.runs.curves as M
from lit_resformer.provenance import FIELDS as PROVENANCE_FIELDS
from lit_resformer.runs.claim_spec import Claim
from lit_resformer.runs.directory import GridDir
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.runs.summary import METRIC_FIELDS, epoch_tokens, metric_results

VAL_DOMAIN = "val_loss/"  # a claim's or a table's metric of one validation domain: val_loss/<domain>
SUMMARY_FIELD = {"val_loss": "final_val_loss", "train_loss": "final_train_loss"}


@dataclass
class RunResult:
    """One run of a grid: its summary (results filled in, see the module) and, when asked, its logged metrics."""

    cell: str
    seed: int
    run: RunDir
    grid: str = ""  # the grid it was loaded from

    @property
    def name(self) -> str:
        """`<cell>/seed<k>`, as tables and notes name the run."""
        return f"{self.cell}/seed{self.seed}"

    @cached_property
    def recorded(self) -> dict:
        """summary.json as written ({} for a run not started)."""
        return self.run.read_summary() or {}

    @cached_property
    def summary(self) -> dict:
        """The summary, with the results it lacks computed from the logged metrics."""
        missing = [key for key in METRIC_FIELDS if key not in self.recorded]
        if not missing:
            return self.recorded
        computed = metric_results(self.metrics)
        return {**self.recorded, **{key: computed[key] for key in missing}}

    @property
    def trained_as(self) -> str | None:
        """`<grid>/<cell>/seed<k>` of the run as it trained, when that was another grid's run or another cell's (a
        run shared between grids with the same config, see lit_resformer.runs.identity.Twins); None for the grid's own."""
        trained = tuple(self.recorded.get(key) for key in ("grid", "cell", "seed"))
        if None in trained or trained == (self.grid, self.cell, self.seed):
            return None
        return "{}/{}/seed{}".format(*trained)

    @property
    def epochs(self) -> float | None:
        """How many passes over its training split the run made (tokens seen / one pass's tokens); None when it
        never went past the first (run_summary.epoch_tokens; an older summary has it read from the logs)."""
        one_pass = self.summary["epoch_tokens"] if "epoch_tokens" in self.summary else epoch_tokens(self.run)
        seen = self.summary.get("tokens_seen")
        return seen / one_pass if one_pass and seen else None

    @cached_property
    def metrics(self) -> pd.DataFrame:
        return M.read_metrics(self.run)

    @property
    def status(self) -> str:
        return self.recorded.get("status") or "pending"

    def final(self, metric: str) -> float | None:
        """`val_loss`, `train_loss` or `val_loss/<domain>` at the end of the run."""
        if metric.startswith(VAL_DOMAIN):
            return (self.summary.get("final_val_loss_by_domain") or {}).get(metric.removeprefix(VAL_DOMAIN))
        return self.summary.get(SUMMARY_FIELD[metric])

    @property
    def unigram_loss(self) -> float | None:
        """The plateau reference: the validation tokens' loss under the training split's unigram."""
        return self.summary.get("unigram_val_loss")

    @property
    def bigram_loss(self) -> float | None:
        """The evidence gate: the validation tokens' loss under the training split's smoothed bigram (None for a run
        summarised before it was logged)."""
        return self.summary.get("bigram_val_loss")

    @property
    def provenance(self) -> dict:
        """What the run ran on (lit_resformer.provenance); {} for a run recorded before that existed."""
        return self.recorded.get("provenance") or {}

    @cached_property
    def config(self) -> dict | None:
        """The experiment config the grid asked for."""
        return self.run.read_experiment()

    @cached_property
    def resolved_config(self) -> dict | None:
        """The config as Lightning resolved it (config.yaml), else the experiment config the grid asked for."""
        resolved = self.run.read_config()
        return self.config if resolved is None else resolved

    def train_curve(self, window: int) -> pd.Series:
        return M.train_curve(self.metrics, window)

    def val_curve(self) -> pd.Series:
        return M.series(self.metrics, M.VAL_LOSS)


@dataclass
class GridResults:
    """Every run of one grid, by cell in the manifest's order and by seed."""

    grid_dir: GridDir
    manifest: dict
    runs: dict[str, list[RunResult]]  # cell -> its runs (any status), seeds ascending

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def cells(self) -> list[str]:
        return list(self.runs)

    @cached_property
    def cell_info(self) -> dict[str, dict]:
        """cell -> its manifest entry (name, overrides, baseline, family, coords, changes)."""
        return {c["name"]: c for c in self.manifest["cells"]}

    @cached_property
    def done(self) -> dict[str, dict[int, RunResult]]:
        """cell -> seed -> the runs that finished training (status done): what aggregates and claims use."""
        return {cell: {r.seed: r for r in runs if r.status == "done"} for cell, runs in self.runs.items()}

    @cached_property
    def claims(self) -> list[Claim]:
        return [Claim(**raw) for raw in self.manifest.get("claims") or []]

    @property
    def report_settings(self) -> dict:
        return self.manifest.get("report") or {}

    @property
    def provenance(self) -> dict:
        """What the runner that wrote the manifest ran on ({} for an older manifest)."""
        return self.manifest.get("provenance") or {}

    @cached_property
    def trained_on(self) -> str:
        return self.grid_dir.trained_on()

    def finals(self, metric: str) -> dict[str, dict[int, float]]:
        """cell -> seed -> the final `metric` of each finished run that has it."""
        return {cell: {seed: v for seed, r in runs.items() if (v := r.final(metric)) is not None}
                for cell, runs in self.done.items()}

    def unigram_reference(self) -> float | None:
        """The unigram loss of the validation tokens, mean over the finished runs that logged it."""
        values = [u for runs in self.done.values() for r in runs.values() if (u := r.unigram_loss) is not None]
        return float(np.mean(values)) if values else None


def load_results(grid_dir: str | Path | GridDir) -> GridResults:
    """A grid's run directory as GridResults (FileNotFoundError when it holds no manifest, BrokenSharedRun when a
    shared run's link does not resolve)."""
    grid = grid_dir if isinstance(grid_dir, GridDir) else GridDir(grid_dir)
    manifest = grid.read_manifest()
    grid.check_links()
    runs: dict[str, list[RunResult]] = {c["name"]: [] for c in manifest["cells"]}
    for cell, seed, run in grid.runs(runs):
        runs[cell].append(RunResult(cell, seed, run, manifest["name"]))
    return GridResults(grid, manifest, runs)


def relative_curves(cell: Mapping[int, RunResult], baseline: Mapping[int, RunResult],
                    window: int) -> dict[int, pd.Series]:
    """seed -> the cell's smoothed training loss minus the baseline's (same seed), on the steps both logged."""
    return {seed: (run.train_curve(window) - baseline[seed].train_curve(window)).dropna()
            for seed, run in cell.items() if seed in baseline}


def provenance_differences(runs: Iterable[RunResult]) -> tuple[dict[str, list[str]], list[str]]:
    """({field: its distinct values} for every provenance field in which the runs that recorded one differ, the
    runs that recorded none while others did)."""
    runs = list(runs)
    recorded = [r.provenance for r in runs if r.provenance]
    unrecorded = [r.name for r in runs if not r.provenance] if recorded else []
    differences = {}
    for field in PROVENANCE_FIELDS:
        values = list(dict.fromkeys(str(p.get(field)) for p in recorded))
        if len(values) > 1:
            differences[field] = values
    return differences, unrecorded
