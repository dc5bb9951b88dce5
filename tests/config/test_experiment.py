"""The experiment config: a grid cell is accepted exactly when `lit-resformer fit` accepts the same config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lit_resformer.cli import main
from lit_resformer.config.files import config_layers, load_experiment
from lit_resformer.config.messages import describe_type
from lit_resformer.grids import GridError, load_grid
from tests.helpers.config_cases import ACCEPTED, REFUSED, cell_config


def fit_accepts(tmp_path: Path, config: dict) -> bool:
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(config))
    try:
        main(["fit", "--config", str(path), "--trainer.default_root_dir", str(tmp_path / "run")])
    except SystemExit as refused:
        assert refused.code == 2
        return False
    return True


def grid_accepts(tmp_path: Path, overrides: dict) -> bool:
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"base": "base.yaml", "baseline": "cell", "cells": {"cell": overrides}}))
    try:
        load_grid(grid)
    except GridError:
        return False
    return True


@pytest.mark.integration
@pytest.mark.parametrize("case", [*REFUSED, *ACCEPTED])
def test_grid_and_fit_accept_the_same_configs(tmp_path, tiny_corpus, data_cache, case):
    overrides = REFUSED.get(case, ACCEPTED.get(case))
    config = cell_config(tmp_path, tiny_corpus, data_cache, overrides)
    by_grid = grid_accepts(tmp_path, overrides)
    by_fit = fit_accepts(tmp_path, config)
    assert by_grid == by_fit == (case in ACCEPTED), (by_grid, by_fit)


def test_grid_names_the_field_and_what_it_takes(tmp_path, tiny_corpus, data_cache):
    cell_config(tmp_path, tiny_corpus, data_cache, {})
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"base": "base.yaml", "baseline": "a", "cells": {"a": {"data.seqlen": 8}}}))
    with pytest.raises(GridError, match=r"unknown override key 'data.seqlen': LMDataModule has no field 'seqlen'; "
                                        r"did you mean \['seq_len'"):
        load_grid(grid)


def test_types_in_words():
    from typing import Literal

    assert describe_type(int | None) == "a number (integer) or null"
    assert describe_type(Literal["none", "v"]) == "one of ['none', 'v']"
    assert describe_type(float | Literal["uniform"]) == "a number or one of ['uniform']"
    assert describe_type(list[int]) == "a list" and describe_type(dict[str, float]) == "a mapping"


CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PIECES = [CONFIGS / "recipes/cpu.yaml", CONFIGS / "data/embedded.yaml", CONFIGS / "models/tiny.yaml"]


def printed_config(capsys, *args: str) -> dict:
    with pytest.raises(SystemExit) as done:
        main(["fit", *args, "--print_config"])
    assert done.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def test_an_experiment_is_its_pieces_in_order(capsys):
    experiment = CONFIGS / "experiments/cpu-demo-resformer.yaml"
    composed = printed_config(capsys, "--config", str(experiment))
    by_hand = printed_config(capsys, *(a for p in PIECES for a in ("--config", str(p))),
                             "--model.config.residual.target", "v")
    assert composed == by_hand
    assert (composed["trainer"]["max_steps"], composed["data"]["micro_batch_size"], composed["data"]["bpe_vocab_size"],
            composed["model"]["config"]["size"], composed["model"]["config"]["residual"]["target"]) == (
            400, 16, 4096, "tiny", "v")
    # the grid reads the same experiment the same way, whether as one file or as its list of pieces
    pieces_then_variant = load_experiment(*PIECES)
    pieces_then_variant["model"]["config"]["residual"] = {"target": "v"}
    assert load_experiment(experiment) == pieces_then_variant


def test_grid_base_may_be_a_list_of_configs(tmp_path, monkeypatch):
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({"base": [str(p) for p in PIECES], "baseline": "vanilla",
                                    "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}}))
    loaded = load_grid(grid)
    assert loaded.configs["resformer"] == load_experiment(CONFIGS / "experiments/cpu-demo-resformer.yaml")
    # the manifest names the pieces as typed from where the grid ran: relative under the working directory
    monkeypatch.chdir(CONFIGS)
    assert loaded.manifest()["base"] == "recipes/cpu.yaml + data/embedded.yaml + models/tiny.yaml"
    assert loaded.manifest()["grid_file"] == str(grid.resolve())
    monkeypatch.chdir(tmp_path)
    assert loaded.manifest()["base"] == " + ".join(str(p.resolve()) for p in PIECES)
    assert loaded.manifest()["grid_file"] == "g.yaml"


@pytest.mark.integration
def test_composition_mistakes_are_named(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text("compose: [b.yaml]\n")
    (tmp_path / "b.yaml").write_text("compose: [a.yaml]\n")
    (tmp_path / "c.yaml").write_text("compose: [missing.yaml]\n")
    with pytest.raises(ValueError, match="composes itself"):
        config_layers(tmp_path / "a.yaml")
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(tmp_path / "c.yaml")])
    assert "compose names 'missing.yaml'" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.parametrize("grid", sorted(p.name for p in (CONFIGS / "grids").glob("*.yaml")))
def test_every_shipped_grid_validates(grid):
    assert load_grid(CONFIGS / "grids" / grid).runs()
