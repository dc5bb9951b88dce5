"""Time to target: the training tokens a variant needs to first reach a target validation loss, against the baseline's,
seed by seed, and the data saving 1 - tokens(variant) / tokens(baseline) with an interval over the seeds.

    from lit_resformer.measures.time_to_target import time_to_target, decide
    result = time_to_target(load_results("docs/results/fig7-evidence"), "resformer", "vanilla")
    result["saving"], result["ci_low"], result["ci_high"]      # 1 - tokens ratio; > 0: the variant needs less data
    decide(result, "higher")                                    # (verdict, note) of "the variant needs less data"

    python -m lit_resformer.measures.time_to_target docs/results/fig7-evidence --variant resformer --baseline vanilla

The target, per seed: the baseline's final validation loss (its last evaluation, the summary's final_val_loss) of the
same seed, or a stated loss (`target=`) for every seed. It is the paper's reading of "less data" (ResFormer reaches
vanilla's loss with 20.3% less data, paper v5), made within one run: a run stopped at the variant's crossing has not
finished its learning-rate decay, so it is not the run trained on that budget (lit_resformer.measures.scaling gives the
separate-budget saving of a token sweep).

Tokens. An evaluation at logged step s > 0 follows the (s + 1)-th optimizer step; its tokens are the run's logged
train/tokens_seen at that step (each optimizer step's tokens times (s + 1); where that step's value was not logged, the
same product from the last logged one). The evaluation at step 0 is the untrained model's (the training module logs it
before the first step) and stands at 0 tokens.

Reading the curve. The first crossing is the first evaluation whose loss is at or below the target. Between it and
the evaluation before, the curve is read as a straight line in loss against log tokens, and the crossing is where that
line meets the target:

    log t* = log t0 + (L0 - target) / (L0 - L1) * (log t1 - log t0)

(an evaluation exactly at the target is its own crossing, so the baseline's reading of its own final loss is its last
evaluation unless an earlier one already reached it). Before the first trained evaluation there is no log-token line
(the evaluation before stands at 0 tokens): a crossing there is read at the first evaluation. If the curve falls
monotonically between two evaluations, the true crossing lies between them (the reading's *bracket*); the reading can
then be off by at most the larger of its log distances to the two ends, and never more than the log-token gap between
the evaluations (half the gap for a crossing read at the bracket's middle). A loss curve that follows a power law in
tokens is convex in log tokens, so the straight line lies above it and the reading errs late (too many tokens) by far
less than that bound: with L = E + A t^-alpha, about alpha * gap^2 / 8 in log tokens (under 0.002 at the committed
runs' density; docs/time-to-target.md compares a quadratic reading of the committed curves). The per-seed bracket of the saving (`saving_bracket`) is what the evaluation density alone allows.

A variant that never reaches the target has no reading: it needs more than its whole run, so its saving is at most
1 - last_tokens(variant) / tokens(baseline). That seed is "bounded", with that bound, and is never dropped (keeping
only the seeds that got there would select the favourable ones); likewise a baseline that never reaches a stated
target bounds the saving from below. A seed where neither run reaches a stated target is "undetermined".

Interval: a log-ratio t interval whose design follows the seeds (`stats.seed_design` of the runs' data seeds, as the
claims do). Paired (a seed's two runs share one data order, the seeds differ in it): the one-sample t over the seeds'
log ratios log(t_v / t_b) (`stats.paired_t` on log tokens). Unpaired: Welch's t on the two sides' log tokens
(`stats.welch_t`). The saving and its interval are 1 - exp(.) of the mean log ratio and its interval ends, i.e. the
saving of the geometric-mean token counts. Why this and not a ratio of means (delta method or Fieller): token counts
are positive and their seed noise multiplicative (a seed that learns faster needs proportionally fewer tokens), so on
log tokens the noise is additive and nearly symmetric; the back-transformed interval stays inside (-inf, 1), as a
saving does, and swapping variant and baseline gives the mirrored interval; a delta-method ratio of means leans on a
normal ratio, poor with 2 to 5 seeds; Fieller's interval is exact only for normal means and can be unbounded; and
the log-ratio design is the suite's own paired / Welch t (stats), so its one-sided p-values, its design rule and the
claims' adjustment for multiple comparisons apply unchanged. The per-seed savings are listed beside it; their
arithmetic mean is at most the geometric one (Jensen) and equal when the seeds agree. Against the baseline's own final
loss the baseline's tokens are (nearly) the same in every seed, so the two designs nearly coincide there; they part
for a stated target. Coverage (tests/measures/test_time_to_target.py): 2,000 simulated experiments of 5 seeds with a true saving
of 25%, power-law curves read at the committed runs' evaluation density with 0.01-nat evaluation noise, are covered by
the 95% interval 96.2% (paired), 95.0% (unpaired) and 95.3% (unpaired, stated target) of the time; reading the
crossing at the first evaluation at or below the target instead of interpolating covers 37%.

Bounded seeds enter the interval at their bound. For variant-bounded seeds the estimate then overstates the saving
(it is monotone in every seed's value) and the interval is one of an overstated saving, so `decide` never concludes
a saving from it ("reproduced" for direction higher becomes "inconclusive"), while a conclusion that the variant needs
*more* data stands: the true values lie further on that side. (Strictly, a t interval widens as one seed moves away
from the others, so this is the bound's direction, not a confidence statement; the note says which seeds were
bounded.) Bounds from the baseline's side mirror this; bounds of both kinds, or an undetermined seed, leave the claim
not tested. Simulated with no true saving, where half the variant's runs never reach the target, this rule concludes
a saving 2.4% of the time (the one-sided 2.5% its interval allows); judging the substituted bounds as if measured
would do so 6.8% of the time, and dropping the bounded seeds 17%. With equal budgets and the baseline's own final loss
as target, a slower variant's seed is bounded at a saving of at most 0 (it cannot be measured within the run), so the
metric can show a saving but not that the variant needs more data: that needs a longer variant run or a stated target
the baseline reaches before its end.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import lit_resformer.runs.curves as M
from lit_resformer.measures.stats import paired_t, run_data_seed, seed_design, verdict, welch_t
from lit_resformer.runs.results import VAL_DOMAIN, GridResults, RunResult, load_results
from lit_resformer.writing import markdown_table

METRIC = "time_to_target"  # the claim metric: a's data saving against b at b's final loss (direction higher)
PAPER_SAVING = 0.203  # "20.3% less data" (paper v5; earlier versions 13.6%, 15.4%)


class TimeToTargetError(ValueError):
    """Runs whose curves cannot be read against a target; the message says what is missing."""


# ----------------------------------------------------------------------------------------------
# reading one curve


@dataclass(frozen=True)
class Reading:
    """Where one run's validation curve first reaches a target. `tokens` is the interpolated reading; for a curve
    that never reaches it, its last evaluation's tokens (the run needs more: a lower bound). `low` and `high`
    bracket the crossing (high is inf when not reached); `gap` is the log-token gap of the two evaluations read
    between (0 for a crossing exactly at an evaluation)."""

    tokens: float
    reached: bool
    low: float
    high: float
    last_tokens: float

    @property
    def gap(self) -> float:
        if not self.reached:
            return math.inf
        if self.low <= 0:
            return math.inf if self.high > 0 else 0.0
        return math.log(self.high / self.low)

    @property
    def error(self) -> float:
        """The largest log-token error of the reading if the curve falls monotonically within its bracket."""
        if not self.reached:
            return math.inf
        if self.low <= 0:
            return math.inf if self.tokens > 0 else 0.0
        return max(math.log(self.tokens / self.low), math.log(self.high / self.tokens))


def read_crossings(tokens: Any, losses: Any, target: Any) -> tuple[np.ndarray, ...]:
    """First crossings of `target` by curves `losses` (evaluations on the last axis, at `tokens`, ascending;
    leading axes broadcast, as a simulation draws many at once): (reading, reached, low, high) arrays over the
    leading axes, with the reading and bracket of `Reading` (the module says how the curve is read)."""
    tokens, losses = np.asarray(tokens, dtype=float), np.asarray(losses, dtype=float)
    target = np.asarray(target, dtype=float)
    tokens = np.broadcast_to(tokens, losses.shape)
    below = losses <= target[..., None]
    reached = below.any(axis=-1)
    first = np.argmax(below, axis=-1)[..., None]
    before = np.maximum(first - 1, 0)
    t1, l1 = (np.take_along_axis(a, first, -1)[..., 0] for a in (tokens, losses))
    t0, l0 = (np.take_along_axis(a, before, -1)[..., 0] for a in (tokens, losses))
    exact = l1 == target
    between = (first[..., 0] > 0) & (t0 > 0) & ~exact
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.clip((l0 - target) / (l0 - l1), 0.0, 1.0)
        logged = np.exp(np.log(t0) + fraction * (np.log(t1) - np.log(t0)))
    reading = np.where(between, logged, t1)
    low = np.where(exact, t1, np.where(first[..., 0] > 0, t0, 0.0))
    last = tokens[..., -1]
    return (np.where(reached, reading, last), reached, np.where(reached, low, last),
            np.where(reached, t1, np.inf))


def first_crossing(curve: pd.Series, target: float) -> Reading:
    """The Reading of one curve: loss indexed by tokens (`evaluation_curve`)."""
    if curve.empty:
        raise TimeToTargetError("an empty curve has no crossing")
    reading, reached, low, high = read_crossings(curve.index.to_numpy(dtype=float), curve.to_numpy(dtype=float), target)
    return Reading(float(reading), bool(reached), float(low), float(high), float(curve.index[-1]))


def _curve_column(metric: str) -> str:
    if metric == "val_loss":
        return M.VAL_LOSS
    if metric.startswith(VAL_DOMAIN) and len(metric) > len(VAL_DOMAIN):
        return M.VAL_DOMAIN_PREFIX + metric.removeprefix(VAL_DOMAIN)
    raise TimeToTargetError(f"metric must be val_loss or val_loss/<domain>, got {metric!r}")


def evaluation_curve(run: RunResult, metric: str = "val_loss") -> pd.Series:
    """A run's validation loss (or one domain's) at each evaluation, indexed by the training tokens seen before it
    (the module says how they are counted); the step of each evaluation is kept as the series' `steps` attribute."""
    metrics = run.metrics
    loss = M.series(metrics, _curve_column(metric))
    loss = loss[np.isfinite(loss)]
    if loss.empty:
        raise TimeToTargetError(f"{run.name} logged no {metric} evaluations")
    seen = M.series(metrics, M.TOKENS_SEEN)
    if seen.empty:
        raise TimeToTargetError(f"{run.name} logged no {M.TOKENS_SEEN}; its evaluations' tokens come from it")
    per_step = float(seen.iloc[-1]) / (int(seen.index[-1]) + 1)
    steps = loss.index.to_numpy(dtype=int)
    tokens = [0.0 if s == 0 else float(seen[s]) if s in seen.index else (s + 1) * per_step for s in steps]
    curve = pd.Series(loss.to_numpy(), index=pd.Index(tokens, name="tokens"))
    curve.attrs["steps"] = steps.tolist()
    curve.attrs["tokens_per_step"] = per_step
    return curve


