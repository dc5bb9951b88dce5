"""Grid tiers are overlays: each figure's cells and claims are written once (configs/figures/ or the figure's only
grid), and its tiers (quick, CPU reproduction, paper-sized, GPU) extend it, changing budgets, sizes and seeds. A
tier's file is configs/grids/<tier>/<figure>.yaml, the quick tier's configs/grids/<figure>.yaml. The figures are
read from the files: configs/figures/ and each tier's folder.

tests/helpers/grid_expansions.json records what every grid file expanded to when the tiers still copied their
figure's cells: per grid, its seeds, each cell's overrides and a fingerprint of each run's resolved config. A grid
file that is meant to run differently updates it: `python tests/grids/test_grid_tiers.py` rewrites it from the files.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

# Each test reads the repository's grid files (a LightningCLI parser and every cell resolved, per grid).
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
GRIDS = REPO / "configs" / "grids"
FIGURES = REPO / "configs" / "figures"
EXPANSIONS = Path(__file__).resolve().parents[1] / "helpers" / "grid_expansions.json"
# scaling-size-small.yaml: a second CPU ladder of scaling-size, left beside it because its committed results
# (docs/results/scaling-size-small/grid.yaml) name that file
TIER_SUFFIXES = ("-small",)


def _flat(overrides: dict | None, prefix: str = "") -> dict:
    flat = {}
    for key, value in (overrides or {}).items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _chain(path: Path) -> list[Path]:
    """The file and every file it extends, nearest first."""
    chain = [path.resolve()]
    while (parent := yaml.safe_load(chain[-1].read_text()).get("extends")) is not None:
        chain.append((chain[-1].parent / parent).resolve())
    return chain


def _figure(path: Path) -> str:
    """Which figure a grid file is a tier of, from its name (fig5.yaml, paper/fig5.yaml, gpu/fig5.yaml: fig5)."""
    stem = path.stem
    for suffix in TIER_SUFFIXES:
        stem = stem.removesuffix(suffix)
    return stem


def _grid_files() -> list[Path]:
    return sorted(GRIDS.rglob("*.yaml"))


def test_each_figures_cells_and_claims_are_written_once():
    tiers: dict[str, list[Path]] = defaultdict(list)
    for path in _grid_files():
        tiers[_figure(path)].append(path)
    extended = {file for path in _grid_files() for file in _chain(path)}
    unrun = sorted(p.name for p in FIGURES.glob("*.yaml") if p.resolve() not in extended)
    assert not unrun, f"no tier runs configs/figures/{unrun}"
    for figure, paths in tiers.items():
        chains = {path: _chain(path) for path in paths}
        roots = {chain[-1] for chain in chains.values()}
        assert len(roots) == 1, f"the tiers of {figure} do not extend one figure: {sorted(map(str, roots))}"
        if len(paths) > 2:  # a figure with a paper-sized or GPU tier keeps its cells and claims in configs/figures/
            assert roots.pop().parent == FIGURES, figure
        written_cells: dict[tuple, Path] = {}
        written_claims: dict[str, Path] = {}
        for file in sorted({file for chain in chains.values() for file in chain}):
            spec = yaml.safe_load(file.read_text())
            for name, overrides in (spec.get("cells") or {}).items():
                if overrides is None:  # `~` removes an inherited cell: it writes none
                    continue
                key = (name, json.dumps(_flat(overrides), sort_keys=True))
                assert key not in written_cells, f"{file} repeats cell {name} of {written_cells[key]}"
                written_cells[key] = file
            for claim in spec.get("claims") or []:
                key = json.dumps(claim, sort_keys=True)
                assert key not in written_claims, f"{file} repeats claim {claim['claim']!r} of {written_claims[key]}"
                written_claims[key] = file


EMBEDDED_TRAIN_TOKENS = 2_805_000  # the embedded corpus's training split at seq_len 256 (4.1M tokens were 1.46 epochs)


def test_the_evidence_tier_trains_past_two_million_tokens_within_one_epoch_on_five_seeds(configs_resolved_unchecked):
    evidence = {path.stem: path for path in sorted((GRIDS / "evidence").glob("*.yaml"))}
    assert evidence
    from lit_resformer.grids.spec import load_grid

    for figure, path in evidence.items():
        grid = load_grid(path)
        assert grid.name == f"{figure}-evidence"
        long_run = figure == "fig14"  # the critical point: 20M tokens on the larger code corpus, three seeds
        assert len(grid.seeds) >= (3 if long_run else 5), path
        for cell, config in grid.configs.items():
            data, trainer = config["data"], config["trainer"]
            tokens = trainer["max_steps"] * data["micro_batch_size"] * data["seq_len"]
            assert tokens >= (20_000_000 if long_run else 2_000_000), (path, cell)
            if data["source"] == "embedded":
                assert tokens <= EMBEDDED_TRAIN_TOKENS, (path, cell)  # within one epoch
                assert data["val_sequences_per_domain"] is None, (path, cell)  # the whole validation split
            else:
                assert data["source"] == "local" and long_run, (path, cell)


PINNED_TRAIN_TOKENS = 44_517_274  # the pinned corpus's training split with its 4k BPE (the token cache's meta.json)


def _preset_params(size: str) -> int:
    """Vanilla's parameters at a preset (built on the meta device: nothing is allocated)."""
    import torch

    from lit_resformer.model import ModelConfig, Transformer

    with torch.device("meta"):
        return Transformer(ModelConfig.preset(size)).num_params()


