"""What a comparison's design can detect, and what an inconclusive verdict rules out: the power side of the verdicts
of lit_resformer.measures.stats.

Terms (each function below computes one):

  spread        the noise a comparison measures its effect against, in the metric's unit: the standard deviation
                of the per-seed differences a - b (paired), of the per-seed estimates (per-seed), or, unpaired, the
                per-arm standard deviation that with n seeds on each arm gives the comparison's standard error
                (sqrt((s_a^2 + s_b^2) / 2) when both arms have n seeds). `spread_from_values` computes it from the
                per-seed values, `spread_from_interval` gets it back from what a verdict stores (its two-sided 95% t
                interval, n and degrees of freedom): the interval's half-width is t(0.975, df) standard errors.
  adjusted level
                the two-sided level a comparison's test must pass to be decisive whatever the other comparisons of
                its Holm family show: ALPHA / m for a family of m tests (`family_level`). Holm compares the k-th
                smallest of m p-values with ALPHA / (m - k + 1), so a p below ALPHA / m is decisive at any rank,
                while one above it is decisive only if enough other comparisons of the family are decided first;
                what the others will show is not known when a grid is planned, so the level of Holm's first step
                is the one a design can count on. The minimum detectable effect at it is therefore conservative: at
                the family's later steps a comparison may be decided with a smaller effect.
  MDE           minimum detectable effect: the smallest true |effect| that the comparison's design (its test, n,
                degrees of freedom and spread) calls decisive with probability POWER (80%), two-sided, at its
                adjusted level (`mde`). The power is statsmodels' (TTestPower for the paired and per-seed designs,
                the one-sample t of the differences or estimates: exact; TTestIndPower for the unpaired design, given
                Welch's degrees of freedom: the noncentral-t approximation of Welch's test, which estimates its
                degrees of freedom and so rejects less often than that: simulated at the MDE with equal variances,
                within 2 points of 80% from 8 seeds a side, 77.6% (alpha 0.05) and 73.3% (0.05 / 7) at 5, and
                70% and 56% at 3, where an unpaired MDE is optimistic).
  seeds needed  the smallest n at which the MDE reaches a given effect, with the same design, spread and level
                (`seeds_needed`); an unpaired design adds n seeds to each arm and keeps the ratio of its Welch
                degrees of freedom to n - 1, which is fixed by the two arms' variances when both have n seeds.
  effect of interest
                the smallest effect a claim is about: the paper's effect where the claim's `paper:` text gives one
                as a loss difference in nats (`paper_effect_nats`), else the claim's declared `margin`
                (`effect_of_interest`); None for a claim with neither.
  TOST          two one-sided tests of equivalence against +-E, the effect of interest: the larger of the p-values of
                "effect <= -E" and "effect >= +E", from the verdict's estimate and standard error with its degrees
                of freedom (`tost_p`; statsmodels' ttost_paired and ttost_ind give the same p from per-seed values).

An inconclusive verdict is read as (`classify`):

  bounded       its 95% interval lies inside +-E and its TOST p is below its adjusted level: an equivalence result,
                no effect as large as E, held to the same two conditions as a decisive verdict (an interval and an
                adjusted p);
  underpowered  not bounded, and its MDE exceeds E: the design could not have detected the effect of interest;
                `seeds_needed` says how many seeds would;
  unresolved    neither: the design could detect E (MDE <= E), yet the interval holds zero and reaches past +-E
                (or lies inside it without the TOST passing at the adjusted level): this draw landed between the
                two answers, and more seeds narrow it.
  None          undefined: no t interval (fewer than 2 seeds, no spread, or an interval that is not a t interval,
                e.g. a data saving's log-ratio one) or no effect of interest.

Every function returns None where its quantity is undefined, and `power_of` gathers them for one verdict as plain
JSON values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

import numpy as np
from scipy import optimize, stats
from statsmodels.stats.power import TTestIndPower, TTestPower

from lit_resformer.measures.stats import ALPHA, Design, welch_t
from lit_resformer.runs.claim_spec import NATS, Claim, metric_kind

POWER = 0.8  # the probability of a decisive verdict at the MDE
INTERVAL_LEVEL = 1 - ALPHA  # every verdict's interval: two-sided 95%
MAX_SEEDS = 1_000_000  # seeds_needed searches no further (an effect ~1000x below the spread)


@dataclass(frozen=True)
class Spread:
    """A comparison's design and noise (module docstring: spread): `sd` in the metric's unit, over `n` seeds (pairs,
    per-seed estimates, or each arm's), with `df` degrees of freedom (n - 1, or Welch's)."""

    design: Design
    sd: float
    n: int
    df: float

    def __post_init__(self):
        if self.design not in get_args(Design):
            raise ValueError(f"design: must be one of {', '.join(get_args(Design))}, got {self.design!r}")
        if self.n < 2 or not self.df > 0 or not (math.isfinite(self.sd) and self.sd > 0):
            raise ValueError(f"a spread needs n >= 2, df > 0 and a finite sd > 0, got n={self.n}, df={self.df}, "
                             f"sd={self.sd}")

    def df_at(self, n: int) -> float:
        """Degrees of freedom with n seeds: n - 1, or for the unpaired design Welch's, which with n seeds on each arm
        is n - 1 times a factor (between 1 and 2) that only the arms' variances set."""
        return (n - 1) * (self.df / (self.n - 1) if self.design == "unpaired" else 1.0)

    def standard_error(self, n: int | None = None) -> float:
        """The standard error of the comparison's estimate with n seeds (default: its own)."""
        n = self.n if n is None else n
        return self.sd * math.sqrt((2 if self.design == "unpaired" else 1) / n)