# ----------------------------------------------------------------------------------------------
# the saving over seeds


def saving_interval(variant_tokens: Any, baseline_tokens: Any, design: str, level: float = 0.95) -> dict:
    """The log-ratio t interval of the saving from per-seed token counts (seeds on the last axis, broadcasting over
    leading ones): paired (`stats.paired_t` on log tokens, the seeds matched by position) or unpaired (`stats.welch_t`).
    saving = 1 - exp(mean log ratio); ci_low/ci_high its two-sided interval at `level` (None with under 2 seeds);
    p_two_sided, p_greater (H1: saving > 0, the variant needs less data) and p_less (H1: saving < 0)."""
    log_v, log_b = np.log(np.asarray(variant_tokens, dtype=float)), np.log(np.asarray(baseline_tokens, dtype=float))
    if design not in ("paired", "unpaired"):
        raise ValueError(f"design: must be 'paired' or 'unpaired', got {design!r}")
    test = paired_t if design == "paired" else welch_t
    with warnings.catch_warnings():  # seeds that agree exactly (constructed curves) have no spread: no interval
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning)
        two, less, greater = (test(log_v, log_b, alt, level) for alt in ("two-sided", "less", "greater"))
    return {"design": two.design, "n": two.n, "level": level, "log_ratio": _value(two.estimate),
            "saving": _saving(two.estimate), "ci_low": _saving(two.high), "ci_high": _saving(two.low),
            "p_two_sided": _value(two.p), "p_greater": _value(less.p), "p_less": _value(greater.p),
            "df": _value(two.df)}