def test_the_transfer_tiers_train_ten_times_the_tokens_or_a_ten_times_larger_model_within_one_epoch(
        configs_resolved_unchecked):
    """tokens-x10: the evidence tier's model at ~20M tokens a run; size-x10: ~10x its parameters at >= 2 tokens per
    parameter; both on the pinned corpus within one epoch, five seeds."""
    from lit_resformer.grids.spec import load_grid

    tiny = _preset_params("tiny")
    tiers = {"tokens-x10": sorted((GRIDS / "transfer" / "tokens-x10").glob("*.yaml")),
             "size-x10": sorted((GRIDS / "transfer" / "size-x10").glob("*.yaml"))}
    assert all(tiers.values())
    for tier, paths in tiers.items():
        for path in paths:
            grid = load_grid(path)
            assert len(grid.seeds) >= 5, path
            for cell, config in grid.configs.items():
                data, trainer = config["data"], config["trainer"]
                tokens = trainer["max_steps"] * data["micro_batch_size"] * data["seq_len"]
                assert data["source"] == "pinned" and tokens <= PINNED_TRAIN_TOKENS, (path, cell)
                params = _preset_params(config["model"]["config"]["size"])
                if tier == "tokens-x10":
                    assert params == tiny and tokens >= 20_000_000, (path, cell)
                else:
                    assert 8 * tiny <= params <= 12 * tiny and tokens >= 2 * params, (path, cell, params, tokens)


def _evidence_script_grids(cwd: Path) -> list[str]:
    """What `scripts/evidence.sh --list` says it would run from `cwd`, with no GRIDS of the caller's."""
    env = {key: value for key, value in os.environ.items() if key != "GRIDS"}
    listed = subprocess.run(["bash", str(REPO / "scripts" / "evidence.sh"), "--list"], cwd=cwd, env=env,
                            capture_output=True, text=True, check=True)
    return listed.stdout.split()


def test_the_evidence_script_runs_each_figure_of_the_tier_once_and_a_new_one_without_an_edit(tmp_path):
    """scripts/evidence.sh runs its order (the tier README's), then every figure of configs/grids/evidence/ the order
    does not name: its order names only the tier's files and grid files that exist, each once."""
    grids = _evidence_script_grids(REPO)
    figures = sorted(path.stem for path in (GRIDS / "evidence").glob("*.yaml"))
    assert sorted(name for name in grids if not name.endswith(".yaml")) == figures
    assert len(set(grids)) == len(grids) and all((REPO / name).is_file() for name in grids if name.endswith(".yaml"))
    folder = tmp_path / "configs" / "grids" / "evidence"
    folder.mkdir(parents=True)
    for figure in [*figures, "fig99"]:
        (folder / f"{figure}.yaml").touch()
    assert _evidence_script_grids(tmp_path) == [*grids, "fig99"]


def test_no_grid_cites_a_document_the_repository_lacks():
    for path in [*_grid_files(), *sorted(FIGURES.glob("*.yaml"))]:
        assert "PAPER_FACTS" not in path.read_text(), path


def _expansion(path: Path) -> dict:
    from lit_resformer.grids.spec import load_grid

    grid = load_grid(path)
    return {"seeds": grid.seeds, "cells": {cell.name: cell.overrides for cell in grid.cells},
            "runs": {run.name: hashlib.sha256(json.dumps(run.config, sort_keys=True).encode()).hexdigest()[:16]
                     for run in grid.runs()}}


def unchecked(checker, config: dict, *args) -> dict:
    """Stands in for ConfigChecker.check_cell: the cell's config as merged, not through `fit`'s parser."""
    return config


@pytest.fixture
def configs_resolved_unchecked(monkeypatch):
    """Expanding is what is compared; whether every config also passes `fit`'s checks is test_claims' business (a GPU
    tier names a corpus that only its machine has)."""
    from lit_resformer.training.config_checker import ConfigChecker

    monkeypatch.setattr(ConfigChecker, "check_cell", unchecked)


def test_every_grid_expands_to_the_recorded_runs(configs_resolved_unchecked):
    recorded = json.loads(EXPANSIONS.read_text())
    files = {str(path.relative_to(REPO)): path for path in _grid_files()}
    assert set(files) == set(recorded)
    for name, path in files.items():
        assert json.loads(json.dumps(_expansion(path))) == recorded[name], name


if __name__ == "__main__":
    from lit_resformer.training.config_checker import ConfigChecker

    ConfigChecker.check_cell = unchecked
    expansions = {str(path.relative_to(REPO)): _expansion(path) for path in _grid_files()}
    EXPANSIONS.write_text(json.dumps(expansions, indent=1, sort_keys=True) + "\n")
    sys.exit(0)