def family_level(family_size: int) -> float:
    """The adjusted level of a comparison in a Holm family of `family_size` tests: ALPHA / m (module docstring)."""
    if isinstance(family_size, bool) or not isinstance(family_size, int) or family_size < 1:
        raise ValueError(f"family_size: must be an integer >= 1 (the comparisons in the Holm family), got {family_size!r}")
    return ALPHA / family_size


def spread_from_values(design: Design, a: Sequence[float], b: Sequence[float] | None = None) -> Spread | None:
    """The spread from per-seed values: a and b paired by position (paired), each arm's values (unpaired), or the
    per-seed estimates in a (per-seed, b None). None with fewer than 2 seeds or no spread."""
    if design not in get_args(Design):
        raise ValueError(f"design: must be one of {', '.join(get_args(Design))}, got {design!r}")
    if (b is None) != (design == "per-seed"):
        raise ValueError(f"{design}: " + ("the estimates are a; b must be None" if design == "per-seed" else
                                          "b, the baseline's per-seed values, is needed"))
    a = np.asarray(a, dtype=float)
    if design == "unpaired":
        b = np.asarray(b, dtype=float)
        n = min(len(a), len(b))
        if n < 2:
            return None
        standard_error = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        return _spread(design, standard_error * math.sqrt(n / 2), n, float(welch_t(a, b).df))
    if design == "paired":
        if len(b) != len(a):
            raise ValueError("paired: a and b need one value per seed each, in the same order")
        a = a - np.asarray(b, dtype=float)
    return _spread(design, float(a.std(ddof=1)), len(a), len(a) - 1) if len(a) >= 2 else None


def spread_from_interval(design: str, n: int, df: float | None, low: float | None, high: float | None) -> Spread | None:
    """The spread a verdict's two-sided 95% t interval (low, high) with `df` degrees of freedom over n seeds implies
    (module docstring); None where there is none: no interval, n < 2, no degrees of freedom (not a t interval),
    an infinite end, or a design with no t interval."""
    if (design not in get_args(Design) or n < 2 or df is None or low is None or high is None
            or not (math.isfinite(low) and math.isfinite(high) and math.isfinite(df) and df > 0)):
        return None
    se = (high - low) / (2 * stats.t.ppf(1 - (1 - INTERVAL_LEVEL) / 2, df))
    return _spread(design, se * math.sqrt(n / (2 if design == "unpaired" else 1)), n, df)


