"""The transfer table (lit_resformer.board.transfer): a paper claim's comparisons set side by side by regime, the
regime read from the runs compared (a matrix point's optimizer, tokens, parameters, corpus); transfer rows shown
beneath their claim and never counted in its verdict; a verdict decisive in opposite directions named a flip."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from lit_resformer.board.transfer import claim_markdown, markdown, regime_label, transfer_rows
from lit_resformer.verdicts import paper_claims as pc
from tests.helpers.claims_grids import row

EVIDENCE = {"optimizer": ["adamw"], "tokens": [2_048_000, 2_048_000], "params": [2_250_000, 2_250_000], "size": ["tiny"],
            "corpus": ["embedded"]}
PINNED = {**EVIDENCE, "optimizer": ["adamw", "muon"], "corpus": ["pinned"]}
REGISTRY = {"claims": [{"id": "table5", "statement": "ResFormer is lower", "where": "Table 5", "comparisons": ["x"]},
                       {"id": "other", "statement": "s", "where": "Fig. 1", "comparisons": ["y"]}],
            "preconditions": {}}


def rows():
    evidence = replace(row("fig7-evidence", "reproduced"), regime=EVIDENCE)
    adamw = replace(row("transfer-muon", "reproduced", "x [optimizer=adamw]"), regime=PINNED, delta=-0.08)
    muon = replace(row("transfer-muon", "contradicted", "x [optimizer=muon]"), regime=PINNED, delta=+0.01,
                   low=0.002, high=0.02)
    undecided = replace(row("fig1-evidence", "inconclusive", "y"), regime=EVIDENCE)
    return [evidence, adamw, muon, undecided]


def test_the_regime_is_read_from_the_runs_and_the_matrix_point():
    evidence, adamw, muon, _ = rows()
    assert regime_label(evidence) == "AdamW, 2.0M tokens, tiny, embedded"
    assert regime_label(adamw) == "AdamW, 2.0M tokens, tiny, pinned"
    assert regime_label(muon) == "Muon, 2.0M tokens, tiny, pinned"
    # runs of several budgets (a ladder's rungs) show their range, not the largest alone
    ladder = replace(adamw, regime={**PINNED, "tokens": [3_072_000, 18_432_000]})
    assert regime_label(ladder) == "AdamW, 3.1M-18.4M tokens, tiny, pinned"


def test_transfer_rows_are_shown_not_counted_and_a_flip_is_named():
    table5, other = pc.paper_claims(rows(), REGISTRY)
    # the transfer grid's contradiction does not make the paper claim "mixed": its condition is not the paper's
    assert table5.verdict == "reproduced"
    assert [(e.row.grid, e.counted, e.status) for e in table5.evidence] == [
        ("fig7-evidence", True, ""), ("transfer-muon", False, "transfer regime (not counted)"),
        ("transfer-muon", False, "transfer regime (not counted)")]
    labels, table = transfer_rows([table5, other])
    assert labels == ["AdamW, 2.0M tokens, tiny, embedded", "AdamW, 2.0M tokens, tiny, pinned",
                      "Muon, 2.0M tokens, tiny, pinned"]
    assert [r.claim.id for r in table] == ["table5"]  # a claim decided nowhere and never transferred is left out
    assert table[0].flips
    text = markdown([table5, other])
    assert "table5 **(flips)**" in text and "**contradicted** +0.010 [+0.002, +0.020]" in text
    assert "Verdicts that flip between regimes: table5." in text
    # the claim's row on its side (beneath the board's plot across regimes): a line per comparison, the same cells
    # (no degrees of freedom here: a bare change)
    assert table[0].comparisons == [e.row for e in table5.evidence]
    assert table[0].grids == ["fig7-evidence", "transfer-muon"]
    assert claim_markdown(table[0]).splitlines()[2:] == [
        "| AdamW, 2.0M tokens, tiny, embedded | fig7-evidence | **reproduced** -0.100 [-0.200, -0.050] |",
        "| AdamW, 2.0M tokens, tiny, pinned | transfer-muon | **reproduced** -0.080 [-0.200, -0.050]; change +0.020 |",
        "| Muon, 2.0M tokens, tiny, pinned | transfer-muon | **contradicted** +0.010 [+0.002, +0.020]; change +0.110 |"]


def test_each_transfer_comparison_says_how_far_its_effect_moved_from_the_counted_one():
    """The counted -0.10 [-0.15, -0.05] (paired, 5 seeds) against the transfer rows: Welch's interval of the
    difference (measures.stats.change_between, whose coverage tests/measures/test_stats_coverage.py simulates),
    shown in the transfer cells; a comparison without degrees of freedom (no t interval) gets the bare difference."""
    evidence, adamw, muon, undecided = rows()
    evidence = replace(evidence, low=-0.15, high=-0.05, df=4.0, design="paired")
    adamw = replace(adamw, low=-0.12, high=-0.04, df=4.0, design="paired")  # -0.08: within noise of -0.10
    muon = replace(muon, df=2.0, design="paired")  # +0.01 [+0.002, +0.020]: moved past zero
    table5, _ = pc.paper_claims([evidence, adamw, muon, undecided], REGISTRY)
    (row_,) = transfer_rows([table5])[1]
    assert row_.counted == [evidence] and row_.change(evidence) is None
    near, past = row_.change(adamw), row_.change(muon)
    se = np.hypot(0.05 / stats.t.ppf(0.975, 4), 0.04 / stats.t.ppf(0.975, 4))
    df = se**4 / ((0.05 / stats.t.ppf(0.975, 4)) ** 4 / 4 + (0.04 / stats.t.ppf(0.975, 4)) ** 4 / 4)
    assert near.test.estimate == pytest.approx(0.02) and near.test.df == pytest.approx(df)
    assert near.test.high - near.test.estimate == pytest.approx(stats.t.ppf(0.975, df) * se)
    assert near.direction == "no change shown"
    assert past.test.estimate == pytest.approx(0.11) and past.test.low > 0 and past.direction == "shrinks"
    text = markdown([table5])
    assert f"**contradicted** +0.010 [+0.002, +0.020]; shrinks +0.110 [{past.test.low:+.3f}, {past.test.high:+.3f}]" \
        in text
    assert past.to_dict() == {"reference_grid": "fig7-evidence", "change": past.test.estimate, "ci_low": past.test.low,
                              "ci_high": past.test.high, "df": past.test.df, "p_two_sided": past.test.p,
                              "direction": "shrinks"}
    no_df = replace(muon, df=None)
    table5, _ = pc.paper_claims([evidence, adamw, no_df, undecided], REGISTRY)
    (row_,) = transfer_rows([table5])[1]
    assert row_.change(no_df).test.low is None and "; change +0.110" in markdown([table5])


def test_a_grown_effect_is_named():
    evidence = replace(rows()[0], low=-0.11, high=-0.09, df=4.0, design="paired")
    larger = replace(rows()[1], delta=-0.30, low=-0.32, high=-0.28, df=4.0, design="paired")
    table5, _ = pc.paper_claims([evidence, larger], REGISTRY)
    (row_,) = transfer_rows([table5])[1]
    assert row_.change(larger).direction == "grows"