def _saving(log_ratio: Any) -> Any:
    if log_ratio is None:
        return None
    saving = 1.0 - np.exp(np.asarray(log_ratio, dtype=float))
    return float(saving) if saving.ndim == 0 else saving


def _value(value: Any) -> Any:
    if value is None:
        return None
    array = np.asarray(value, dtype=float)
    return float(array) if array.ndim == 0 else array


def seed_row(variant: Reading, baseline: Reading, target: float) -> dict:
    """One seed: its target, both readings, and the saving (measured), its bound, or nothing (undetermined)."""
    row = {"target": target, "variant_tokens": variant.tokens if variant.reached else None,
           "baseline_tokens": baseline.tokens if baseline.reached else None,
           "variant_last_tokens": variant.last_tokens, "baseline_last_tokens": baseline.last_tokens,
           "variant_bracket": [variant.low, variant.high], "baseline_bracket": [baseline.low, baseline.high],
           "reading_error": max(variant.error, baseline.error) if variant.reached and baseline.reached else None,
           "saving_bracket": None, "bound": None}
    if variant.reached and baseline.reached and variant.tokens > 0 and baseline.tokens > 0:
        row.update(status="measured", saving=1 - variant.tokens / baseline.tokens,
                   saving_bracket=[1 - variant.high / baseline.low if baseline.low > 0 else -math.inf,
                                   1 - variant.low / baseline.high])
    elif baseline.reached and baseline.tokens > 0 and not variant.reached:
        row.update(status="bounded", bound="at most", saving=1 - variant.last_tokens / baseline.tokens)
    elif variant.reached and variant.tokens > 0 and not baseline.reached:
        row.update(status="bounded", bound="at least", saving=1 - variant.tokens / baseline.last_tokens)
    else:
        why = ("neither run reaches the target" if not (variant.reached or baseline.reached)
               else "the target is reached before training")
        row.update(status="undetermined", saving=None, why=why)
    return row


