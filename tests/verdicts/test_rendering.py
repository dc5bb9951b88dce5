"""How an inconclusive verdict says what it rules out (lit_resformer.verdicts.rendering.verdict_text): every kind of
the power classification, and, where there is none, why, from the verdict's real power dict (power_of)."""

from __future__ import annotations

import pytest

from lit_resformer.measures.power import power_of
from lit_resformer.runs.claim_spec import Claim
from lit_resformer.verdicts.rendering import verdict_text
from lit_resformer.verdicts.verdict import Verdict

CLAIM = Claim("a is lower", "a", "b", "val_loss", "lower")
LEVEL = 0.05


def inconclusive(low, high, n=5, df=4.0, design="paired", effect=0.027, delta=None):
    """An inconclusive verdict with the power reading the scoreboard gives it; its estimate is the interval's middle
    unless given."""
    delta = (low + high) / 2 if delta is None and low is not None else delta
    power = power_of(design, n, df, low, high, LEVEL, effect, "inconclusive")
    return Verdict("g", CLAIM, "inconclusive", delta, low, high, n, design=design, df=df, power=power)


@pytest.mark.parametrize(("verdict", "text"), [
    # inside +-0.027 with a TOST passing: an equivalence result
    (inconclusive(-0.004, 0.004), "**inconclusive** (bounded within ±0.027)"),
    # a wide interval: the MDE exceeds 0.027, and the seeds that would reach it are named
    (inconclusive(-0.06, 0.02), "**inconclusive** (underpowered: {seeds} seeds for ±0.027)"),
    # narrow enough to detect 0.027, yet reaching past it: this draw fell between
    (inconclusive(-0.03, 0.001), "**inconclusive** (unresolved)"),
    # no effect of interest: neither reading is defined, and the row says so
    (inconclusive(-0.06, 0.02, effect=None), "**inconclusive** (no effect size declared)"),
    # no MDE: one seed, an interval that is not a t interval (no degrees of freedom), no estimate
    (inconclusive(None, None, n=1, df=None, delta=-0.02), "**inconclusive** (no MDE: fewer than 2 seeds)"),
    (inconclusive(-0.05, 0.1, df=None), "**inconclusive** (no MDE: not a t interval)"),
    (inconclusive(None, None, n=0, df=None, design=""), "**inconclusive** (no estimate)"),
])
def test_an_inconclusive_verdict_says_what_it_rules_out_or_why_it_cannot(verdict, text):
    assert verdict_text(verdict) == text.format(seeds=verdict.power["seeds_needed"])
    classified = verdict.power["classification"]
    assert (classified is None) == ("(no " in text), "a reason is given exactly where power.classify has no reading"


def test_a_decided_verdict_carries_no_power_reading():
    decided = Verdict("g", CLAIM, "reproduced", -0.1, -0.15, -0.05, 5, design="paired", df=4.0,
                      power=power_of("paired", 5, 4.0, -0.15, -0.05, LEVEL, 0.027, "reproduced"))
    assert verdict_text(decided) == "**reproduced**"
