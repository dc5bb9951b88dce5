"""The paper claim as the unit of the scoreboard (lit_resformer.verdicts.paper_claims, configs/claims.yaml): the
derivation rule, one verdict per comparison wherever it is shown, the paper's words each claim quotes, the
preconditions' dates, and the counts the documents print."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from lit_resformer.board import declared
from lit_resformer.grids.rederivation import runs_without_provenance, unrecorded_dirty_runs
from lit_resformer.measures.stats import ALPHA, benjamini_yekutieli, fragile
from lit_resformer.runs.claim_spec import Claim
from lit_resformer.runs.directory import grid_dirs, grid_index
from lit_resformer.verdicts import claim_registry
from lit_resformer.verdicts import paper_claims as pc
from lit_resformer.verdicts.judgements import Judgements
from lit_resformer.verdicts.rendering import table, verdict_text
from lit_resformer.verdicts.scoreboard_rows import scoreboard
from lit_resformer.verdicts.verdict import Verdict, judge
from tests.helpers.claims_grids import row

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs/results"
RECORD = REPO / "tests/verdicts/claims-docs-results.json"


def test_a_claims_verdict_is_derived_by_one_rule():
    assert pc.derive([]) == "not tested"
    assert pc.derive(["reproduced", "reproduced"]) == "reproduced"
    assert pc.derive(["reproduced", "inconclusive"]) == "inconclusive"  # "at every size" needs every size
    assert pc.derive(["reproduced", "not tested"]) == "inconclusive"
    assert pc.derive(["contradicted", "inconclusive"]) == "contradicted"
    assert pc.derive(["reproduced", "contradicted"]) == "mixed"
    assert pc.derive(["not tested", "not tested"]) == "not tested"


def test_a_question_tested_in_a_higher_tier_supersedes_the_lower_tier():
    registry = {"claims": [{"id": "c", "statement": "s", "where": "Fig. 1", "comparisons": ["x"]}],
                "preconditions": {}}
    rows = [row("fig1-repro", "not tested"), row("fig1-evidence", "reproduced")]
    (claim,) = pc.paper_claims(rows, registry)
    assert claim.verdict == "reproduced" and claim.tiers == ["evidence"]
    assert [(e.row.grid, e.counted, e.status) for e in claim.evidence] == [
        ("fig1-repro", False, "superseded by fig1-evidence"), ("fig1-evidence", True, "")]
    # a question the higher tier could not test leaves the lower tier's row counted
    rows = [row("fig1-repro", "inconclusive"), row("fig1-evidence", "not tested")]
    (claim,) = pc.paper_claims(rows, registry)
    assert [e.counted for e in claim.evidence] == [True, True] and claim.verdict == "inconclusive"
    # a claim nothing measures is not tested, saying what would test it
    registry["claims"].append({"id": "d", "statement": "t", "where": "Table 1", "not_tested": "needs zero-shot runs"})
    assert pc.paper_claims([], registry)[1].reason == "needs zero-shot runs"


def test_one_measurement_counts_for_one_claim_and_the_tally_counts_independent_runs():
    """A comparison two claims list counts for the first (registry order) and is shown under the second as "see"; a
    claim's reason names the rows that kept it from their verdict; claims whose comparisons test the same variant's
    runs are one measurement in the tally; every counted test gets its board-wide Benjamini-Yekutieli q."""
    registry = {"preconditions": {}, "claims": [
        {"id": "t5", "statement": "s", "where": "Table 5", "comparisons": ["shared"]},
        {"id": "f10", "statement": "s", "where": "Fig. 10", "comparisons": ["shared", "eq2", "eq6"]},
        {"id": "cla", "statement": "s", "where": "Fig. 5", "comparisons": ["cla-k"]},
        {"id": "cla-most", "statement": "s", "where": "Fig. 5", "comparisons": ["cla-most"]}]}
    shared, eq2, eq6 = row("g-evidence", "reproduced", "shared"), row("g-evidence", "reproduced", "eq2"), \
        row("g-evidence", "inconclusive", "eq6")
    cla_k, cla_most = row("f5-evidence", "contradicted", "cla-k", a="cla"), row("f5-evidence", "contradicted",
                                                                                 "cla-most", a="cla")
    ids = {"shared": "resformer", "eq2": "cross", "eq6": "identity", "cla-k": "cla", "cla-most": "cla"}
    rows = [replace(v, runs=("val_loss", "lower", None, None, None, None, None, (ids[v.claim.claim],), ("b",)),
                    p_two_sided=p) for v, p in zip((shared, eq2, eq6, cla_k, cla_most),
                                                                  (1e-4, 1e-3, 0.4, 2e-3, 3e-3), strict=True)]
    claims = {c.id: c for c in pc.paper_claims(rows, registry)}
    assert [(e.row.claim.claim, e.counted, e.status) for e in claims["f10"].evidence] == [
        ("shared", False, "see t5"), ("eq2", True, ""), ("eq6", True, "")]
    assert claims["f10"].verdict == "inconclusive" and "because g-evidence: 'eq6' is inconclusive" in claims["f10"].reason
    counts = pc.claim_counts(list(claims.values()))["paper"]
    assert (counts["reproduced"], counts["contradicted"], counts["comparisons"]) == (1, 2, 5)
    assert counts["independent"] == {"reproduced": 1, "contradicted": 1}  # the two Fig. 5 claims: one set of CLA runs
    counted = [e for c in claims.values() for e in c.evidence if e.counted]
    assert [e.q_by for e in counted] == pytest.approx(list(benjamini_yekutieli([1e-4, 1e-3, 0.4, 2e-3, 3e-3])))
    assert (counts["decisive"], counts["survive_q"]) == (4, 4)
    assert "1 and the contradicted on 1 independent sets of runs; 4 of 4 decisive" in pc.counts_line(
        pc.claim_counts(list(claims.values())), "paper")


def test_contradicted_needs_what_reproduced_needs_and_fragile_is_labelled():
    claim = Claim("a is lower", "a", "b", "val_loss", "lower")
    seeds = range(5)
    lower = judge(claim, {s: 1.0 - 0.1 - 0.01 * s for s in seeds}, {s: 1.0 - 0.005 * s for s in seeds}, [], "g",
                  design="unpaired")
    higher = judge(claim, {s: 1.0 + 0.1 + 0.01 * s for s in seeds}, {s: 1.0 + 0.005 * s for s in seeds}, [], "g",
                   design="unpaired")
    assert (lower.verdict, higher.verdict) == ("reproduced", "contradicted")
    assert lower.p_two_sided == pytest.approx(higher.p_two_sided)  # the same two-sided test either way
    assert fragile("reproduced", ALPHA * 0.6) and fragile("contradicted", ALPHA / 2)
    assert not fragile("reproduced", ALPHA / 2 - 1e-9) and not fragile("inconclusive", ALPHA * 0.6)
    shown = Verdict("g", claim, "reproduced", -0.1, -0.2, -0.01, 5, p_holm=0.03)
    assert verdict_text(shown) == "**reproduced** (fragile)"
    header, rows = table([shown])
    assert "p (two-sided)" in header and "p Holm" in header and "p (one-sided)" not in header
    assert rows[0][header.index("verdict")] == "**reproduced** (fragile)"


def test_a_margin_claim_is_judged_against_its_bound_by_the_same_interval():
    claim = Claim("no gain", "q", "v", "val_loss", "higher", margin=0.05)
    seeds = range(5)
    # a − b ≈ -0.01 ± small: no gain beyond 0.05 -> reproduced; a − b ≈ -0.2: a gain beyond the margin -> contradicted
    small = judge(claim, {s: 1.0 - 0.01 + 0.002 * s for s in seeds}, {s: 1.0 for s in seeds}, [], "g", design="paired")
    big = judge(claim, {s: 1.0 - 0.2 + 0.002 * s for s in seeds}, {s: 1.0 for s in seeds}, [], "g", design="paired")
    assert small.verdict == "reproduced" and small.low > -0.05 and small.delta == pytest.approx(-0.006)
    assert big.verdict == "contradicted" and big.high < -0.05
    assert "bound -0.0500" in small.note


def test_every_claim_of_the_paper_quotes_its_words_with_their_location_and_says_where_it_reads_beyond_them():
    """Each claim of the paper in configs/claims.yaml: its quote is the paper's words in “…”, each with its location;
    its basis says whether the text states it (verbatim), only a caption does, or it is a reading of a figure; and
    beyond verbatim a reading says how. Whether the words are verbatim is checked against the paper's text while
    writing them (../shared/paper/verify_quotes.py): the project does not ship the paper."""
    claims = claim_registry.load_registry()["claims"]
    paper = [c for c in claims if not c.get("beyond_paper")]
    assert paper and all(c["basis"] in claim_registry.BASES and not claim_registry.quote_problem(c["quote"]) for c in paper)
    assert all(c.get("reading") for c in paper if c["basis"] != "verbatim")
    assert not any("basis" in c for c in claims if c.get("beyond_paper"))
    # no sentence of the paper says that sharing both keys and values (CLA) hurts, or ranks it: out of its tally
    by_id = {c["id"]: c for c in claims}
    assert by_id["fig5-cla-most"].get("beyond_paper") and by_id["fig5-cla-hurts"].get("beyond_paper")
    assert by_id["fig5-sharing-k-hurts"]["comparisons"] == ["sharing keys every two layers hurts"]
    assert not by_id["fig5-v-less-than-k"].get("beyond_paper")


@pytest.mark.parametrize(("quote", "problem"), [
    ("“sharing values has less negative impact compared with sharing keys” (review l. 287–288)", ""),
    ("“Left: Model with nearly 1/2 KV cache.” (v5 caption of its Fig. 10 = review Fig. 13)", ""),
    ("“a” (review l. 1); “b” (review, Table 5)", ""),
    ("Fig. 5: sharing both (CLA) hurts most", "needs the paper's words"),  # a summary, not the text
    ("“sharing values has less negative impact compared with sharing keys”", "1 quoted span(s) without a location"),
    ("“a” (review l. 1); “b”", "1 quoted span(s) without a location"),
    ("“a” (PAPER_FACTS l. 67)", "1 quoted span(s) without a location"),
    (None, "needs the paper's words"),
])
def test_a_quote_is_the_papers_words_each_with_its_location(quote, problem):
    assert claim_registry.quote_problem(quote).startswith(problem) and bool(claim_registry.quote_problem(quote)) == bool(problem)


@pytest.mark.parametrize(("change", "message"), [
    ({"quote": "Fig. 5: sharing values hurts less"}, "quote needs the paper's words"),
    ({"basis": None}, "basis must be one of verbatim, caption, reading, got None"),
    ({"basis": "summary"}, "basis must be one of verbatim, caption, reading, got 'summary'"),
    ({"basis": "reading"}, "basis reading needs a reading"),
    ({"beyond_paper": True, "basis": "verbatim"}, "basis is for claims of the paper"),
])
def test_a_registry_claim_without_its_quote_basis_or_reading_is_refused_in_one_line(tmp_path, change, message):
    claim = {"id": "c", "statement": "s", "where": "Fig. 5", "comparisons": ["x"], "basis": "verbatim",
             "quote": "“sharing values has less negative impact compared with sharing keys” (review l. 287–288)"}
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"claims": [claim]}, allow_unicode=True))
    assert claim_registry.load_registry(path)["claims"] == [claim]
    path.write_text(yaml.safe_dump({"claims": [{**claim, **change}]}, allow_unicode=True))
    with pytest.raises(ValueError, match=re.escape(f"claim 'c': {message}")):
        claim_registry.load_registry(path)


def test_every_comparison_a_grid_file_quotes_from_the_paper_quotes_its_words_with_their_location():
    """A grid file's `quote:` on a comparison of the paper (not `beyond_paper`) is the paper's words with their
    location, as in configs/claims.yaml: no file's quote is a summary or unlocated."""
    unlocated = set()
    for path in sorted((REPO / "configs").rglob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        comparisons = raw.get("claims") if isinstance(raw, dict) and path.name != "claims.yaml" else None
        for c in comparisons if isinstance(comparisons, list) else []:
            if "quote" in c and not c.get("beyond_paper") and claim_registry.quote_problem(c["quote"]):
                unlocated.add(path.relative_to(REPO).as_posix())
    assert unlocated == set()


@pytest.fixture(scope="module")
def committed():
    """The scoreboard of docs/results and every grid's own verdicts (what its report renders), each grid judged once."""
    judged = Judgements(grid_index(grid_dirs([RESULTS])))
    rows = scoreboard([RESULTS], judged)
    return rows, {name: judged.shown(name) for name in judged.index}


@pytest.mark.integration  # the scoreboard over docs/results (about 40 s)
def test_every_committed_comparison_has_one_verdict_in_its_grid_report_and_on_the_scoreboard(committed):
    rows, per_grid = committed
    assert rows
    for v in rows:
        assert not v.disagree, (v.claim.claim, v.disagree)
        holm_ps = []
        for grid in v.grids:
            same = [w for w in per_grid[grid] if w.runs == v.runs and w.claim.metric == v.claim.metric
                    and (v.runs is not None or w.claim.claim == v.claim.claim)]  # no run identity: by its words
            assert same, (grid, v.claim.claim)
            for w in same:  # what the grid's report renders (claims_table of evaluate_grid) is this verdict
                assert w.verdict == v.verdict, (grid, v.claim.claim)
                holm_ps += [w.p_holm] if w.p_holm is not None else []
        # one comparison, one Holm p: every grid that shows it shows its owner's (lit_resformer.verdicts.judgements.Judgements)
        assert len(set(holm_ps)) <= 1 and v.p_holm == (holm_ps[0] if holm_ps else None), v.claim.claim


@pytest.mark.integration  # the scoreboard over docs/results (about 40 s)
def test_every_committed_comparison_is_evidence_for_a_registered_claim(committed):
    rows, _ = committed
    claims = pc.paper_claims(rows)
    assert [c.id for c in claims if c.id.startswith("unassigned")] == []
    by_id = {c.id: c for c in claims}
    # the mechanism rows are not tested: vanilla shows no sink, drain or peak at this scale (Fig. 2's thresholds)
    for cid, words in (("fig2-sink", "no sink"), ("fig2-drain", "no value-state drain"),
                       ("fig2-peak", "no hidden-state peak")):
        assert by_id[cid].verdict == "not tested"
        assert all(words in e.row.note for e in by_id[cid].evidence if e.counted and e.row.grid.endswith("evidence"))


@pytest.mark.integration  # the scoreboard over docs/results (about 40 s)
def test_the_value_residuals_gain_shrinks_with_ten_times_the_tokens_and_no_sink_appears(committed):
    """The transfer tier's first finding as committed: ResFormer - vanilla is -0.146 at 2M tokens (counted) and
    -0.016 at 20.5M (transfer-tokens-x10-fig7-table5), a change whose interval leaves out zero; vanilla still shows
    no first-token sink there, so Fig. 2's claim stays not tested in that regime too."""
    from lit_resformer.board.transfer import transfer_rows

    rows, _ = committed
    table = {r.claim.id: r for r in transfer_rows(pc.paper_claims(rows))[1]}
    tokens_x10 = "AdamW, 20.5M tokens, tiny, pinned"
    (table5,) = [v for v in table["table5-lower-loss"].by_regime[tokens_x10] if v.grid.startswith("transfer-tokens")]
    change = table["table5-lower-loss"].change(table5)
    assert change.reference.delta == pytest.approx(-0.146, abs=5e-4) and table5.delta == pytest.approx(-0.016, abs=5e-4)
    assert change.direction == "shrinks" and change.test.low > 0.05
    (sink,) = table["fig2-sink"].by_regime[tokens_x10]
    assert sink.verdict == "not tested" and "no sink" in sink.note


@pytest.mark.integration  # the scoreboard over docs/results (about 40 s)
def test_no_comparison_declared_after_its_data_decides_a_claim(committed):
    """Every counted comparison was declared before its grid's first data (docs/declarations.json, which
    tests/board/test_declared.py holds to git history), or is judged under the form it had then; fig9-only-values,
    whose 0.0272 margin came after its data (997438d), is judged as declared before it until it is confirmed."""
    exploratory = pc.exploratory_comparisons()
    claims = pc.paper_claims(committed[0])
    for c in claims:
        for e in c.evidence:
            late = [(g, t) for g in e.row.grids for t in map(pc.base_text, e.row.texts) if (g, t) in exploratory]
            assert not (e.counted and late) or "judged as declared before it" in e.status, (c.id, late)
    (fig9,) = [c for c in claims if c.id == "fig9-only-values"]
    assert fig9.verdict == "inconclusive"
    assert all(e.status.startswith("exploratory") for e in fig9.evidence if e.row.grid == "fig9-evidence")
    assert not any(e.counted for e in fig9.evidence if e.row.grid == "fig9-repro")  # superseded by the evidence tier


@pytest.mark.integration  # the scoreboard over docs/results (about 40 s)
def test_every_committed_inconclusive_row_says_what_it_rules_out_or_why_it_cannot(committed):
    """Every inconclusive row on the board is bounded, underpowered or unresolved against an effect of interest,
    or has no MDE to read one against (no estimate, one seed, a saving's non-t interval): none is left at "no effect
    size declared"; and every smallest effect a claim declares classifies at least one row in its metric."""
    claims = pc.paper_claims(committed[0])
    rows = [(c.id, e.row) for c in claims for e in c.evidence]
    undeclared = [(cid, v.grid, v.claim.metric) for cid, v in rows if v.verdict == "inconclusive"
                  and v.power.get("classification") is None and v.power.get("mde") is not None]
    assert undeclared == []
    for entry in claim_registry.load_registry()["claims"]:
        if declared_size := entry.get("smallest_effect"):
            assert any(cid == entry["id"] and v.claim.metric == declared_size["metric"]
                       and v.power.get("effect") == declared_size["value"] for cid, v in rows), entry["id"]


@pytest.mark.integration  # the scoreboard over docs/results (about 40 s)
def test_no_decisive_counted_comparison_rests_on_a_run_without_provenance(committed):
    """The runs that recorded no provenance block (docs/rederivation/pending.md) are behind counted comparisons
    only where those decide nothing (not tested or inconclusive, each saying "provenance unknown"): a reproduced or
    contradicted claim stands on runs that say what they ran on, so none of them needs re-deriving first."""
    claims = pc.paper_claims(committed[0])
    shown = [e.row for c in claims for e in c.evidence if "provenance unknown" in e.row.note]
    assert bool(shown) == bool(runs_without_provenance(RESULTS))  # the phrase read here is the one the rows carry
    assert [(c.id, e.row.grid, e.row.verdict) for c in claims for e in c.evidence if e.counted
            and e.row.verdict in ("reproduced", "contradicted") and "provenance unknown" in e.row.note] == []


def test_a_comparison_declared_after_its_data_counts_only_as_its_earlier_form(tmp_path):
    """Exploratory (changed after its data): shown, not counted; a margin added after the data is judged under the
    form before it where the interval decides that form (inconclusive: the interval holds its bound)."""
    registry = {"claims": [{"id": "c", "statement": "s", "where": "Fig. 1", "comparisons": ["x", "y", "z"]}],
                "preconditions": {}}
    fields = dict.fromkeys(declared.DECIDING)
    margin = {**fields, "a": "a", "b": "b", "metric": "val_loss", "direction": "lower", "margin": 0.3}

    def late(text: str, earlier: dict | None) -> dict:
        return {"kind": "comparison", "grid": "fig1-evidence", "claim": text, "status": "exploratory",
                "change": "margin: None -> 0.3", "fields": margin, "earlier": earlier,
                "first_data": {"commit": "1" * 40, "date": "2026-01-02T00:00:00+00:00"},
                "declared": {"commit": "2" * 40, "date": "2026-01-03T00:00:00+00:00"}}

    holds_zero = replace(row("fig1-evidence", "reproduced", "x"), low=-0.2, high=0.05)  # reproduced by the margin only
    clear = replace(row("fig1-evidence", "reproduced", "y"))  # [-0.2, -0.05]: the earlier form is not read here
    new = row("fig1-evidence", "reproduced", "z")
    before = {**margin, "margin": None}
    exploratory = {("fig1-evidence", "x"): late("x", before), ("fig1-evidence", "y"): late("y", before),
                   ("fig1-evidence", "z"): late("z", None)}
    (claim,) = pc.paper_claims([holds_zero, clear, new], registry, exploratory)
    counted = {e.row.claim.claim: (e.counted, e.row.verdict) for e in claim.evidence}
    assert counted == {"x": (True, "inconclusive"), "y": (False, "reproduced"), "z": (False, "reproduced")}
    assert claim.verdict == "inconclusive"
    assert all(e.status.startswith("exploratory: its grid's first data 2026-01-02, its present form declared "
                                   "2026-01-03 (2222222; margin: None -> 0.3)") for e in claim.evidence)
    # a metric changed after the data is never read through the interval
    exploratory[("fig1-evidence", "x")] = {**late("x", {**before, "metric": "train_loss"})}
    (claim,) = pc.paper_claims([holds_zero], registry, exploratory)
    assert [e.counted for e in claim.evidence] == [False] and claim.verdict == "not tested"
    # confirmed by a grid whose runs came after the change: counted there, not here (not even in its earlier form)
    exploratory[("fig1-evidence", "x")] = {**late("x", before), "status": "confirmed", "confirmed_by": {
        "grid": "fig1-confirm-evidence", "commit": "3" * 40, "date": "2026-01-05T00:00:00+00:00"}}
    (claim,) = pc.paper_claims([holds_zero, row("fig1-confirm-evidence", "reproduced", "x")], registry, exploratory)
    assert [(e.row.grid, e.counted) for e in claim.evidence] == [("fig1-evidence", False),
                                                                ("fig1-confirm-evidence", True)]
    assert "confirmed by fig1-confirm-evidence" in claim.evidence[0].status and claim.verdict == "reproduced"
    # without the record's entries, the same rows count as they are
    (claim,) = pc.paper_claims([holds_zero, clear, new], registry, {})
    assert claim.verdict == "reproduced"


def test_the_tally_beside_holm_keeps_a_decisive_comparison_only_where_its_board_wide_by_q_holds():
    """The BY-robust tally reads a decisive comparison whose board-wide q is not below ALPHA as inconclusive; the
    independent measurements count runs shared between comparisons (a baseline included) once."""
    registry = {"claims": [{"id": "strong", "statement": "s", "where": "Fig. 1", "comparisons": ["x"]},
                           {"id": "weak", "statement": "t", "where": "Fig. 2", "comparisons": ["y", "z"]}],
                "preconditions": {}}
    head = ("val_loss", "lower", None, None, None, None, None)
    vanilla, a, b = (("v0", "v1"),), (("a0", "a1"),), (("b0", "b1"),)

    def decided(text: str, p: float, runs: tuple) -> Verdict:
        return replace(row("fig1-evidence", "reproduced", text), p_two_sided=p, runs=runs)

    rows = [decided("x", 1e-6, (*head, *a, *vanilla)), decided("y", 0.04, (*head, *b, *vanilla)),
            decided("z", 0.5, (*head, ("c0",), ("d0",)))]
    rows[2] = replace(rows[2], verdict="inconclusive")
    claims = pc.paper_claims(rows, registry, {})
    counts = pc.claim_counts(claims)["paper"]
    assert [c.verdict for c in claims] == ["reproduced", "inconclusive"]
    q = {e.row.claim.claim: e.q_by for c in claims for e in c.evidence}
    assert q["x"] < pc.ALPHA <= q["y"]
    assert [pc.by_robust(c) for c in claims] == ["reproduced", "inconclusive"]
    assert counts["by_robust"] == {"reproduced": 1, "contradicted": 0, "mixed": 0, "inconclusive": 1, "not tested": 0}
    assert counts["independent_measurements"] == 2  # x and y share vanilla's runs; z shares none
    assert "BY-robust tally (a decisive comparison counted only at q < 0.05): 1 reproduced" in pc.counts_line(
        pc.claim_counts(claims), "paper")
    claims = pc.paper_claims([replace(rows[0], verdict="reproduced", p_two_sided=1e-6), rows[2]], {
        "claims": [{"id": "x", "statement": "s", "where": "Fig. 1", "comparisons": ["x", "z"]}], "preconditions": {}},
        {})
    assert pc.by_robust(claims[0]) == "inconclusive"  # one reproduced, one inconclusive: the rule's own answer


def test_a_declared_smallest_effect_classifies_an_inconclusive_row_and_decides_nothing(tmp_path):
    """A claim with no effect of its own: its inconclusive row is bounded (interval inside ± the registry's declared
    smallest effect) or underpowered (MDE above it, with the seeds to reach it), labelled with its basis; a
    decisive row and a row with its own effect keep theirs."""
    registry = {"claims": [{"id": "c", "statement": "s", "where": "Fig. 1", "comparisons": ["x", "y", "z", "w"]}],
                "preconditions": {}, "smallest_effect": {"nats": 0.03, "basis": "Table 5's gain"}}
    level = {"level": 0.05 / 3, "effect": None}

    def inconclusive(text: str, low: float, high: float) -> Verdict:
        return replace(row("fig1-evidence", "inconclusive", text), delta=(low + high) / 2, low=low, high=high,
                       design="paired", df=4.0, power=level)

    narrow, wide = inconclusive("x", -0.004, 0.004), inconclusive("y", -0.08, 0.06)
    own = replace(inconclusive("z", -0.08, 0.06), power={**level, "effect": 0.5, "classification": "unresolved"})
    decisive = replace(row("fig1-evidence", "reproduced", "w"), design="paired", df=4.0, power=level)
    (claim,) = pc.paper_claims([narrow, wide, own, decisive], registry, {})
    shown = {e.row.claim.claim: e.row for e in claim.evidence}
    assert shown["x"].power["classification"] == "bounded" and shown["x"].power["effect"] == 0.03
    assert shown["y"].power["classification"] == "underpowered" and shown["y"].power["seeds_needed"] > 5
    assert "Table 5's gain" in shown["y"].power["effect_basis"]
    assert verdict_text(shown["y"]).startswith("**inconclusive** (underpowered: ")
    assert shown["z"].power == own.power and shown["w"].power == level
    assert [v.verdict for v in shown.values()] == ["inconclusive", "inconclusive", "inconclusive", "reproduced"]
    assert claim_registry.load_registry()["smallest_effect"]["nats"] > 0  # the committed one reads
    broken = tmp_path / "claims.yaml"
    broken.write_text(yaml.safe_dump({"claims": [], "smallest_effect": {"nats": -0.03, "basis": "b"}}))
    with pytest.raises(ValueError, match="smallest_effect must be {nats: <a positive number>, basis"):
        claim_registry.load_registry(broken)


def test_a_claim_declares_its_own_smallest_effect_in_its_metric_and_classifies_only_rows_in_it(tmp_path):
    """A claim in another unit than nats (an analysis measure, a slope) declares its own smallest effect with its
    metric: its rows in that metric are classified against it, its loss rows against the registry's nats, a row in a
    third metric stays unclassified; an exploratory row judged in its earlier form drops the present form's margin
    and is classified against the declared size; a malformed declaration is refused, naming the claim."""
    declared = {"metric": "analysis/entropy", "value": 0.2, "basis": "the evidence tier's MDE"}
    registry = {"claims": [{"id": "c", "statement": "s", "where": "Fig. 1", "comparisons": ["e", "l", "o"],
                            "smallest_effect": declared}],
                "preconditions": {}, "smallest_effect": {"nats": 0.03, "basis": "Table 5's gain"}}

    def inconclusive(text: str, metric: str) -> Verdict:
        v = replace(row("fig1-evidence", "inconclusive", text), delta=0.0, low=-0.05, high=0.05, design="paired",
                    df=4.0, power={"level": 0.05, "effect": None})
        return replace(v, claim=replace(v.claim, metric=metric))

    (claim,) = pc.paper_claims([inconclusive("e", "analysis/entropy"), inconclusive("l", "val_loss"),
                                inconclusive("o", "analysis/sink")], registry, {})
    shown = {e.row.claim.claim: e.row.power for e in claim.evidence}
    assert (shown["e"]["effect"], shown["e"]["classification"]) == (0.2, "bounded")  # ±0.05 inside ±0.2
    assert "the evidence tier's MDE" in shown["e"]["effect_basis"]
    assert (shown["l"]["effect"], shown["l"]["classification"]) == (0.03, "underpowered")  # MDE above 0.03
    assert shown["o"] == {"level": 0.05, "effect": None}

    # the earlier form of a comparison whose 0.5 margin came after its data: classified against 0.03, not 0.5
    late = replace(inconclusive("l", "val_loss"), verdict="reproduced", claim=Claim("l", "a", "b", "val_loss",
                                                                                    "higher", margin=0.5),
                   power={"level": 0.05, "effect": 0.5, "classification": None, "tost_p": 1e-9})
    record = {"grid": "fig1-evidence", "claim": "l", "status": "exploratory", "change": "margin: None -> 0.5",
              "first_data": {"date": "2026-11-26T00:00:00", "commit": "a" * 40},
              "declared": {"date": "2026-11-27T00:00:00", "commit": "b" * 40},
              "earlier": {"direction": "higher", "margin": None}, "fields": {"direction": "higher", "margin": 0.5}}
    (claim,) = pc.paper_claims([late], {**registry, "claims": [{**registry["claims"][0], "comparisons": ["l"]}]},
                               {("fig1-evidence", "l"): record})
    (evidence,) = claim.evidence
    assert evidence.row.verdict == "inconclusive" and "judged as declared before it" in evidence.status
    assert (evidence.row.power["effect"], evidence.row.power["classification"]) == (0.03, "underpowered")

    for broken in ({"metric": "analysis/entropy", "value": 0.2}, {**declared, "value": -1.0},
                   {**declared, "metric": ""}, {**declared, "nats": 0.2}):
        path = tmp_path / "claims.yaml"
        path.write_text(yaml.safe_dump({"claims": [{**registry["claims"][0], "quote": "“q” (review l. 1)",
                                                    "basis": "verbatim", "smallest_effect": broken}]}))
        with pytest.raises(ValueError, match=r"claim 'c': smallest_effect must be \{value: .*metric: .*basis: "):
            claim_registry.load_registry(path)


@pytest.mark.integration
def test_a_comparison_resting_on_an_unrecorded_dirty_run_says_so_and_the_run_is_listed_to_rederive(committed):
    """A run trained from a dirty tree that kept no patch is in docs/rederivation/pending.json (that list is what
    docs/results holds, never stale), none of them trained on this kind of machine (those were re-derived), and every
    comparison of such a run says so in its row."""
    pending = json.loads((REPO / "docs/rederivation/pending.json").read_text())
    assert pending == unrecorded_dirty_runs(RESULTS)
    # and every run without a provenance block, by grid, in pending.md; its comparisons say "provenance unknown"
    listed = (REPO / "docs/rederivation/pending.md").read_text().split("## Provenance unknown: ", 1)[1]
    unknown = runs_without_provenance(RESULTS)
    assert unknown and listed.startswith(f"{len(unknown)} committed runs")
    for run in unknown:
        grid, rest = run["run"].split("/", 1)
        assert re.search(rf"\*\*{re.escape(grid)}\*\*: \d+ runs: .*\b{re.escape(rest)}\b", listed), run
    assert all("CPU" not in str(r["device"]) for r in pending)
    rows, per_grid = committed
    for grid in {r["run"].split("/")[0] for r in pending}:
        assert any("uncommitted changes it did not record" in v.note for v in per_grid[grid]), grid


def test_the_counts_printed_in_the_documents_are_the_commands():
    recorded = json.loads(RECORD.read_text())["counts"]
    for doc in (REPO / "docs/SCOREBOARD.md", REPO / "docs/RESULTS.md"):
        text = doc.read_text()
        for which in ("paper", "beyond"):
            line = pc.counts_line(recorded, which)
            assert line in text, (doc.name, line)
        # no other count of claims is printed as current
        printed = set(re.findall(r"\*\*(\d+) claims of the paper", text))
        assert printed <= {str(recorded["paper"]["total"])}, (doc.name, printed)


@pytest.mark.integration  # the scoreboard over docs/results (about 40 s)
def test_the_recorded_counts_are_the_scoreboards(committed):
    rows, _ = committed
    counts = pc.claim_counts(pc.paper_claims(rows))
    assert counts == json.loads(RECORD.read_text())["counts"]