def data_seeds(runs: Mapping[int, RunResult]) -> dict[int, int | None]:
    return {seed: run_data_seed(run.config) if run.config else None for seed, run in runs.items()}


def time_to_target(results: GridResults, variant: str, baseline: str, target: float | None = None,
                   level: float = 0.95, metric: str = "val_loss") -> dict:
    """The variant's data saving against the baseline at a target loss, per seed and over the seeds (JSON-able).

    target None: each seed's baseline final validation loss (its last evaluation of `metric`); a number: that loss
    for every seed. Seeds: those both cells finished (`results.done`). Returns
      per_seed   seed -> {status: measured | bounded | undetermined, saving (for bounded: the bound), bound
                 (None | "at most" | "at least"), target, variant_tokens, baseline_tokens (None when not reached),
                 *_last_tokens, *_bracket, saving_bracket, reading_error (log tokens)}
      status     measured (every seed) | bounded (some seed bounded, all one way: `bound`) | undetermined (an
                 undetermined seed, or bounds both ways) | no seeds
      saving, ci_low, ci_high, p_two_sided, p_greater, p_less, n, design, log_ratio, df   (`saving_interval`, bounded
                 seeds at their bound; None where status is undetermined)
      evaluations  how dense the curves are read: every_steps, every_tokens, largest log-token gap at a crossing and
                 the largest reading error, over the seeds
    """
    if not 0 < level < 1:
        raise TimeToTargetError(f"level must be in (0, 1), got {level!r}")
    for cell in (variant, baseline):
        if cell not in results.done:
            raise TimeToTargetError(f"{results.name}: no cell {cell!r}; cells: {results.cells}")
    v_runs, b_runs = results.done[variant], results.done[baseline]
    seeds = sorted(set(v_runs) & set(b_runs))
    unmatched = sorted(set(v_runs) ^ set(b_runs))
    design = seed_design(data_seeds({s: v_runs[s] for s in seeds}), data_seeds({s: b_runs[s] for s in seeds}))
    out: dict[str, Any] = {
        "grid": results.name, "variant": variant, "baseline": baseline, "metric": metric,
        "target": "baseline final" if target is None else float(target), "level": level, "design": design,
        "seeds": seeds, "unmatched_seeds": unmatched, "per_seed": {}, "paper": PAPER_SAVING,
    }
    steps, per_step, gaps, errors = set(), set(), [], []
    for seed in seeds:
        curves = {}
        for side, run in (("variant", v_runs[seed]), ("baseline", b_runs[seed])):
            curve = evaluation_curve(run, metric)
            curves[side] = curve
            steps.update(np.diff(curve.attrs["steps"][1:]).tolist())
            per_step.add(curve.attrs["tokens_per_step"])
        goal = float(curves["baseline"].iloc[-1]) if target is None else float(target)
        readings = {side: first_crossing(curve, goal) for side, curve in curves.items()}
        row = seed_row(readings["variant"], readings["baseline"], goal)
        out["per_seed"][seed] = row
        gaps += [r.gap for r in readings.values() if r.reached and r.low > 0]
        if row["reading_error"] is not None:
            errors.append(row["reading_error"])
    out["evaluations"] = {"every_steps": sorted(steps), "tokens_per_step": sorted(per_step),
                          "every_tokens": sorted(s * t for s in steps for t in per_step),
                          "largest_gap": max(gaps, default=None), "largest_reading_error": max(errors, default=None)}
    out.update(combine(out["per_seed"], design, level))
    return out


