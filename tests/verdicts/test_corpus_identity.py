"""Every run records the content hash of the corpus it trained on, and no claim pairs runs of different corpora:
the comparison says why it is not tested. Runs that recorded no hash (the committed evidence, trained before runs
recorded one) pair as before."""

from __future__ import annotations

import json

from lit_resformer.reports import write_report
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.verdicts.judgements import evaluate_grid
from tests.helpers.claims_grids import VANILLA, claims_grid


def test_a_run_records_its_corpus_and_exports_it(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    assert run.corpus_hash() is None
    run.record_corpus("pinned", "e821b1e3" + "0" * 56)
    assert run.corpus_hash() == "e821b1e3" + "0" * 56
    assert json.loads(run.corpus_file.read_text())["source"] == "pinned"
    assert run.corpus_file in run.result_files()


def test_claims_never_pair_runs_of_different_corpora(tmp_path):
    grid_dir = claims_grid(tmp_path)
    verdicts = {v.claim.claim: v for v in evaluate_grid(grid_dir)}
    assert verdicts["better ends below vanilla"].verdict == "reproduced"  # no hash recorded: paired as before
    for seed in VANILLA:  # vanilla's runs now on one corpus, better's on another
        for cell, corpus_hash in (("vanilla", "a" * 64), ("better", "b" * 64), ("worse", "a" * 64)):
            path = grid_dir / cell / f"seed{seed}" / "summary.json"
            path.write_text(json.dumps({**json.loads(path.read_text()), "corpus_hash": corpus_hash}))
    verdicts = {v.claim.claim: v for v in evaluate_grid(grid_dir)}
    refused = verdicts["better ends below vanilla"]
    assert refused.verdict == "not tested"
    assert "different corpora (content hashes aaaaaaaaaaaa, bbbbbbbbbbbb)" in refused.note
    assert verdicts["worse ends above vanilla in training loss"].verdict != "not tested"  # one corpus: judged


def test_the_report_does_not_compare_cells_across_corpora(tmp_path):
    grid_dir = claims_grid(tmp_path)
    for seed in VANILLA:
        path = grid_dir / "better" / f"seed{seed}" / "summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "corpus_hash": "b" * 64}))
        path = grid_dir / "vanilla" / f"seed{seed}" / "summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "corpus_hash": "a" * 64}))
    write_report(grid_dir)
    final_losses = (grid_dir / "report.md").read_text().split("## Final losses")[1].split("\n## ")[0]
    better = next(line for line in final_losses.splitlines() if line.startswith("| better"))
    assert "not compared: runs trained on different corpora" in better
