"""Grid spec: load a grid YAML, validate it completely, expand it into runs.

A grid file names a base experiment (LightningCLI YAML), a baseline cell, seeds, and cells given
as dicts of dotted overrides and/or a `matrix` of values whose cartesian product makes the cells:

    name: fig7                                   # optional, defaults to the file's stem
    extends: ../figures/fig7.yaml                # optional: a figure's (or another grid's) fields, overlaid by
                                                 # this file's (see _read_grid_file)
    base: ../experiments/cpu-base.yaml           # relative to the grid file (or else the cwd or the repo); a list
                                                 # of configs is merged in order, as several `fit --config`
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
                                                 # marks a size or token-budget sweep (lit_resformer.measures.scaling)
    claims: [...]                                # optional: the paper's claims to judge (lit_resformer/runs/claim_spec.py)
    select: {...}                                # optional: each arm's best point of the matrix key, chosen from
                                                 # the seeds' (pilot) runs, then more seeds and cells there
                                                 # (lit_resformer/grids/selection.py)
    ladder: {budgets: [...], decay_fraction: 0.2}  # optional, instead of a matrix: a warmup-stable-decay trunk per
                                                 # cell and seed, and a decay branch from it at each budget
                                                 # (Ladder, below)

Everything is checked before any run starts; a problem raises `GridError` naming it.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lit_resformer.config.files import load_experiment
from lit_resformer.grids.grid import BranchPoint, Cell, Grid, GridError
from lit_resformer.grids.selection import SelectionError, parse_selection
from lit_resformer.provenance import REPO_ROOT
from lit_resformer.runs.claim_spec import parse_claims
from lit_resformer.runs.directory import GridDir

GRID_FIELDS = {"name", "extends", "description", "base", "baseline", "seeds", "cells", "matrix", "overrides", "report",
               "claims", "select", "ladder"}
REPORT_FIELDS = {"critical_point_window", "scaling"}
SCALING_AXES = ("params", "tokens")  # sweeps over model size or over training tokens (lit_resformer.measures.scaling)
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=,+-]*$")
LADDER_FIELDS = {"budgets", "decay_fraction"}
LADDER_OVER = "trainer.max_steps"  # a ladder's budgets: its grid's one matrix key
TRUNK = "trunk"  # a trunk cell's name: <family>,trunk


def load_grid(path: str | Path, seeds: Sequence[int] | None = None, forced: dict[str, Any] | None = None,
              allow_any_class: bool = False) -> Grid:
    """Read, validate and expand a grid file. `seeds` replaces the file's seeds (CLI `--seeds`); `forced` holds
    dotted overrides that win over the grid's and every cell's own (CLI `--set`, e.g. a machine's accelerator);
    `allow_any_class` lets its configs construct any class (CLI `--allow-any-class`, for a file the user trusts).

    In three steps, each owned by one module: this file's fields as written, then the blocks other modules read
    (`ladder:`, then the cells' configs through `fit`'s checks, `claims:` and `select:`), then the grid."""
    path = Path(path)
    if not path.is_file():
        raise GridError(f"grid file not found: {path}")
    spec = _read_grid_file(path)
    where = str(path)
    name = spec.get("name", path.stem)
    _check_name(name, f"{where}: name")
    if "base" not in spec:
        raise GridError(f"{where}: missing field 'base' (the experiment YAML every cell starts from)")
    base_paths = [_resolve_base(b, path) for b in (spec["base"] if isinstance(spec["base"], list) else [spec["base"]])]
    base = _load_base(base_paths)
    seeds = _seeds(spec, seeds, where)
    report = _report(spec, where)
    overrides = _flatten_overrides(spec.get("overrides") or {}, f"{where}: overrides")
    forced = _flatten_overrides(forced or {}, "--set")
    families = _families(spec, where)

    ladder = parse_ladder(spec.get("ladder"), where)
    matrix = spec.get("matrix")
    if ladder is not None:
        if not families or (isinstance(matrix, dict) and LADDER_OVER in matrix):
            raise GridError(f"{where}: a grid with a ladder has `cells` (and optionally a `matrix` of other keys, "
                            f"e.g. model.lr: a trunk per cell and point); its budgets are its {LADDER_OVER}")
        cells = _ladder_cells(families, matrix, ladder, where)
    else:
        cells = _expand_cells(families, matrix, where)
    baseline = spec.get("baseline")
    cells = _assign_baselines(cells, baseline, where)
    branch_points = {c.name: BranchPoint(c.trunk, ladder.decay_start(c.coords[LADDER_OVER])) for c in cells if c.trunk}
    to_be_chosen = _at_best_placeholders(spec.get("select"), where)
    at_best_cells = _at_best_cells(spec.get("select"), cells, families, baseline, where)

    from lit_resformer.training.config_checker import CellConfigError, ConfigChecker

    checker = ConfigChecker(allow_any_class=allow_any_class)
    try:
        # the at_best cells at every value their arm may choose are checked now too: the grid is refused before any run
        configs, resolved = checker.cell_configs(base, overrides, {c.name: c.overrides for c in [*cells, *at_best_cells]},
                                                 forced, where)
    except CellConfigError as e:
        raise GridError(str(e)) from None
    try:  # the grid's `claims:`, checked against its cells (and those a `select:` block will add)
        claims = [claim.to_dict() for claim in parse_claims(spec.get("claims"),
                                                            [dataclasses.asdict(c) for c in cells] + to_be_chosen,
                                                            _select_per(spec.get("select")))]
    except ValueError as e:
        raise GridError(f"{where}: {e}") from e
    try:
        # the pilot is the file's seeds, never a call's `--seeds`: a call that trains seed 0 alone must not choose
        # the rates on seed 0 alone (and launch the confirmation seeds at that choice)
        selection = parse_selection(spec.get("select"), list(families), [c.coords for c in cells],
                                    _seeds(spec, None, where), claims, where)
    except SelectionError as e:
        raise GridError(str(e)) from None
    run_keys = [(c.name, seed) for c in cells for seed in seeds]
    if selection is not None:
        def by_arm(where_cells: list[Cell]) -> dict[str, dict[Any, str]]:
            return {arm: {c.coords[selection.over]: c.name for c in where_cells if c.family == arm}
                    for arm in selection.arms}

        if selection.per is None:
            selection = dataclasses.replace(selection, cells=by_arm(cells))
        else:
            selection = dataclasses.replace(selection, cells_per={
                value: by_arm([c for c in cells if c.coords.get(selection.per) == value])
                for value in selection.per_values})
        confirmed = [cell for arm in selection.confirm for cell in selection.candidate_cells(arm)]
        confirmed = [*{branch_points[c].trunk: None for c in confirmed if c in branch_points}, *confirmed]
        run_keys += [(cell, seed) for cell in confirmed for seed in selection.seeds]
        run_keys += [(c.name, seed) for c in at_best_cells for seed in selection.at_best.seeds]
    return Grid(
        name=name,
        path=path.resolve(),
        base_paths=base_paths,
        baseline=baseline,
        seeds=seeds,
        cells=cells,
        overrides={**overrides, **forced},
        description=str(spec.get("description", "")),
        report=report,
        configs={c.name: configs[c.name] for c in cells},
        resolved={c.name: resolved[c.name] for c in cells},
        claims=claims,
        checker=checker,
        base=base,
        selection=selection,
        families=families,
        forced=forced,
        ladder=ladder.to_dict() if ladder else None,
        branch_points=branch_points,
        run_keys=list(dict.fromkeys(run_keys)),
        at_best_cells=at_best_cells,
        at_best_configs={c.name: (configs[c.name], resolved[c.name]) for c in at_best_cells},
    )


@dataclass(frozen=True)
class Ladder:
    """A grid's `ladder:` block: OLMo-core's model ladder on one trunk per (arm, seed). The trunk warms up and holds
    the peak learning rate (model.schedule: wsd, no decay), keeping a checkpoint at each rung's decay start; each rung
    is a decay branch that resumes from its trunk's checkpoint there (model weights, optimizer, data order: the
    trunk's StatefulDataLoader state) and decays linearly to its own budget, so that one trunk yields every budget,
    each measured at the end of its own decay, and a rung at budget B has seen exactly B steps of data.

        ladder:
          budgets: [1500, 2500, 4000, 6000, 9000]   # trainer.max_steps of each rung (the grid's one matrix key)
          decay_fraction: 0.2                       # each rung decays over its last 20% of steps

    A rung's config is the trunk's with trainer.max_steps = B and model.decay_start = B - round(decay_fraction x B):
    the same config as a straight WSD run to B, which it equals step for step (the trunk's first decay_start steps
    are that run's). So its run identity is a straight run's (the trunk is how it is computed, not what it is), it
    differs by budget, and a grid that trains the same rung another way shares it. The runner trains the trunks first
    and starts a rung once its trunk has kept the checkpoint at the rung's decay start
    (lit_resformer.runs.run_dir.RunDir.start_branch), which then resumes (`--ckpt_path last`) exactly as a run
    killed at that step resumes; a rung killed later resumes from its own checkpoints."""

    budgets: tuple[int, ...]  # ascending
    decay_fraction: float

    def decay_start(self, budget: int) -> int:
        return budget - round(self.decay_fraction * budget)

    @property
    def starts(self) -> list[int]:
        """The trunk's kept steps: each rung's decay start."""
        return [self.decay_start(b) for b in self.budgets]

    def matrix(self) -> dict:
        """The grid's matrix: each budget with its decay start."""
        return {LADDER_OVER: {b: {"model.schedule": "wsd", "model.decay_start": self.decay_start(b)}
                              for b in self.budgets}}

    def trunk_overrides(self) -> dict[str, Any]:
        """What a trunk cell sets over its family's overrides: no decay, to the last rung's start, kept there."""
        return {LADDER_OVER: max(self.starts), "model.schedule": "wsd", "model.decay_start": None,
                "checkpoint.keep_steps": self.starts}

    def to_dict(self) -> dict:
        return {"budgets": list(self.budgets), "decay_fraction": self.decay_fraction, "decay_starts": self.starts}


def parse_ladder(raw: Any, where: str) -> Ladder | None:
    """Check a grid's `ladder:` block; GridError names the problem."""
    if raw is None:
        return None
    where = f"{where}: ladder"
    if not isinstance(raw, dict) or set(raw) != LADDER_FIELDS:
        raise GridError(f"{where} must be a mapping with fields {sorted(LADDER_FIELDS)}, got {raw!r}")
    budgets, fraction = raw["budgets"], raw["decay_fraction"]
    if (not isinstance(budgets, list) or len(budgets) < 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in budgets)
            or budgets != sorted(set(budgets))):
        raise GridError(f"{where}.budgets must be at least two ascending, distinct step counts, got {budgets!r}")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise GridError(f"{where}.decay_fraction must be a fraction in (0, 1), got {fraction!r}")
    ladder = Ladder(tuple(budgets), float(fraction))
    starts = ladder.starts
    if starts != sorted(set(starts)) or starts[0] < 1:
        raise GridError(f"{where}: the rungs' decay starts {starts} must be distinct and positive")
    return ladder


def trunk_cell(family: str) -> str:
    return f"{family},{TRUNK}"


def _ladder_cells(families: dict[str, dict[str, Any]], matrix: Any, ladder: Ladder, where: str) -> list[Cell]:
    """A ladder's cells: a trunk per `cells` entry and point of the grid's own `matrix` (e.g. a peak learning rate),
    then each trunk's rungs, one per budget. A trunk has no coordinates (it is measured only through its rungs); its
    name is its family's and point's, e.g. `resformer,lr=0.002,trunk` for the rungs `resformer,lr=0.002,max_steps=B`."""
    points = _matrix_points(matrix, where) if matrix is not None else [({}, {})]
    trunks, rungs = [], []
    for family, own in families.items():
        for coords, extras in points:
            head = ",".join([family, *([_point_name(coords)] if coords else [])])
            trunk = Cell(name=trunk_cell(head), family=family, baseline="",
                         overrides={**own, **coords, **extras, **ladder.trunk_overrides()})
            trunks.append(trunk)
            rungs += [dataclasses.replace(c, name=f"{head},{c.name[len(family) + 1:]}", coords={**coords, **c.coords},
                                          trunk=trunk.name)
                      for c in _expand_cells({family: {**own, **coords, **extras}}, ladder.matrix(), where)]
    return [*trunks, *rungs]


def _seeds(spec: dict, seeds: Sequence[int] | None, where: str) -> list[int]:
    """The seeds a call trains: the CLI's `--seeds` if given, else the file's (default [0]); a `select:` block's pilot
    seeds are always the file's."""
    seeds = list(seeds) if seeds is not None else spec.get("seeds", [0])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise GridError(f"{where}: seeds must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise GridError(f"{where}: duplicate seeds in {seeds}")
    return seeds


def _report(spec: dict, where: str) -> dict[str, Any]:
    """The checked `report:` settings, defaults filled in."""
    report = spec.get("report") or {}
    if not isinstance(report, dict) or set(report) - REPORT_FIELDS:
        raise GridError(f"{where}: report accepts only {sorted(REPORT_FIELDS)}, got {report!r}")
    window = report.get("critical_point_window", 10)
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise GridError(f"{where}: report.critical_point_window must be a positive integer, got {window!r}")
    scaling = report.get("scaling")
    if scaling is not None and scaling not in SCALING_AXES:
        raise GridError(f"{where}: report.scaling={scaling!r} is not allowed; choose one of {list(SCALING_AXES)}")
    return {"critical_point_window": window, **({"scaling": scaling} if scaling else {})}


def _select_per(select: Any) -> str | None:
    """A `select:` block's `per` as written (None without one; a malformed block is parse_selection's to name)."""
    per = select.get("per") if isinstance(select, dict) else None
    return per if isinstance(per, str) else None


def _at_best(select: Any, where: str) -> tuple[list, list[tuple[dict[str, Any], dict[str, Any]]]]:
    """A `select:` block's at_best as written: (its `cells` entries, the points of its matrix); nothing without one
    (a malformed block is parse_selection's to name)."""
    at_best = select.get("at_best") if isinstance(select, dict) else None
    if not isinstance(at_best, dict) or not isinstance(at_best.get("cells"), list):
        return [], []
    return at_best["cells"], _matrix_points(at_best.get("matrix"), f"{where}: select.at_best")


def _at_best_placeholders(select: Any, where: str) -> list[dict]:
    """The cells a `select:` block's at_best adds once its point is chosen, as parse_claims sees them before
    (family and coordinates), from the block as written; none without one."""
    families, points = _at_best(select, where)
    return [{"name": f"{family},{select.get('over')}=best,{_point_name(coords)}", "family": family, "coords": coords}
            for family in families for coords, _ in points]


def _at_best_cells(select: Any, cells: list[Cell], families: dict[str, dict[str, Any]], baseline: Any,
                   where: str) -> list[Cell]:
    """The cells a `select:` block's at_best adds once its arm's point is chosen, at each value of the swept key its
    cells hold (each compared with the baseline's cell at its point), from the block as written; none without one."""
    at_best_families, points = _at_best(select, where)
    if not at_best_families:
        return []
    over, values = select.get("over"), []
    for cell in cells:
        if over in cell.coords and cell.coords[over] not in values:
            values.append(cell.coords[over])
    candidates = []
    for value in values:
        at_value = [Cell(name=f"{family},{_point_name({over: value, **coords})}",
                         overrides={**families.get(family, {}), over: value, **coords, **extras}, baseline="",
                         family=family, coords=coords, at={over: value})
                    for family in at_best_families for coords, extras in points]
        by_point = {(c.family, tuple(c.coords.items())): c.name for c in at_value}
        candidates += [dataclasses.replace(c, baseline=by_point.get((baseline, tuple(c.coords.items())), c.name))
                       for c in at_value]
    return candidates


def declared_raw_claims(grid_file: Path) -> tuple[str, list, dict | None]:
    """(the grid's name, its `claims:` entries as written, inherited ones included, its `select:` block or None),
    without checking them against cells or resolving bases: what a grid file declared, read from any commit's files.
    GridError when it does not read as a grid file."""
    spec = _read_grid_file(grid_file, resolve_bases=False)
    claims = spec.get("claims") or []
    return str(spec.get("name", grid_file.stem)), claims if isinstance(claims, list) else [], spec.get("select")


def declared_claims(grid_file: Path, cells: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The claims a grid file declares now, checked against a grid's cells (a manifest's cell entries), as the
    manifest stores them; GridError naming the file when it does not read or names a cell the grid lacks."""
    try:
        spec = _read_grid_file(grid_file)
        return [claim.to_dict() for claim in parse_claims(spec.get("claims"), [
            {"name": c["name"], "family": c.get("family"), "coords": c.get("coords") or {}} for c in cells]
            + _at_best_placeholders(spec.get("select"), str(grid_file)), _select_per(spec.get("select")))]
    except ValueError as e:  # GridError included
        raise GridError(f"{grid_file}: {e}") from e


def locate_grid_file(grid_file: str | None, results: Path) -> Path | None:
    """The grid file a results folder was run from, in the checkout that holds the folder: the manifest's path when
    absolute, else the same relative path under the nearest folder above the results that has it. None when no such
    file is there (a copy of the results outside the checkout): then the claims the manifest stores are the grid's."""
    if not grid_file:
        return None
    if Path(grid_file).is_absolute():
        return Path(grid_file) if Path(grid_file).is_file() else None
    return next((root / grid_file for root in results.resolve().parents if (root / grid_file).is_file()), None)


def claims_change(grid_dir: GridDir) -> tuple[list[dict], str]:
    """(the claims the grid file declares now, a line saying how they differ from those the manifest stores: "" when
    they do not, or when the file is not in a checkout around the results, a copy's case, where the stored ones are
    the grid's). GridError naming the file when it is there and does not read."""
    manifest = grid_dir.read_manifest()
    stored = manifest.get("claims") or []
    path = locate_grid_file(manifest.get("grid_file"), grid_dir.path)
    if path is None:
        return stored, ""
    declared = declared_claims(path, manifest["cells"])
    if declared == stored:
        return stored, ""
    texts = [{c["claim"] for c in claims} for claims in (stored, declared)]
    changed = sum(1 for c in declared if c["claim"] in texts[0] and c not in stored)
    return declared, (f"{path} declares other claims than {grid_dir.manifest_file} stores: "
                      f"{len(texts[1] - texts[0])} added, {len(texts[0] - texts[1])} removed, {changed} changed")


def grid_description(grid_dir: GridDir, manifest: Mapping[str, Any]) -> str:
    """The prose a grid's file says about it, as that file says it now where the checkout around the results has the
    file, else as the manifest stored it. It is prose, part of no run and of no verdict, so it is read where it is
    shown and never stored back; what the grid's cells are is said from its cells (the report's lead), not here."""
    path = locate_grid_file(manifest.get("grid_file"), grid_dir.path)
    if path is not None:
        try:
            return str(_read_grid_file(path, resolve_bases=False).get("description") or "")
        except GridError:  # a file that no longer reads: `report` and `claims` say so where it matters
            pass
    return str(manifest.get("description") or "")


def refresh_claims(grid_dir: GridDir) -> str:
    """Store in the grid's manifest the claims its grid file declares now, so that a claim written once in configs/
    applies to runs judged before it changed. The manifest's claims are what `report` and `claims` judge, wherever
    the folder is read from; only this writes them after the runs (`lit-resformer report` calls it; `claims` refuses a
    folder whose stored claims differ from its file's, claims_change). Returns a line saying what changed, or ""."""
    declared, change = claims_change(grid_dir)
    if change:
        grid_dir.write_claims(declared)
        return f"claims refreshed: {change}"
    return ""


# ----------------------------------------------------------------------------------------------
# cells


def _families(spec: dict, where: str) -> dict[str, dict[str, Any]]:
    """The `cells` entries, each name -> its own overrides flattened (empty without `cells`)."""
    cells_spec = spec.get("cells")
    if cells_spec is None:
        return {}
    if not isinstance(cells_spec, dict) or not cells_spec:
        raise GridError(f"{where}: cells must be a non-empty mapping of cell name -> overrides")
    families = {}
    for cell_name, overrides in cells_spec.items():
        _check_name(cell_name, f"{where}: cell name")
        families[cell_name] = _flatten_overrides(overrides or {}, f"{where}: cell '{cell_name}'")
    return families


def _expand_cells(families: dict[str, dict[str, Any]], matrix: Any, where: str) -> list[Cell]:
    """The cells: each `cells` entry (`families`) at each point of `matrix`, or either alone."""
    if not families and matrix is None:
        raise GridError(f"{where}: a grid needs 'cells' and/or 'matrix'")
    points: list[tuple[dict[str, Any], dict[str, Any]]] = [({}, {})]
    if matrix is not None:
        points = _matrix_points(matrix, where)

    cells, seen = [], set()
    for (family, overrides), (coords, extras) in itertools.product(list(families.items()) or [(None, {})], points):
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
        by_point = {(c.family, tuple(c.coords.items())): c for c in cells if c.coords}
        at_point = {c.name: by_point[(baseline, tuple(c.coords.items()))] for c in cells if c.coords}
        # a ladder's trunk has no coordinates to match by: its baseline is the trunk its rungs' baselines branch from
        trunks = {c.trunk: at_point[c.name].trunk for c in cells if c.trunk}
        return [dataclasses.replace(c, baseline=at_point[c.name].name if c.coords else trunks[c.name]) for c in cells]
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


def _read_grid_file(path: Path, children: tuple[Path, ...] = (), resolve_bases: bool = True) -> dict:
    """A grid file's fields. With `extends: OTHER.yaml` this file is an overlay on the other one (a figure's cells
    and claims, configs/figures/, or another tier): a tier states only what it changes (budgets, sizes, seeds, its
    own base) and the figure is written once. Fields are replaced one by one, except:
    - `overrides` merge key by key, this file winning;
    - `cells` merge cell by cell: an entry naming an inherited cell merges its overrides into that cell's, key by
      key, in place; `~` (null) removes the inherited cell (one the tier's model cannot express, or a slice of a
      grid) and the inherited claims that name it; a new name is appended;
    - `claims` are appended to the inherited ones (a tier's own domains, lengths or sizes).
    `base` paths are made absolute here, so an inherited base stays relative to the file that wrote it (unless
    `resolve_bases` is false: a reader of claims only, e.g. of a past commit's files, which may lack their bases)."""
    try:
        spec = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (OmegaConfBaseException, yaml.YAMLError, ValueError) as e:  # syntax, duplicate keys, interpolation
        raise GridError(f"{path}: cannot read the grid: {e}") from e
    if not isinstance(spec, dict):
        raise GridError(f"{path}: a grid file must be a mapping with fields {sorted(GRID_FIELDS)}")
    unknown = sorted(set(spec) - GRID_FIELDS)
    if unknown:
        raise GridError(f"{path}: unknown field(s) {unknown}; allowed fields: {sorted(GRID_FIELDS)}")
    if "base" in spec and resolve_bases:
        spec["base"] = [str(_resolve_base(b, path)) for b in (spec["base"] if isinstance(spec["base"], list)
                                                             else [spec["base"]])]
    parent = spec.pop("extends", None)
    if parent is None:
        return spec
    if "name" not in spec:
        raise GridError(f"{path}: a grid that extends another needs its own name (its runs must not land in the "
                        f"other grid's run directory)")
    parent_path = (path.parent / str(parent)).resolve()
    if not parent_path.is_file():
        raise GridError(f"{path}: extends '{parent}', which is not a file (paths are relative to this grid file)")
    if parent_path in (path.resolve(), *children):
        raise GridError(f"{path}: extends '{parent}', which extends it back")
    inherited = _read_grid_file(parent_path, (*children, path.resolve()), resolve_bases)
    inherited.pop("name", None)
    merged = {**inherited, **spec}
    merged["overrides"] = {**_flatten_overrides(inherited.get("overrides") or {}, f"{parent_path}: overrides"),
                           **_flatten_overrides(spec.get("overrides") or {}, f"{path}: overrides")}
    if "cells" in spec and "cells" in inherited:
        merged["cells"] = _overlay_cells(inherited["cells"], spec["cells"], parent_path, path)
        removed = {name for name, overrides in spec["cells"].items() if overrides is None}
        if removed and isinstance(inherited.get("claims"), list):
            inherited["claims"] = [c for c in inherited["claims"]
                                   if not (isinstance(c, dict) and _names_removed(c, removed))]
            merged["claims"] = inherited["claims"]
    if "claims" in spec and inherited.get("claims") is not None:  # [] once the removed cells' claims went
        if not isinstance(spec["claims"], list):
            raise GridError(f"{path}: claims must be a list (they are added to those of {parent_path})")
        merged["claims"] = [*inherited["claims"], *spec["claims"]]
    return merged


def _names_removed(claim: dict, removed: set[str]) -> bool:
    """Whether a claim's a or b is a removed cell or one of its points ("<cell>,<key>=<value>", e.g. a ladder rung)."""
    return any(isinstance(side, str) and (side in removed or side.split(",", 1)[0] in removed)
               for side in (claim.get("a"), claim.get("b")))


def _overlay_cells(inherited: Any, own: Any, parent_path: Path, path: Path) -> dict:
    """The inherited cells with this file's entries merged in (see _read_grid_file)."""
    for cells, where in ((inherited, parent_path), (own, path)):
        if not isinstance(cells, dict):
            raise GridError(f"{where}: cells must be a mapping of cell name -> overrides, got {cells!r}")
    cells = {name: _flatten_overrides(overrides or {}, f"{parent_path}: cell '{name}'")
             for name, overrides in inherited.items()}
    for name, overrides in own.items():
        if overrides is None and name in cells:
            del cells[name]
            continue
        cells[name] = {**cells.get(name, {}), **_flatten_overrides(overrides or {}, f"{path}: cell '{name}'")}
    return cells


def _resolve_base(base: Any, grid_path: Path) -> Path:
    if not isinstance(base, str):
        raise GridError(f"{grid_path}: base must be a path to an experiment YAML or a list of them, got {base!r}")
    candidates = [Path(base)] if Path(base).is_absolute() else [grid_path.parent / base, Path.cwd() / base, REPO_ROOT / base]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise GridError(f"{grid_path}: base experiment '{base}' not found (looked in {[str(c) for c in candidates]})")


def _load_base(paths: list[Path]) -> dict:
    where = " + ".join(str(p) for p in paths)
    try:
        base = load_experiment(*paths)
    except (OmegaConfBaseException, yaml.YAMLError, ValueError) as e:
        raise GridError(f"base experiment {where}: cannot read it: {e}") from e
    if not isinstance(base, dict):
        raise GridError(f"base experiment {where} must be a mapping of config sections (trainer, model, data, ...)")
    return base