def combine(per_seed: Mapping[int, dict], design: str, level: float = 0.95) -> dict:
    """The saving over the seeds from their rows (`seed_row`): status (measured, bounded with its `bound`,
    undetermined, or no seeds) and, unless undetermined, `saving_interval` with every bounded seed in at its bound."""
    rows = list(per_seed.values())
    out: dict[str, Any] = {"per_seed": dict(per_seed), "status": "no seeds" if not rows else "undetermined",
                           "bound": None, "design": design,
                           "n": len(rows), "level": level, "saving": None, "ci_low": None, "ci_high": None,
                           "p_two_sided": None, "p_greater": None, "p_less": None, "log_ratio": None, "df": None}
    bounds = {r["bound"] for r in rows if r["status"] == "bounded"}
    if not rows or any(r["status"] == "undetermined" for r in rows) or len(bounds) > 1:
        return out
    out["status"], out["bound"] = ("bounded", bounds.pop()) if bounds else ("measured", None)
    v_tokens = [_at_bound(r, "variant") for r in rows]
    b_tokens = [_at_bound(r, "baseline") for r in rows]
    return {**out, **saving_interval(v_tokens, b_tokens, design, level)}


def _at_bound(row: dict, side: str) -> float:
    """A side's tokens for the interval: its reading, or its last evaluation where it never reached the target."""
    return row[f"{side}_tokens"] if row[f"{side}_tokens"] is not None else row[f"{side}_last_tokens"]


# ----------------------------------------------------------------------------------------------
# the verdict


def decide(result: dict, direction: str = "higher", evidence: bool = True) -> tuple[str, str]:
    """(verdict, note) of a claim on a time_to_target result: direction "higher" claims a saving (the variant needs
    less data), "lower" that it needs more. The claims rule (stats.verdict) on the interval when every seed was
    measured. With bounded seeds (in at their bound) only the conclusion the bound supports is drawn: a variant
    that never reached the target makes the estimate an overstatement of the saving, so "the variant needs more data"
    can be concluded and "less" cannot (it becomes inconclusive); a baseline that never reached a stated target
    mirrors that. An undetermined seed (neither run reached a stated target) or bounds both ways: "not tested"."""
    if direction not in ("higher", "lower"):
        raise ValueError(f"direction: must be higher or lower, got {direction!r}")
    rows = result["per_seed"]
    if result["status"] == "no seeds":
        return "inconclusive", "no seed with finished runs of both cells"
    if result["status"] == "undetermined":
        undetermined = [f"{r.get('why', 'neither run reaches the target')} in seed{s}" for s, r in rows.items()
                        if r["status"] == "undetermined"]
        why = ("; ".join(undetermined) if undetermined
               else "seeds bounded both ways (a variant and a baseline that never reach the target)")
        return "not tested", f"not tested: {why}"
    decided = verdict(result["ci_low"], result["ci_high"], result["n"], direction, evidence)
    if result["status"] == "measured":
        return decided, ""
    bounded = [f"seed{s}" for s, r in rows.items() if r["status"] == "bounded"]
    who = "the variant" if result["bound"] == "at most" else "the baseline"
    note = (f"{who} never reaches the target in {', '.join(bounded)} (counted at its last evaluation): the saving "
            f"is {result['bound']} {result['saving']:.3f}")
    supported = "lower" if result["bound"] == "at most" else "higher"  # the side a bound can show: saving < 0 or > 0
    shown = {"reproduced": direction, "contradicted": "lower" if direction == "higher" else "higher"}.get(decided)
    if shown is not None and shown != supported:
        return "inconclusive", note + f" (a bound cannot show a saving {'above' if shown == 'higher' else 'below'} 0)"
    return decided, note


