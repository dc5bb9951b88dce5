"""Grid spec: load a grid YAML, validate it completely, expand it into runs.

A grid file names a base experiment (LightningCLI YAML), a baseline cell, seeds, and cells given
as dicts of dotted overrides and/or a `matrix` of values whose cartesian product makes the cells:

    name: fig7                                   # optional, defaults to the file's stem
    base: configs/experiments/cpu-base.yaml      # relative to the grid file, the cwd or the repo
    baseline: vanilla
    seeds: [0, 1, 2]
    overrides: {trainer.max_steps: 200}          # applied to every cell (cells may override them)
    cells:
      vanilla: {}
      resformer: {model.config.residual.target: v}
    matrix:                                      # optional; with `cells` the product cells x matrix
      data.seq_len: [64, 256]                    # or value -> overrides that go with it:
      # data.seq_len: {64: {data.micro_batch_size: 32}, 256: {data.micro_batch_size: 8}}
    report: {critical_point_window: 10}          # optional report settings; scaling: params | tokens
                                                 # marks a size or token-budget sweep (ablations.scaling)

Everything is checked before any run starts; a problem raises `GridError` naming it.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

REPO_ROOT = Path(__file__).resolve().parent.parent

GRID_FIELDS = {"name", "description", "base", "baseline", "seeds", "cells", "matrix", "overrides", "report"}
REPORT_FIELDS = {"critical_point_window", "scaling"}
SCALING_AXES = ("params", "tokens")  # sweeps over model size or over training tokens (ablations.scaling)
# Sections of a `lit-resformer fit` config, and its top-level scalar keys.
SECTIONS = ("trainer", "model", "data", "checkpoint")
TOP_LEVEL_KEYS = ("seed_everything", "global_batch_tokens")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=,+-]*$")


class GridError(ValueError):
    """A grid file that cannot be run; the message names the problem."""


@dataclass(frozen=True)
class Cell:
    name: str
    overrides: dict[str, Any]  # dotted key -> value: the cell's own overrides plus its matrix values
    baseline: str  # the cell this one is compared with in the report
    family: str | None = None  # the `cells` entry it came from (None for matrix-only grids)
    coords: dict[str, Any] = field(default_factory=dict)  # matrix key -> value


@dataclass(frozen=True)
class Run:
    grid: str
    cell: str
    seed: int
    config: dict  # the resolved experiment config, ready to be written as YAML

    @property
    def name(self) -> str:
        return f"{self.grid}/{self.cell}/seed{self.seed}"

    def relative_dir(self) -> Path:
        return Path(self.grid) / self.cell / f"seed{self.seed}"


@dataclass
class Grid:
    name: str
    path: Path
    base_path: Path
    baseline: str
    seeds: list[int]
    cells: list[Cell]
    overrides: dict[str, Any]
    description: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    configs: dict[str, dict] = field(default_factory=dict)  # cell name -> resolved config (no seed)

    def runs(self, seeds: Sequence[int] | None = None) -> list[Run]:
        """One run per (cell, seed), cells in grid order, seeds inner."""
        chosen = list(self.seeds if seeds is None else seeds)
        return [
            Run(self.name, cell.name, seed, {**self.configs[cell.name], "seed_everything": seed})
            for cell in self.cells
            for seed in chosen
        ]

    def manifest(self) -> dict:
        """What the report needs to know about the grid, written next to its runs."""
        return {
            "name": self.name,
            "description": self.description,
            "grid_file": str(self.path),
            "base": str(self.base_path),
            "baseline": self.baseline,
            "seeds": self.seeds,
            "overrides": self.overrides,
            "matrix_keys": sorted({k for c in self.cells for k in c.coords}),
            "report": self.report,
            "cells": [dataclasses.asdict(c) for c in self.cells],
        }


def load_grid(path: str | Path, seeds: Sequence[int] | None = None) -> Grid:
    """Read, validate and expand a grid file. `seeds` replaces the file's seeds (CLI `--seeds`)."""
    path = Path(path)
    if not path.is_file():
        raise GridError(f"grid file not found: {path}")
    try:
        spec = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (OmegaConfBaseException, yaml.YAMLError, ValueError) as e:  # syntax, duplicate keys, interpolation
        raise GridError(f"{path}: cannot read the grid: {e}") from e
    if not isinstance(spec, dict):
        raise GridError(f"{path}: a grid file must be a mapping with fields {sorted(GRID_FIELDS)}")
    where = str(path)

    unknown = sorted(set(spec) - GRID_FIELDS)
    if unknown:
        raise GridError(f"{where}: unknown field(s) {unknown}; allowed fields: {sorted(GRID_FIELDS)}")

    name = spec.get("name", path.stem)
    _check_name(name, f"{where}: name")
    if "base" not in spec:
        raise GridError(f"{where}: missing field 'base' (the experiment YAML every cell starts from)")
    base_path = _resolve_base(spec["base"], path)
    base = _load_base(base_path)

    seeds = list(seeds) if seeds is not None else spec.get("seeds", [0])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise GridError(f"{where}: seeds must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise GridError(f"{where}: duplicate seeds in {seeds}")

    report = spec.get("report") or {}
    if not isinstance(report, dict) or set(report) - REPORT_FIELDS:
        raise GridError(f"{where}: report accepts only {sorted(REPORT_FIELDS)}, got {report!r}")
    window = report.get("critical_point_window", 10)
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise GridError(f"{where}: report.critical_point_window must be a positive integer, got {window!r}")
    scaling = report.get("scaling")
    if scaling is not None and scaling not in SCALING_AXES:
        raise GridError(f"{where}: report.scaling={scaling!r} is not allowed; choose one of {list(SCALING_AXES)}")

    overrides = _flatten_overrides(spec.get("overrides") or {}, f"{where}: overrides")
    cells = _expand_cells(spec, where)
    baseline = spec.get("baseline")
    cells = _assign_baselines(cells, baseline, where)

    checker = _KeyChecker(base)
    for key, value in overrides.items():
        checker.check(key, value, f"{where}: overrides")
    configs = {}
    for cell in cells:
        for key, value in cell.overrides.items():
            checker.check(key, value, f"{where}: cell '{cell.name}'")
        configs[cell.name] = _resolve_config(base, {**overrides, **cell.overrides}, f"{where}: cell '{cell.name}'")
        _validate_model_config(configs[cell.name], f"{where}: cell '{cell.name}'")

    return Grid(
        name=name,
        path=path.resolve(),
        base_path=base_path,
        baseline=baseline,
        seeds=seeds,
        cells=cells,
        overrides=overrides,
        description=str(spec.get("description", "")),
        report={"critical_point_window": window, **({"scaling": scaling} if scaling else {})},
        configs=configs,
    )


# ----------------------------------------------------------------------------------------------
# cells


def _expand_cells(spec: dict, where: str) -> list[Cell]:
    cells_spec = spec.get("cells")
    matrix_spec = spec.get("matrix")
    if cells_spec is None and matrix_spec is None:
        raise GridError(f"{where}: a grid needs 'cells' and/or 'matrix'")

    families: list[tuple[str | None, dict]] = [(None, {})]
    if cells_spec is not None:
        if not isinstance(cells_spec, dict) or not cells_spec:
            raise GridError(f"{where}: cells must be a non-empty mapping of cell name -> overrides")
        families = []
        for cell_name, overrides in cells_spec.items():
            _check_name(cell_name, f"{where}: cell name")
            families.append((cell_name, _flatten_overrides(overrides or {}, f"{where}: cell '{cell_name}'")))

    points: list[tuple[dict[str, Any], dict[str, Any]]] = [({}, {})]
    if matrix_spec is not None:
        points = _matrix_points(matrix_spec, where)

    cells, seen = [], set()
    for (family, overrides), (coords, extras) in itertools.product(families, points):
        parts = ([family] if family else []) + ([_point_name(coords)] if coords else [])
        name = ",".join(parts)
        _check_name(name, f"{where}: cell name")
        if name in seen:
            raise GridError(f"{where}: duplicate cell name '{name}'")
        seen.add(name)
        cells.append(Cell(name=name, overrides={**overrides, **coords, **extras}, baseline="", family=family, coords=coords))
    return cells


def _matrix_points(matrix: Any, where: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(coordinates, extra overrides) of every point of the cartesian product. A matrix key takes a
    list of values, or a mapping value -> overrides that go with it (e.g. a sequence length and the
    micro-batch size that keeps the tokens per step constant)."""
    if not isinstance(matrix, dict) or not matrix:
        raise GridError(f"{where}: matrix is empty; give it dotted keys with non-empty lists of values")
    axes = []
    for key, values in matrix.items():
        if isinstance(values, dict) and values:
            axes.append([
                (key, value, _flatten_overrides(extra or {}, f"{where}: matrix {key}={value}"))
                for value, extra in values.items()
            ])
            continue
        if not isinstance(values, list) or not values:
            raise GridError(f"{where}: matrix key '{key}' has an empty or non-list value {values!r}")
        if len({repr(v) for v in values}) != len(values):
            raise GridError(f"{where}: matrix key '{key}' repeats a value: {values}")
        axes.append([(key, value, {}) for value in values])
    return [
        ({key: value for key, value, _ in combo}, {k: v for _, _, extra in combo for k, v in extra.items()})
        for combo in itertools.product(*axes)
    ]


def _point_name(coords: dict[str, Any]) -> str:
    """Name a matrix point by its values under the shortest distinct key suffixes, e.g. seq_len=256."""
    keys = list(coords)
    depth = 1
    while len({".".join(k.split(".")[-depth:]) for k in keys}) < len(keys):
        depth += 1
    return ",".join(f"{'.'.join(k.split('.')[-depth:])}={_format_value(v)}" for k, v in coords.items())


def _format_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    return str(value)


def _assign_baselines(cells: list[Cell], baseline: Any, where: str) -> list[Cell]:
    """Each cell's comparison cell. `baseline` may name a cell, or (for cells x matrix grids) a
    `cells` entry, in which case each matrix point is compared with that entry at the same point."""
    if baseline is None:
        raise GridError(f"{where}: missing field 'baseline' (the cell the others are compared with)")
    names = {c.name for c in cells}
    if baseline in names:
        return [dataclasses.replace(c, baseline=baseline) for c in cells]
    families = {c.family for c in cells if c.family}
    if baseline in families and any(c.coords for c in cells):
        by_point = {(c.family, tuple(c.coords.items())): c.name for c in cells}
        return [dataclasses.replace(c, baseline=by_point[(baseline, tuple(c.coords.items()))]) for c in cells]
    raise GridError(f"{where}: baseline '{baseline}' is not a cell of this grid; cells: {sorted(names)}")


def _flatten_overrides(overrides: Any, where: str, prefix: str = "") -> dict[str, Any]:
    """{a: {b: 1}, c.d: 2} -> {a.b: 1, c.d: 2}: nested and dotted forms mean the same merge."""
    if not isinstance(overrides, dict):
        raise GridError(f"{where}: overrides must be a mapping of dotted keys to values, got {overrides!r}")
    flat = {}
    for key, value in overrides.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten_overrides(value, where, prefix=f"{full}."))
        else:
            flat[full] = value
    return flat


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not SAFE_NAME.match(name):
        raise GridError(
            f"{what} {name!r} must be a string of letters, digits and . _ = , + - (it names a directory)"
        )


# ----------------------------------------------------------------------------------------------
# base experiment and override keys


def _resolve_base(base: Any, grid_path: Path) -> Path:
    if not isinstance(base, str):
        raise GridError(f"{grid_path}: base must be a path to an experiment YAML, got {base!r}")
    candidates = [Path(base)] if Path(base).is_absolute() else [grid_path.parent / base, Path.cwd() / base, REPO_ROOT / base]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise GridError(f"{grid_path}: base experiment '{base}' not found (looked in {[str(c) for c in candidates]})")


def _load_base(path: Path) -> dict:
    try:
        base = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (OmegaConfBaseException, yaml.YAMLError, ValueError) as e:
        raise GridError(f"base experiment {path}: cannot read it: {e}") from e
    if not isinstance(base, dict):
        raise GridError(f"base experiment {path} must be a mapping with sections {SECTIONS}")
    return base


def _resolve_config(base: dict, overrides: dict[str, Any], where: str) -> dict:
    cfg = OmegaConf.create(base)
    for key, value in overrides.items():
        try:
            OmegaConf.update(cfg, key, value, merge=True)
        except OmegaConfBaseException as e:
            raise GridError(f"{where}: cannot apply override {key}={value!r}: {e}") from e
    return OmegaConf.to_container(cfg, resolve=True)


def _validate_model_config(config: dict, where: str) -> None:
    """Build the cell's ModelConfig, which rejects bad values and combinations naming the fields."""
    from lit_resformer.model import ModelConfig

    model_cfg = (config.get("model") or {}).get("config")
    if model_cfg is None:
        return
    try:  # vocab_size comes from the tokenizer at run time; any value stands in for it here
        ModelConfig(**{**model_cfg, "vocab_size": model_cfg.get("vocab_size") or 1})
    except (ValueError, TypeError) as e:
        raise GridError(f"{where}: invalid model config: {e}") from e


class _KeyChecker:
    """Knows which dotted keys exist and what type their values must have.

    `model.config.*` is checked against the ModelConfig dataclass (nested dataclasses included);
    other keys must exist in the base experiment, or be an argument of the class the section
    configures (Trainer, LitResFormer, LMDataModule, ModelCheckpoint).
    """

    def __init__(self, base: dict):
        self.base = base

    def check(self, key: str, value: Any, where: str) -> None:
        parts = key.split(".")
        known = [*SECTIONS, *TOP_LEVEL_KEYS, *(k for k in self.base if k not in SECTIONS + TOP_LEVEL_KEYS)]
        if parts[0] not in known:
            raise GridError(f"{where}: unknown override key '{key}': it must start with one of {known}")
        if parts[:2] == ["model", "config"] and len(parts) > 2:
            from lit_resformer.model import ModelConfig

            self._check_dataclass(ModelConfig, parts[2:], key, value, where)
            return
        found, base_value = _lookup(self.base, parts)
        if found:
            if base_value is not None and not _same_kind(value, base_value):
                raise GridError(
                    f"{where}: '{key}' expects {_kind(base_value)} (the base has {base_value!r}), "
                    f"got {_kind(value)} {value!r}"
                )
            return
        signature_cls = _section_class(parts[0]) if len(parts) > 1 else None
        if signature_cls is not None:
            params = inspect.signature(signature_cls.__init__).parameters
            if parts[1] in params:
                hint = _type_hints(signature_cls.__init__).get(parts[1])
                if len(parts) == 2 and hint is not None and not _matches(value, hint):
                    raise GridError(f"{where}: '{key}' expects {_hint_name(hint)}, got {_kind(value)} {value!r}")
                return
        raise GridError(f"{where}: unknown override key '{key}': not in the base experiment{_suggest(self.base, parts)}")

    def _check_dataclass(self, cls: type, parts: list[str], key: str, value: Any, where: str) -> None:
        hints = _type_hints(cls)
        allowed = {f.name for f in dataclasses.fields(cls)} | set(inspect.signature(cls).parameters)
        name = parts[0]
        if name not in allowed:
            raise GridError(
                f"{where}: unknown override key '{key}': {cls.__name__} has no field '{name}'; "
                f"fields: {sorted(allowed)}"
            )
        hint = hints.get(name, Any)
        if isinstance(hint, dataclasses.InitVar):
            hint = hint.type
        nested = _dataclass_in(hint)
        if len(parts) > 1:
            if nested is None:
                raise GridError(f"{where}: unknown override key '{key}': '{name}' of {cls.__name__} has no sub-fields")
            self._check_dataclass(nested, parts[1:], key, value, where)
        elif nested is None and not _matches(value, hint):
            raise GridError(f"{where}: '{key}' expects {_hint_name(hint)}, got {_kind(value)} {value!r}")


def _section_class(section: str) -> type | None:
    """The class a section of a `lit-resformer fit` config configures."""
    if section == "trainer":
        from lightning import Trainer

        return Trainer
    if section == "model":
        from lit_resformer.lit_module import LitResFormer

        return LitResFormer
    if section == "data":
        from lit_resformer.data import LMDataModule

        return LMDataModule
    if section == "checkpoint":
        from lightning.pytorch.callbacks import ModelCheckpoint

        return ModelCheckpoint
    return None


def _lookup(tree: Any, parts: list[str]) -> tuple[bool, Any]:
    for part in parts:
        if not isinstance(tree, dict) or part not in tree:
            return False, None
        tree = tree[part]
    return True, tree


def _suggest(base: dict, parts: list[str]) -> str:
    found, parent = _lookup(base, parts[:-1])
    if found and isinstance(parent, dict):
        return f"; keys at '{'.'.join(parts[:-1])}': {sorted(parent)}"
    return ""


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _same_kind(value: Any, base_value: Any) -> bool:
    if isinstance(base_value, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(base_value, bool)
    if isinstance(base_value, int):
        return isinstance(value, int)
    if isinstance(base_value, float):
        return isinstance(value, (int, float))
    if value is None:  # null switches an option off
        return True
    return _kind(value) == _kind(base_value)


def _type_hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # unresolvable forward references: fall back to "no constraint"
        return {}


def _dataclass_in(hint: Any) -> type | None:
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return hint
    for arg in typing.get_args(hint):
        if dataclasses.is_dataclass(arg) and isinstance(arg, type):
            return arg
    return None


def _matches(value: Any, hint: Any) -> bool:
    """Whether a YAML value fits a type annotation; unknown annotations are left to the class itself."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if hint is type(None) or hint is None:
        return value is None
    if origin is typing.Literal:
        return value in args
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint in (list, tuple) or origin in (list, tuple, Sequence, typing.Sequence):
        if not isinstance(value, (list, tuple)):
            return False
        item = [a for a in args if a is not Ellipsis]
        return len(item) != 1 or all(_matches(v, item[0]) for v in value)
    if hint is dict or origin in (dict, Mapping, typing.Mapping):
        return isinstance(value, dict)
    return True


def _hint_name(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Literal:
        return f"one of {list(typing.get_args(hint))}"
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
