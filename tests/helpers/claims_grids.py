"""Synthetic judged grids for the verdict and report tests: runs with known effects (better, worse, the same as
vanilla) over three seeds, and scoreboard rows."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from lit_resformer.grids.spec import load_grid
from lit_resformer.runs.claim_spec import Claim, metric_kind
from lit_resformer.runs.results import GridResults
from lit_resformer.verdicts.judges import JUDGING
from lit_resformer.verdicts.verdict import Verdict

BASE = {"seed_everything": 0, "trainer": {"max_steps": 100}, "model": {"config": {"size": "tiny"}}, "data": {"seq_len": 64}}
UNIGRAM = 7.0  # every synthetic run's unigram reference; losses below 6.0 are past the plateau
BIGRAM = 5.9  # and its bigram reference: every synthetic loss ends below it unless a test says otherwise


def grid_dir_from(tmp_path: Path, name: str, grid: dict) -> Path:
    """RUNS/<name>/grid.yaml as the runner writes it, from a grid file loaded (and validated) by load_grid."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": "base.yaml", **grid}, sort_keys=False))
    grid_dir = tmp_path / "runs" / name
    grid_dir.mkdir(parents=True)
    (grid_dir / "grid.yaml").write_text(yaml.safe_dump(load_grid(path).manifest(), sort_keys=False))
    return grid_dir


def write_summary(grid_dir: Path, cell: str, seed: int, val: float, status: str = "done", unigram: float | None = UNIGRAM,
                  corpus: str = "embedded", bigram: float | None = BIGRAM, **extra) -> Path:
    run = grid_dir / cell / f"seed{seed}"
    run.mkdir(parents=True)
    summary = {"cell": cell, "seed": seed, "status": status, "final_val_loss": val, "final_train_loss": val - 0.1,
               "final_val_loss_by_domain": {"code": val - 0.2, "wiki": val + 0.2}, "unigram_val_loss": unigram, "bigram_val_loss": bigram, **extra}
    (run / "summary.json").write_text(json.dumps(summary))
    # the resolved config: each seed trains on its own data order (data.seed null follows the seed), shared by a
    # seed's runs, so comparisons are paired; the cell's override and the corpus make runs distinct
    share = {"share": {"svformer": True}} if cell.startswith("svformer") else {}
    config = {**BASE, "seed_everything": seed,
              "model": {"config": {**BASE["model"]["config"], **share}, "lr": CELLS.get(cell, {}).get("model.lr")},
              "data": {**BASE["data"], "seed": None, "corpus": corpus}}
    (run / "experiment.yaml").write_text(yaml.safe_dump(config))
    return run


CELLS = {"vanilla": {}, "better": {"model.lr": 1e-3}, "worse": {"model.lr": 2e-3}, "same": {"model.lr": 3e-3}}
VANILLA = {0: 5.00, 1: 5.10, 2: 4.90}
EFFECT = {"better": [-0.30, -0.25, -0.35], "worse": [0.20, 0.30, 0.25], "same": [0.02, -0.03, 0.015]}


def claims_grid(tmp_path: Path, name: str = "g", corpus: str = "embedded", paper_claim: str | None = None) -> Path:
    """RUNS/<name> with its runs and comparisons; `paper_claim`: the id of configs/claims.yaml that "better ends below
    vanilla" is evidence for (else no claim of the registry lists it)."""
    claims = [{"claim": f"{cell} ends below vanilla", "a": cell, "b": "vanilla", "metric": "val_loss", "direction": "lower"}
              for cell in ("better", "worse", "same")]
    if paper_claim is not None:
        claims[0]["paper_claim"] = paper_claim
    claims.append({"claim": "better trains below vanilla on code", "a": "better", "b": "vanilla",
                   "metric": "val_loss/code", "direction": "lower"})
    claims.append({"claim": "worse ends above vanilla in training loss", "a": "worse", "b": "vanilla",
                   "metric": "train_loss", "direction": "higher"})
    grid_dir = grid_dir_from(tmp_path, name, {"baseline": "vanilla", "seeds": [0, 1, 2], "cells": CELLS, "claims": claims})
    for seed, base in VANILLA.items():
        write_summary(grid_dir, "vanilla", seed, base, corpus=corpus)
        for cell, effect in EFFECT.items():
            write_summary(grid_dir, cell, seed, base + effect[seed], corpus=corpus)
    return grid_dir


def row(grid: str, verdict: str, text: str = "x", a: str = "a", b: str = "b") -> Verdict:
    return Verdict(grid, Claim(text, a, b, "val_loss", "lower"), verdict, -0.1, -0.2, -0.05, 5, texts=(text,),
                   grids=(grid,), p_holm=0.01 if verdict in ("reproduced", "contradicted") else 0.5)


def judged_grid(tmp_path, name: str = "g", tokens: int = 4_000_000, corpus: str = "embedded",
                paper_claim: str | None = None):
    """claims_grid's decisive and null comparisons, its runs with the sizes a regime is read from (the
    scoreboard's headline regime needs them): `tokens` training tokens each. Two grids under one tmp_path, one named
    transfer-… with other tokens and another corpus (other runs), judge their `paper_claim` in two regimes."""
    grid_dir = claims_grid(tmp_path, name, corpus, paper_claim)
    for path in grid_dir.glob("*/seed*/summary.json"):
        path.write_text(json.dumps({**json.loads(path.read_text()), "params": 2_000_000, "tokens_seen": tokens}))
    return grid_dir


def judged(claim: Claim, results: GridResults) -> Verdict:
    """The claim's unadjusted verdict, judged as its grid's report judges it (judges.JUDGING)."""
    return JUDGING[metric_kind(claim.metric).key].judge(claim, results, None)
