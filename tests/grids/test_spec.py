"""Grid spec: expansion into runs, override merging, and refusal of malformed grids before any run."""

from pathlib import Path

import pytest
import yaml

from lit_resformer.grids import GridError, GridOptions, load_grid, run_grid
from lit_resformer.grids.spec import grid_description
from lit_resformer.runs.directory import GridDir

BASE = {
    "seed_everything": 0,
    "trainer": {"max_steps": 20, "val_check_interval": 10, "precision": "32-true"},
    "model": {"config": {"size": "tiny"}, "lr": 6.0e-4},
    "data": {"seq_len": 64, "micro_batch_size": 2},
}


def write_grid(tmp_path: Path, grid: dict, name: str = "grid.yaml") -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"base": "base.yaml", **grid}, sort_keys=False))
    return path


def test_cells_and_seeds_expand_to_runs_with_merged_overrides(tmp_path):
    path = write_grid(tmp_path, {
        "name": "g",
        "baseline": "vanilla",
        "seeds": [0, 3],
        "overrides": {"trainer.max_steps": 12},
        "cells": {
            "vanilla": {},
            "resformer": {"model.config.residual.target": "v"},
            # nested form means the same as dotted keys; it overrides the grid-level value
            "long": {"trainer": {"max_steps": 40}, "model.config.residual.target": "v"},
        },
    })
    grid = load_grid(path)
    runs = grid.runs()
    assert [r.name for r in runs] == [
        "g/vanilla/seed0", "g/vanilla/seed3", "g/resformer/seed0", "g/resformer/seed3", "g/long/seed0", "g/long/seed3",
    ]
    by_name = {r.name: r.config for r in runs}
    assert by_name["g/vanilla/seed3"]["seed_everything"] == 3
    assert by_name["g/vanilla/seed0"]["trainer"] == {"max_steps": 12, "val_check_interval": 10, "precision": "32-true"}
    resformer = by_name["g/resformer/seed0"]
    assert resformer["model"]["config"] == {"size": "tiny", "residual": {"target": "v"}}
    assert resformer["model"]["lr"] == pytest.approx(6e-4)
    assert by_name["g/long/seed0"]["trainer"]["max_steps"] == 40
    assert by_name["g/long/seed0"]["model"]["config"]["residual"] == {"target": "v"}
    assert grid.cells[1].baseline == "vanilla"


def test_matrix_alone_and_crossed_with_cells(tmp_path):
    path = write_grid(tmp_path, {
        "baseline": "target=none,lr=0.001",
        "matrix": {"model.config.residual.target": ["none", "v"], "model.lr": [1e-3, 3e-3]},
    })
    grid = load_grid(path, seeds=[5])
    assert grid.name == "grid"
    assert [c.name for c in grid.cells] == [
        "target=none,lr=0.001", "target=none,lr=0.003", "target=v,lr=0.001", "target=v,lr=0.003",
    ]
    assert [r.name for r in grid.runs()][-1] == "grid/target=v,lr=0.003/seed5"
    assert grid.configs["target=v,lr=0.003"]["model"]["lr"] == pytest.approx(3e-3)

    # cells x matrix: a `cells` baseline is compared at the same matrix point (Fig. 14 layout)
    path = write_grid(tmp_path, {
        "baseline": "vanilla",
        "cells": {"vanilla": {}, "svformer": {"model.config.share.svformer": True}},
        "matrix": {"data.seq_len": [32, 128]},
    }, name="fig14.yaml")
    grid = load_grid(path)
    cells = {c.name: c for c in grid.cells}
    assert list(cells) == ["vanilla,seq_len=32", "vanilla,seq_len=128", "svformer,seq_len=32", "svformer,seq_len=128"]
    assert cells["svformer,seq_len=128"].baseline == "vanilla,seq_len=128"
    assert cells["svformer,seq_len=128"].coords == {"data.seq_len": 128}
    assert grid.configs["svformer,seq_len=128"]["data"]["seq_len"] == 128
    assert grid.configs["svformer,seq_len=128"]["model"]["config"]["share"] == {"svformer": True}

    # a matrix value can carry overrides that move with it (constant tokens per step)
    path = write_grid(tmp_path, {
        "baseline": "seq_len=32",
        "matrix": {"data.seq_len": {32: {"data.micro_batch_size": 8}, 128: {"data": {"micro_batch_size": 2}}}},
    }, name="coupled.yaml")
    grid = load_grid(path)
    assert [c.name for c in grid.cells] == ["seq_len=32", "seq_len=128"]
    assert grid.cells[1].coords == {"data.seq_len": 128}
    assert grid.configs["seq_len=128"]["data"] == {"seq_len": 128, "micro_batch_size": 2}