def _spread(design: str, sd: float, n: int, df: float) -> Spread | None:
    return Spread(design, float(sd), n, float(df)) if n >= 2 and math.isfinite(sd) and sd > 0 and df > 0 else None


def power_at(spread: Spread, effect: float, level: float, n: int | None = None) -> float:
    """The probability that the design's two-sided test at `level` rejects in the direction of a true effect of
    |effect|, with n seeds (default: its own): statsmodels' power of the one-sample t (paired, per-seed) or of the
    two-sample t given Welch's degrees of freedom (unpaired), for the one tail at level / 2. A rejection of the wrong
    sign is no detection of the effect (and is below 1e-4 at any MDE); scipy's noncentral t, under statsmodels,
    returns NaN for that far tail, and for the near one where the power is 1 to within rounding, which is what such
    a NaN is taken for."""
    n = spread.n if n is None else n
    standardized = abs(effect) / spread.sd
    if spread.design == "unpaired":
        power = TTestIndPower().power(standardized, n, level / 2, ratio=1.0, df=spread.df_at(n), alternative="larger")
    else:
        power = TTestPower().power(standardized, n, level / 2, alternative="larger")
    return 1.0 if math.isnan(power) else float(power)


def mde(spread: Spread | None, level: float, n: int | None = None, power: float = POWER) -> float | None:
    """The minimum detectable effect (module docstring) with n seeds (default: the spread's own), in the metric's
    unit; None without a spread. The root is found on statsmodels' power function with scipy's brentq, from one
    standard error up: statsmodels' own solve_power returns its search bound (an effect size of 10) unflagged for
    2-3 seeds at a Holm level (e.g. 0.05 / 12), and takes no Welch degrees of freedom."""
    if spread is None:
        return None
    _check_level(level, power)
    n = spread.n if n is None else n
    upper = spread.standard_error(n)  # a power below 0.5 at any level: the root lies above it
    while power_at(spread, upper, level, n) < power:
        upper *= 2
    return float(optimize.brentq(lambda effect: power_at(spread, effect, level, n) - power, upper / 2, upper,
                                 xtol=1e-12 * spread.sd, rtol=1e-12))


def seeds_needed(spread: Spread | None, effect: float | None, level: float, power: float = POWER) -> int | None:
    """The fewest seeds (pairs, estimates, or seeds on each arm) at which the design detects |effect| with `power`,
    two-sided at `level`: the smallest n with mde(n) <= |effect|. None without a spread or an effect, or beyond
    MAX_SEEDS."""
    if spread is None or effect is None or effect == 0:
        return None
    _check_level(level, power)
    low, high = 1, 2  # power_at(low) < power <= power_at(high) once the search ends
    while power_at(spread, effect, level, high) < power:
        if high >= MAX_SEEDS:
            return None
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if power_at(spread, effect, level, middle) >= power else (middle, high)
    return high


def tost_p(low: float | None, high: float | None, spread: Spread | None, effect: float | None) -> float | None:
    """The p-value of two one-sided tests that the true effect lies inside +-|effect|, from a verdict's two-sided
    95% t interval (its middle is the estimate) and the spread it implies: the larger of the one-sided p-values
    against -|effect| and +|effect| on the t distribution with the spread's degrees of freedom. None without an
    interval, a spread or an effect."""
    if low is None or high is None or spread is None or effect is None:
        return None
    estimate, se, bound = (low + high) / 2, spread.standard_error(), abs(effect)
    above_lower = stats.t.sf((estimate + bound) / se, spread.df)
    below_upper = stats.t.cdf((estimate - bound) / se, spread.df)
    return float(max(above_lower, below_upper))


def classify(low: float | None, high: float | None, mde_now: float | None, effect: float | None,
             tost: float | None, level: float) -> str | None:
    """bounded, underpowered or unresolved (module docstring), for an inconclusive verdict; None where undefined."""
    if low is None or high is None or mde_now is None or effect is None or tost is None:
        return None
    bound = abs(effect)
    if -bound < low and high < bound and tost < level:
        return "bounded"
    return "underpowered" if mde_now > bound else "unresolved"


