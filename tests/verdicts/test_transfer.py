"""The transfer table (lit_resformer.verdicts.transfer): a paper claim's comparisons set side by side by regime, the
regime read from the runs compared (a matrix point's optimizer, tokens, parameters, corpus); transfer rows shown
beneath their claim and never counted in its verdict; a verdict decisive in opposite directions named a flip."""

from __future__ import annotations

from dataclasses import replace

from lit_resformer.verdicts import paper_claims as pc
from lit_resformer.verdicts.transfer import markdown, regime_label, transfer_rows
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