MALFORMED = {
    "unknown model field": (
        {"baseline": "a", "cells": {"a": {}, "b": {"model.config.residual.tgt": "v"}}},
        ["cell 'b'", "model.config.residual.tgt", "ResidualConfig has no field 'tgt'"],
    ),
    "unknown trainer key": (
        {"baseline": "a", "cells": {"a": {}, "b": {"trainer.max_stepz": 3}}},
        ["cell 'b'", "trainer.max_stepz"],
    ),
    "unknown data key": (
        {"baseline": "a", "cells": {"a": {}, "b": {"data.seqlen": 3}}},
        ["unknown override key 'data.seqlen'"],
    ),
    "unknown section": (
        {"baseline": "a", "cells": {"a": {}, "b": {"optimizer.lr": 3}}},
        ["unknown override key 'optimizer.lr'"],
    ),
    "wrong type against the base": (
        {"baseline": "a", "cells": {"a": {}, "b": {"trainer.max_steps": "many"}}},
        ["trainer.max_steps", "expects a number", "'many'"],
    ),
    "wrong type against the dataclass": (
        {"baseline": "a", "cells": {"a": {}, "b": {"model.config.residual.lam": "big"}}},
        ["model.config.residual.lam", "'big'"],
    ),
    "value outside a Literal": (
        {"baseline": "a", "cells": {"a": {}, "b": {"model.config.residual.target": "w"}}},
        ["model.config.residual.target", "one of ['none', 'v', 'q', 'k']"],
    ),
    "combination the model rejects": (
        {"baseline": "a", "cells": {"a": {}, "b": {"model.config.residual.target": "v", "model.config.share.svformer": True}}},
        ["cell 'b'", "invalid model config", "residual.target='v'"],
    ),
    "empty matrix": ({"baseline": "a", "cells": {"a": {}}, "matrix": {}}, ["matrix is empty"]),
    "empty matrix values": ({"baseline": "x=1", "matrix": {"trainer.max_steps": []}}, ["matrix key 'trainer.max_steps'"]),
    "unknown key with a matrix value": (
        {"baseline": "seq_len=32", "matrix": {"data.seq_len": {32: {"data.micro_batch": 8}}}},
        ["cell 'seq_len=32'", "unknown override key 'data.micro_batch'"],
    ),
    "duplicate cell names": (
        {"baseline": "lr=0.1", "matrix": {"model.lr": [0.1, "0.1"]}},
        ["duplicate cell name 'lr=0.1'"],
    ),
    "missing baseline": ({"cells": {"a": {}}}, ["missing field 'baseline'"]),
    "unknown baseline": ({"baseline": "vanila", "cells": {"vanilla": {}}}, ["baseline 'vanila' is not a cell", "vanilla"]),
    "unknown top-level field": ({"baseline": "a", "cells": {"a": {}}, "sedes": [1]}, ["unknown field(s) ['sedes']"]),
    "no cells": ({"baseline": "a"}, ["needs 'cells' and/or 'matrix'"]),
    "bad seeds": ({"baseline": "a", "cells": {"a": {}}, "seeds": ["one"]}, ["seeds must be a non-empty list of integers"]),
    "unsafe cell name": ({"baseline": "a", "cells": {"a": {}, "b/c": {}}}, ["'b/c'", "names a directory"]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_grid_is_refused_before_any_run(tmp_path, case):
    grid, expected = MALFORMED[case]
    path = write_grid(tmp_path, grid)
    runs_dir = tmp_path / "runs"
    with pytest.raises(GridError) as error:
        run_grid(load_grid(path), GridOptions(runs_dir=runs_dir, train_command=["false"]), progress=False)
    for fragment in expected:
        assert fragment in str(error.value), (fragment, str(error.value))
    assert not runs_dir.exists()


def test_duplicate_yaml_cell_key_isrefused(tmp_path):
    # Plain YAML would silently keep the last of two equal keys; the grid loader refuses them.
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    path = tmp_path / "dup.yaml"
    path.write_text("base: base.yaml\nbaseline: a\ncells:\n  a: {}\n  a: {model.lr: 0.1}\n")
    with pytest.raises(GridError, match="duplicate key a"):
        load_grid(path)


def test_missing_base_is_named(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("base: nowhere.yaml\nbaseline: a\ncells: {a: {}}\n")
    with pytest.raises(GridError, match="base experiment 'nowhere.yaml' not found"):
        load_grid(path)


def test_base_without_a_size_preset_is_accepted(tmp_path):
    """vocab_size is linked from the tokenizer at run time, so a fully spelled-out model needs none."""
    import yaml

    from lit_resformer.grids.spec import load_grid

    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({
        "trainer": {"max_steps": 2},
        "model": {"config": {"n_layer": 2, "n_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64}},
        "data": {"seq_len": 16},
    }))
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({"base": "base.yaml", "baseline": "vanilla", "seeds": [0],
                                    "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}}))
    assert len(load_grid(grid).runs()) == 2


def test_a_tier_extends_a_figure_grid_without_copying_it(tmp_path):
    (tmp_path / "figs").mkdir()
    (tmp_path / "figs/base.yaml").write_text(yaml.safe_dump(BASE))
    figure = {"base": "base.yaml", "baseline": "vanilla", "seeds": [0], "description": "the figure",
              "overrides": {"trainer.max_steps": 5, "data.micro_batch_size": 2},
              "cells": {"vanilla": {}, "svformer": {"model.config.share.svformer": True}},
              "claims": [{"claim": "x", "a": "svformer", "b": "vanilla", "metric": "val_loss", "direction": "lower"}]}
    (tmp_path / "figs/fig.yaml").write_text(yaml.safe_dump(figure, sort_keys=False))
    (tmp_path / "tiers").mkdir()
    tier = {"name": "fig-long", "extends": "../figs/fig.yaml", "seeds": [0, 1], "overrides": {"trainer.max_steps": 50}}
    (tmp_path / "tiers/long.yaml").write_text(yaml.safe_dump(tier))
    grid = load_grid(tmp_path / "tiers/long.yaml")
    figure_grid = load_grid(tmp_path / "figs/fig.yaml")
    assert grid.name == "fig-long" and grid.seeds == [0, 1] and grid.description == "the figure"
    assert [c.name for c in grid.cells] == ["vanilla", "svformer"] and grid.claims == figure_grid.claims
    # the figure's base (relative to the figure's file) and its overrides, the tier's overrides winning
    for cell, config in grid.configs.items():
        assert config["trainer"]["max_steps"] == 50 and config["data"]["micro_batch_size"] == 2
        assert {**config, "trainer": {**config["trainer"], "max_steps": 5}} == figure_grid.configs[cell]

    (tmp_path / "tiers/nameless.yaml").write_text(yaml.safe_dump({"extends": "../figs/fig.yaml"}))
    with pytest.raises(GridError, match="needs its own name"):
        load_grid(tmp_path / "tiers/nameless.yaml")
    (tmp_path / "tiers/a.yaml").write_text(yaml.safe_dump({"name": "a", "extends": "b.yaml"}))
    (tmp_path / "tiers/b.yaml").write_text(yaml.safe_dump({"name": "b", "extends": "a.yaml"}))
    with pytest.raises(GridError, match="extends it back"):
        load_grid(tmp_path / "tiers/a.yaml")
    (tmp_path / "tiers/lost.yaml").write_text(yaml.safe_dump({"name": "c", "extends": "missing.yaml"}))
    with pytest.raises(GridError, match="not a file"):
        load_grid(tmp_path / "tiers/lost.yaml")


def test_a_tier_changes_cells_in_place_and_adds_claims(tmp_path):
    """A tier's cells merge into the figure's by name (null drops one); its claims add to the figure's."""
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    claim = {"claim": "x", "a": "svformer", "b": "vanilla", "metric": "val_loss", "direction": "lower"}
    figure = {"base": "base.yaml", "baseline": "vanilla", "claims": [claim],
              "cells": {"vanilla": {}, "gqa": {"model.config.n_kv_head": 1},
                        "svformer": {"model": {"config": {"share": {"svformer": True}}}},
                        "svformer+gqa": {"model.config.share.svformer": True, "model.config.n_kv_head": 1}}}
    (tmp_path / "fig.yaml").write_text(yaml.safe_dump(figure, sort_keys=False))
    own_claim = {**claim, "claim": "y", "a": "svformer+gqa"}
    tier = {"name": "t", "extends": "fig.yaml", "claims": [own_claim],
            "cells": {"gqa": None, "svformer+gqa": {"model.config.n_kv_head": 2}, "new": {"model.config.n_kv_head": 2}}}
    (tmp_path / "tier.yaml").write_text(yaml.safe_dump(tier, sort_keys=False))
    grid = load_grid(tmp_path / "tier.yaml")
    assert {c.name: c.overrides for c in grid.cells} == {
        "vanilla": {}, "svformer": {"model.config.share.svformer": True},
        "svformer+gqa": {"model.config.share.svformer": True, "model.config.n_kv_head": 2},
        "new": {"model.config.n_kv_head": 2}}
    assert [c.name for c in grid.cells] == ["vanilla", "svformer", "svformer+gqa", "new"]
    assert [c["claim"] for c in grid.claims] == ["x", "y"]
    # dropping a cell drops the inherited claims that name it (a slice of a grid keeps the claims it can judge)
    gqa_claim = {**claim, "claim": "z", "a": "gqa"}
    (tmp_path / "fig.yaml").write_text(yaml.safe_dump({**figure, "claims": [claim, gqa_claim]}, sort_keys=False))
    assert [c["claim"] for c in load_grid(tmp_path / "tier.yaml").claims] == ["x", "y"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"name": "b", "extends": "fig.yaml", "cells": ["vanilla"]}))
    with pytest.raises(GridError, match="bad.yaml: cells must be a mapping"):
        load_grid(tmp_path / "bad.yaml")


def test_a_loaded_grid_keeps_its_cells_resolved_and_resolves_none_again(tmp_path, monkeypatch):
    """load_grid resolves each cell once, while checking it; the runs, changes(), identity() and same_run() read
    that, and only a config from elsewhere is resolved again (once)."""
    grid = load_grid(write_grid(tmp_path, {
        "baseline": "vanilla", "seeds": [0, 1],
        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}},
    }))
    runs = grid.runs()
    for run in runs:
        assert run.resolved == grid.checker.resolved(run.config)

    calls = []
    resolved = type(grid.checker).resolved
    monkeypatch.setattr(type(grid.checker), "resolved", lambda self, config, checked=True: (
        calls.append(config), resolved(self, config, checked))[1])
    assert grid.identity(runs[0].config) != grid.identity(runs[2].config)
    assert grid.identity(runs[0].config) != grid.identity(runs[1].config)  # the seed is part of what a run is
    assert not grid.same_run(runs[0].config, runs[2].config, finished=True)
    assert grid.changes()["resformer"] == {"model.config.residual.target": ("none", "v")}
    assert calls == [grid.base]  # the base, which is no cell, once
    assert grid.changes() and calls == [grid.base]

    elsewhere = {**runs[0].config, "trainer": {**runs[0].config["trainer"], "accelerator": "cpu"}}
    assert grid.same_run(elsewhere, runs[0].config, finished=True)
    assert grid.same_run(elsewhere, runs[0].config, finished=True)
    assert calls == [grid.base, elsewhere]  # resolved once, then known


def test_a_grids_description_is_what_its_file_says_now_where_the_checkout_has_it(tmp_path):
    """Prose, part of no run: read from the grid file (through `extends`) where the results sit in the checkout that
    has it, so that an inherited sentence a tier outgrew is corrected once in the file; a copy outside keeps the
    manifest's."""
    manifest = {"grid_file": "configs/tier.yaml", "description": "five cells, as the manifest stored it"}
    checkout = tmp_path / "checkout"
    (checkout / "configs").mkdir(parents=True)
    (checkout / "configs/figure.yaml").write_text(yaml.safe_dump({"description": "the figure's question"}))
    (checkout / "configs/tier.yaml").write_text(yaml.safe_dump({"name": "tier", "extends": "figure.yaml"}))
    for folder in (checkout / "docs/results/tier", tmp_path / "copy/tier"):
        folder.mkdir(parents=True)
    assert grid_description(GridDir(checkout / "docs/results/tier"), manifest) == "the figure's question"
    assert grid_description(GridDir(tmp_path / "copy/tier"), manifest) == "five cells, as the manifest stored it"