def power_of(design: str, n: int, df: float | None, low: float | None, high: float | None, level: float,
             effect: float | None = None, verdict: str | None = None) -> dict:
    """Power and equivalence of one verdict, as JSON values: its spread (`sd`), the MDE at `level` (the adjusted
    level: `family_level`) and at ALPHA (`mde_at_alpha`, unadjusted), and against the effect of interest `effect` (None: none) the seeds needed to detect
    it, the TOST p, and the classification (`classify`; only for an inconclusive `verdict`, or any when None).
    `level` is checked; every other quantity is None where undefined (no t interval, n < 2, no effect)."""
    _check_level(level, POWER)
    if effect is not None and not (math.isfinite(effect) and effect != 0):
        raise ValueError(f"effect: must be a finite non-zero effect of interest or None, got {effect!r}")
    spread = spread_from_interval(design, n, df, low, high)
    mde_now = mde(spread, level)
    tost = tost_p(low, high, spread, effect)
    classified = (classify(low, high, mde_now, effect, tost, level)
                  if verdict is None or verdict == "inconclusive" else None)
    return {"level": level, "power": POWER, "sd": None if spread is None else spread.sd, "mde": mde_now,
            "mde_at_alpha": mde(spread, ALPHA),  # the same design at the unadjusted level, beside the adjusted one
            "effect": None if effect is None else abs(effect),
            "seeds_needed": seeds_needed(spread, effect, level), "tost_p": tost, "classification": classified}


def _check_level(level: float, power: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level: must be in (0, 1) (a two-sided test's alpha), got {level!r}")
    if not level < power < 1:
        raise ValueError(f"power: must be in (level, 1), got {power!r}")


# ----------------------------------------------------------------------------------------------
# The effect of interest of a claim.

# A loss difference is written in `paper:` as a signed number with no unit ("-0.0272 at 82M (Table 5)"): nats are
# the unit of every loss here. The first signed number (a sign not glued to a word: "first-token" has none)...
_SIGNED_NUMBER = re.compile(r"(?<![\w.])[-+−]\d+(?:\.\d+)?")
# ...is not nats when a unit of another scale follows it,
_OTHER_UNIT = re.compile(r"\s*(?:%|x\b|×|bpb\b|bits?\b|steps?\b|tokens?\b|pp\b)", re.IGNORECASE)
# and the text is no loss difference at all when it states its effect as a percentage (a saving, "12.2% more
# parameters"): a relative effect beside a fraction, for which no number of nats would be right.


def paper_effect_nats(text: str | None) -> float | None:
    """The paper's effect in nats, as a magnitude, from a claim's `paper:` text where that text gives it as a loss
    difference: the first signed number, when no other unit follows it and the text speaks of no percentage.
    "-0.0272 at 82M, -0.0323 at 180M, ..." -> 0.0272; "20.3% less data", "-0.122 (12.2% more parameters: ...)",
    "... -0.015 bpb with AdamW ...", "< 10x the others'", "not reported" -> None."""
    if not text or "%" in text:
        return None
    found = _SIGNED_NUMBER.search(text)
    if found is None or _OTHER_UNIT.match(text, found.end()):
        return None
    return abs(float(found.group().replace("−", "-")))


def in_nats(metric: str) -> bool:
    """Whether a claim's metric (and so its difference a - b) is a loss in nats: the summary metrics."""
    kind = metric_kind(metric)
    return kind is not None and kind.unit == NATS


def effect_of_interest(claim: Claim) -> float | None:
    """The smallest effect the claim is about, in its metric's unit: the paper's effect where the claim's metric is
    in nats and its `paper:` text gives a loss difference (`paper_effect_nats`), else its `margin`; None when it
    has neither."""
    paper = paper_effect_nats(claim.paper) if in_nats(claim.metric) else None
    return paper if paper is not None else claim.margin
