"""The per-seed values of a mechanism claim (`analysis/<name>`, lit_resformer.runs.claim_spec.ANALYSIS_METRICS): the
runs' analysis results (`--analyze`, lit_resformer.analysis), averaged over the middle layers (`analysis_value`), or
the two Fig. 4 cosines within each run; without them the claim is not tested. A claim about a phenomenon the baseline
must show first (analysis/first_token_*) is not tested unless the baseline shows it at the paper's threshold
(BASELINE_PHENOMENA). Judged like every pair of cells (lit_resformer.verdicts.judges)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from lit_resformer.runs.claim_spec import ANALYSIS_PREFIX, SAME_CELL_METRICS, Claim
from lit_resformer.runs.results import RunResult
from lit_resformer.verdicts.verdict import SideValues


def analysis_values(claim: Claim, a: dict[int, RunResult], b: dict[int, RunResult]) -> SideValues:
    """The per-seed values of an analysis/<name> claim: each run's metric over its middle layers, or the two Fig. 4
    cosines within each run of one cell (SAME_CELL_METRICS); not tested when the baseline does not show the
    phenomenon the claim is about (BASELINE_PHENOMENA)."""
    if claim.metric in SAME_CELL_METRICS:
        return _fig4_values(a)
    name = claim.metric.removeprefix(ANALYSIS_PREFIX)
    values = _middle_layer_values(name, a, b)
    if not values.not_tested:
        missing = baseline_phenomenon(name, b)
        if missing:
            return replace(values, not_tested=missing)
    return values


def _middle_layer_values(name: str, a: dict[int, RunResult], b: dict[int, RunResult]) -> SideValues:
    """Each run's analysis metric `name` (claim_spec.ANALYSIS_METRICS), the mean over its middle layers; not tested
    when a run has no analysis results or lacks the metric."""
    from lit_resformer.analysis.analyze import (
        run_analysis,  # torch's import, paid only where a claim reads analyses
    )

    values: list[dict[int, float]] = [{}, {}]
    missing = []
    for side, runs in enumerate((a, b)):
        for seed, run in runs.items():
            value = analysis_value(run_analysis(run.run.path), name)
            if value is None:
                missing.append(run.name)
            else:
                values[side][seed] = value
    if missing:
        return SideValues({}, {}, [], f"no analysis results with {name} for {', '.join(missing)} (run the grid with "
                                      "--analyze, or `lit-resformer analyze` on its runs)")
    return SideValues(*values, ["mean over the middle layers (all but the first and the last)"])


def analysis_value(result: dict | None, name: str) -> float | None:
    """One run's analysis metric: the per-layer curve (ANALYSIS_METRICS) averaged over the middle layers, where the
    paper's concentration is (Figs. 1, 2, 12): every layer but the first and the last (all layers of a model with
    two or fewer); None when the result lacks it."""
    if result is None:
        return None
    if name.startswith("first_token_"):
        from lit_resformer.analysis.plots import first_token_ratio

        kind = name.removeprefix("first_token_")
        curve = first_token_ratio(result, kind) if f"{kind}_first" in result else None
    else:
        curve = result.get(name)
    if not curve:
        return None
    middle = curve[1:-1] if len(curve) > 2 else curve
    finite = [v for v in middle if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else None


# The phenomenon a mechanism claim is about, which the baseline must show at the paper's thresholds
# (configs/claims.yaml preconditions baseline-sink / -drain / -peak, citing Fig. 2): metric -> (precondition id,
# extreme over layers, comparison, threshold, words).
BASELINE_PHENOMENA = {
    "first_token_importance": ("baseline-sink", max, ">=", 10.0, "sink: first token's importance >= 10x the others'"),
    "first_token_value_norm": ("baseline-drain", min, "<=", 0.5, "value-state drain: first token's value norm <= "
                                                                  "0.5x the others'"),
    "first_token_hidden_norm": ("baseline-peak", max, ">=", 3.0, "hidden-state peak: first token's hidden norm >= 3x "
                                                                 "the others'"),
}


def baseline_phenomenon(name: str, baseline: dict[int, RunResult]) -> str:
    """"" when the baseline's runs show the phenomenon `name` is about (BASELINE_PHENOMENA: the mean over its seeds of
    the per-run extreme over layers, at the paper's threshold), else why the claim is not tested."""
    if name not in BASELINE_PHENOMENA or not baseline:
        return ""
    from lit_resformer.analysis.analyze import run_analysis
    from lit_resformer.analysis.plots import first_token_ratio

    _, extreme, op, threshold, words = BASELINE_PHENOMENA[name]
    kind = name.removeprefix("first_token_")
    per_run = []
    for run in baseline.values():
        result = run_analysis(run.run.path)
        curve = first_token_ratio(result, kind) if result and f"{kind}_first" in result else None
        finite = [v for v in (curve or []) if v is not None and math.isfinite(v)]
        if finite:
            per_run.append(extreme(finite))
    if not per_run:
        return ""
    value = float(np.mean(per_run))
    shows = value >= threshold if op == ">=" else value <= threshold
    if shows:
        return ""
    what = {"importance": "sink", "value_norm": "value-state drain", "hidden_norm": "hidden-state peak"}[kind]
    return (f"the baseline shows no {what} (its {'largest' if extreme is max else 'smallest'} per-layer ratio, mean "
            f"over {len(per_run)} seeds, is {value:.2f}; the paper's {words.split(': ', 1)[1]})")


def _fig4_values(runs: dict[int, RunResult]) -> SideValues:
    """Fig. 4 within each run: a's side the mean over layers 2..L of the cosine of the Eq. 2 output to the Eq. 4
    output, b's side to the Eq. 6 output (analysis fig4_cos_eq4 / fig4_cos_eq6, m = n-1); paired by run."""
    from lit_resformer.analysis.analyze import run_analysis

    values: list[dict[int, float]] = [{}, {}]
    missing = []
    for seed, run in runs.items():
        result = run_analysis(run.run.path) or {}
        pair = [[v for v in (result.get(key) or []) if v is not None and math.isfinite(v)]
                for key in ("fig4_cos_eq4", "fig4_cos_eq6")]
        if not all(pair):
            missing.append(run.name)
            continue
        values[0][seed], values[1][seed] = (float(np.mean(curve)) for curve in pair)
    if missing:
        return SideValues({}, {}, [], f"no Fig. 4 analysis results for {', '.join(missing)} (`lit-resformer analyze`)")
    return SideValues(*values, ["per run: mean over layers 2..L of cos(Eq. 2, Eq. 4) vs cos(Eq. 2, Eq. 6), m = n-1"])
