"""time_to_target as a claim metric (lit_resformer.runs.claim_spec, lit_resformer.verdicts.judges): the metric and
its `target` parse, `target` is refused elsewhere, and the committed fig7-evidence runs judge the headline's
"less data" (paper v5: 20.3%) read along the training curve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lit_resformer.measures import time_to_target as ttt
from lit_resformer.runs import claim_spec
from lit_resformer.runs.claim_spec import Claim, parse_claims
from lit_resformer.runs.results import load_results
from lit_resformer.verdicts import claim_registry
from lit_resformer.verdicts.judgements import evaluate_grid
from lit_resformer.verdicts.rendering import table

REPO = Path(__file__).resolve().parents[2]
FIG7 = REPO / "docs" / "results" / "fig7-evidence"
CELLS = [{"name": n, "family": None, "coords": {}} for n in ("vanilla", "resformer")]
CLAIM = "ResFormer reaches vanilla's final validation loss with less data"


def claim(**fields) -> dict:
    return {"claim": "c", "a": "resformer", "b": "vanilla", "metric": "time_to_target", "direction": "higher",
            **fields}


def test_the_grid_side_constant_is_the_metrics_name():
    assert claim_spec.TIME_TO_TARGET == ttt.METRIC


def test_time_to_target_parses_with_an_optional_target_and_a_domain():
    (plain,) = parse_claims([claim()], CELLS)
    assert (plain.metric, plain.target) == ("time_to_target", None) and "target" not in plain.to_dict()
    (stated,) = parse_claims([claim(metric="time_to_target/code", target=4.5)], CELLS)
    assert (stated.metric, stated.target) == ("time_to_target/code", 4.5) and stated.to_dict()["target"] == 4.5


@pytest.mark.parametrize("fields, message", [
    ({"metric": "val_loss", "direction": "lower", "target": 4.5},
     "claims[0].target applies only to metrics ['time_to_target', 'time_to_target/<domain>'], not 'val_loss'"),
    ({"target": -1}, "claims[0].target must be a positive loss in nats, got -1"),
    ({"target": True}, "claims[0].target must be a positive loss in nats, got True"),
    ({"at": "end"}, "claims[0].at: 'end' applies to metric(s)"),
    ({"over": "data.seq_len"}, "claims[0].over applies only to metrics"),
    ({"margin": 0.05}, "'equivalence_saving', 'val_loss_each_at_best', 'val_loss_at_b_best', 'val_loss_gap_difference', 'data_saving_slope'], not 'time_to_target'"),  # the metrics that take a margin
    ({"metric": "time_to_target/"}, "claims[0].metric must be one of"),
])
def test_target_is_refused_outside_time_to_target_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_claims([claim(**fields)], CELLS)


def test_the_committed_fig7_evidence_grid_stores_the_claim_its_grid_file_declares():
    """Declared in configs/ after the runs, the comparison reaches the committed runs through their manifest
    (lit_resformer.grids.spec.refresh_claims, which `report` runs): the stored claims are what is judged."""
    (declared,) = [c for c in load_results(FIG7).claims if c.metric == "time_to_target"]
    assert (declared.claim, declared.a, declared.b, declared.direction) == (CLAIM, "resformer", "vanilla", "higher")


@pytest.mark.integration  # the committed fig7-evidence runs
def test_fig7_evidence_resformer_reaches_vanillas_final_loss_with_less_data():
    result = ttt.time_to_target(load_results(FIG7), "resformer", "vanilla")
    verdicts = evaluate_grid(FIG7)
    (v,) = [v for v in verdicts if v.claim.metric == "time_to_target"]
    assert (v.verdict, v.unadjusted, v.design, v.n) == ("reproduced", "reproduced", "paired", 5)
    assert (v.delta, v.low, v.high) == pytest.approx((result["saving"], result["ci_low"], result["ci_high"]))
    assert v.delta == pytest.approx(0.280, abs=1e-3) and 0 < v.low < v.delta < v.high  # the re-derived baseline
    assert v.p_raw == pytest.approx(result["p_greater"]) and v.p_two_sided == pytest.approx(result["p_two_sided"])
    # adjusted with the grid's other comparisons (Holm): its p only grows, and stays below alpha
    assert v.p_two_sided <= v.p_holm < 0.05 and v.evidence and v.runs is not None
    header, rows = table([v])
    assert rows[0][header.index("Δ (a − b)")] == "+28.0%" and "a needs less data" in rows[0][header.index("metric")]
    # evidence for the headline's "less data" in the registry
    (headline,) = [c for c in claim_registry.load_registry()["claims"] if c["id"] == "headline-less-data"]
    assert CLAIM in headline["comparisons"]


def test_a_claim_with_runs_that_never_reach_a_stated_target_is_not_tested(monkeypatch):
    results = load_results(FIG7)
    far = Claim("never", "resformer", "vanilla", "time_to_target", "higher", target=0.5)
    results.__dict__["claims"] = [far]  # what a manifest storing only this claim would give
    (v,) = evaluate_grid(results)
    assert v.verdict == "not tested" and v.note.startswith("not tested:") and v.p_holm is None