# ----------------------------------------------------------------------------------------------
# the table and the command


def _count(x: float | None) -> str:
    if x is None:
        return "–"
    if not math.isfinite(x):
        return "∞"
    return f"{x / 1e6:.3f}M" if abs(x) >= 1e5 else f"{x:,.0f}"


def _pct(x: float | None) -> str:
    return "–" if x is None else ("−∞" if x == -math.inf else f"{100 * x:.1f}%")


def table(result: dict) -> str:
    """The per-seed readings and the saving over the seeds, as markdown."""
    rows = []
    for seed, r in result["per_seed"].items():
        bound = {"at most": "≤ ", "at least": "≥ "}.get(r["bound"] or "", "")
        bracket = r["saving_bracket"]
        variant = (_count(r["variant_tokens"]) if r["variant_tokens"] is not None
                   else f"> {_count(r['variant_last_tokens'])}")
        rows.append([f"seed{seed}", f"{r['target']:.4f}", _count(r["baseline_tokens"]), variant,
                     bound + _pct(r["saving"]) if r["saving"] is not None else "–",
                     f"[{_pct(bracket[0])}, {_pct(bracket[1])}]" if bracket else "–"])
    ci = ("–" if result["ci_low"] is None else f"[{_pct(result['ci_low'])}, {_pct(result['ci_high'])}]")
    bound = {"at most": "≤ ", "at least": "≥ "}.get(result["bound"] or "", "")
    rows.append([f"**all ({result['design']}, n={result['n']})**", "", "", "",
                 f"**{bound}{_pct(result['saving'])}**", f"{int(100 * result['level'])}% CI {ci}"])
    header = ["seed", "target", f"tokens {result['baseline']}", f"tokens {result['variant']}", "saving",
              "reading bracket / interval"]
    ev = result.get("evaluations") or {}
    lines = [f"{result['variant']} vs {result['baseline']} in {result['grid']}: tokens to first reach "
             + ("the baseline's final " + result["metric"] if result["target"] == "baseline final"
                else f"{result['metric']} {result['target']}") + f"; status {result['status']}",
             "", markdown_table(header, rows), ""]
    if ev.get("every_steps"):
        gap = ev.get("largest_gap")
        lines.append(f"Evaluations every {'/'.join(map(str, ev['every_steps']))} steps "
                     f"({'/'.join(_count(t) for t in ev['every_tokens'])} tokens); largest log-token gap at a crossing "
                     + ("–" if gap is None
                        else f"{gap:.3f} (half: {gap / 2:.3f}, {100 * math.expm1(gap / 2):.1f}% in tokens)")
                     + "; largest reading error "
                     + ("–" if ev.get("largest_reading_error") is None else f"{ev['largest_reading_error']:.3f}")
                     + " in log tokens.")
    if result["p_two_sided"] is not None:
        lines.append(f"p (two-sided) {result['p_two_sided']:.3g}; p (saving > 0) {result['p_greater']:.3g}. "
                     f"Paper: {100 * PAPER_SAVING:.1f}% less data (v5).")
    verdict_text, note = decide(result, "higher")
    lines.append(f"Claim 'the variant needs less data': {verdict_text}" + (f" ({note})" if note else "") + ".")
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lit_resformer.measures.time_to_target",
                                     description="Tokens a variant needs to first reach a target validation loss, "
                                                 "and its data saving against the baseline with an interval.")
    parser.add_argument("grid_dir", type=Path)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--baseline", default=None, help="default: the grid's baseline")
    parser.add_argument("--target", type=float, default=None, help="a loss (default: the baseline's final, per seed)")
    parser.add_argument("--metric", default="val_loss", help="val_loss (default) or val_loss/<domain>")
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        results = load_results(args.grid_dir)
        result = time_to_target(results, args.variant, args.baseline or results.manifest["baseline"], args.target,
                                args.level, args.metric)
    except (FileNotFoundError, TimeToTargetError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(_jsonable(result), indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
