"""`ConfigChecker`: `fit`'s parser and checks applied to a config dict without training, building a Trainer or
reading data. The ablation grid validates its cells with it, so a cell is refused exactly when `fit` would refuse
it. Also the record of fit's parser that lets `fit` check a command line before Lightning is imported
(lit_resformer.config.quick_check), written by `python -m lit_resformer.training.config_checker`."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lit_resformer.config.messages import Fields, config_file_keys, expected_type, unknown_field
from lit_resformer.config.quick_check import (
    FIELDS_FILE,
    PACKAGE_ROOT,
    encode_type,
    signature_digest,
    signature_parts,
    versions,
)
from lit_resformer.config.trust import check_objects
from lit_resformer.data import LMDataModule
from lit_resformer.training.config_rules import check_classes, check_experiment
from lit_resformer.training.lightning_cli import CLI_SETTINGS, PARSER_SETTINGS, ResFormerCLI
from lit_resformer.training.module import LitResFormer


class CellConfigError(ValueError):
    """A grid cell's config that `fit` would refuse; the message names where it was written and the field."""


class _ParserOnly(ResFormerCLI):
    """Builds the CLI's parser (with `run=True`, its subcommands' parsers), then stops: no parsing, seeding, or
    classes."""

    def parse_arguments(self, parser, args) -> None:
        self.config = Namespace(subcommand=None, seed_everything=False)

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass


class ConfigChecker:
    """`fit`'s parser and checks over config dicts, with no training: types and choices of every field (the
    parser), the checks across fields, and the constructors' own argument checks (`check_classes`).

    The parser is the one of `lit-resformer fit` without `--ckpt_path`, which a config file does not hold.
    """

    def __init__(self, allow_any_class: bool = False) -> None:
        self.parser = _ParserOnly(LitResFormer, LMDataModule, run=False, **CLI_SETTINGS,
                                  parser_kwargs={**PARSER_SETTINGS, "exit_on_error": False}).parser
        self.fields = Fields.of(self.parser)  # every key a config may set, its type, the classes of its groups
        self.allow_any_class = allow_any_class

    def check(self, config: Mapping[str, Any]) -> Namespace:
        """The parsed config, or the first problem: argparse.ArgumentError for a key the parser does not know or a
        value of the wrong type; ValueError for a check of `fit` or of a constructor, or for an object the config
        may not construct (`lit_resformer.config.trust`)."""
        cfg = self.parser.parse_object(dict(config))
        if not self.allow_any_class:
            check_objects(cfg, skip=frozenset(config_file_keys(self.parser)))
        check_experiment(cfg)
        check_classes(cfg)
        return cfg

    def resolved(self, config: Mapping[str, Any], checked: bool = True) -> dict:
        """Every field of a valid config with its value, defaults included: equal for configs that run the same.
        `checked=False` parses (fields and types) without the checks across fields and of the constructors: for a
        grid's base, which need not run by itself (its cells may fit a corpus's sequence length to the model)."""
        cfg = self.check(config) if checked else self.parser.parse_object(dict(config))
        return yaml.safe_load(self.parser.dump(cfg, skip_none=False))

    def cell_configs(self, base: dict, overrides: dict[str, Any], cells: Mapping[str, dict[str, Any]],
                     forced: dict[str, Any], where: str) -> tuple[dict[str, dict], dict[str, dict]]:
        """A grid's cells (name -> its own dotted overrides) as `fit` would run them: cell name -> the base with the
        grid's `overrides`, the cell's and the `forced` ones (--set) applied in that order, and cell name -> that
        config resolved (every field with its value), each checked as `fit` checks it. CellConfigError names the
        first problem and where (`where`: the grid file) it was written."""
        configs, resolved = {}, {}
        for name, own in cells.items():
            cell_where = f"{where}: cell '{name}'"
            cell_overrides = {**overrides, **own, **forced}
            configs[name] = merged_config(base, cell_overrides, cell_where)
            written = {f"{where}: overrides": overrides, "--set": forced, cell_where: own}
            resolved[name] = self.check_cell(configs[name], cell_overrides, cell_where, written)
        return configs, resolved

    def check_cell(self, config: dict, overrides: dict[str, Any], where: str,
                   written: dict[str, dict[str, Any]]) -> dict:
        """A cell's config through `fit`'s parser and checks (nothing is trained or written), resolved. The keys of
        its overrides, as `written` holds them (where -> overrides), are checked first, so that a misspelt one is
        named as such."""
        for place, keys in written.items():
            for key in keys:
                problem = unknown_field(self.fields, key)
                if problem:
                    raise CellConfigError(f"{place}: unknown override key '{key}': {problem}")
        try:
            return self.resolved(config)
        except argparse.ArgumentError as e:  # a value of the wrong type, or outside its choices
            message = str(e)
            # the parser names the field it refused; say what that field takes
            key = next((k for k in overrides if f'"{k}"' in message), None)
            expected = expected_type(self.fields, key) if key else None
            if expected is None:
                raise CellConfigError(f"{where}: {message}") from None
            raise CellConfigError(f"{where}: '{key}' expects {expected}, got {overrides[key]!r}") from None
        except ValueError as e:  # a check across fields, or a class's own argument check
            raise CellConfigError(f"{where}: {e}") from None


def merged_config(base: dict, overrides: dict[str, Any], where: str) -> dict:
    """`base` with dotted `overrides` merged in, interpolations resolved; CellConfigError for one that cannot apply."""
    cfg = OmegaConf.create(base)
    for key, value in overrides.items():
        try:
            OmegaConf.update(cfg, key, value, merge=True)
        except OmegaConfBaseException as e:
            raise CellConfigError(f"{where}: cannot apply override {key}={value!r}: {e}") from e
    return OmegaConf.to_container(cfg, resolve=True)


# --------------------------------------------------------------------------------------------- fit's parser, recorded
def fit_fields_record() -> dict:
    """fit's parser as lit_resformer.config.quick_check reads it (FIELDS_FILE): for fit, validate and test, every
    field with its type (quick_check.encode_type) and default, the class of each group of fields, the parser's
    settings; and what it was made from: the Lightning and jsonargparse releases and the signature digest of each
    project file whose classes the parser reads (`signature_sources`)."""
    cli = _ParserOnly(LitResFormer, LMDataModule, run=True, **CLI_SETTINGS, parser_kwargs=PARSER_SETTINGS)
    fields: dict[str, dict] = {}
    commands: dict[str, list[str]] = {}
    owners: dict[str, str] = {}
    settings: dict[str, Any] = {}
    for command, parser in cli._subcommand_parsers.items():
        described, defaults = Fields.of(parser), parser.get_defaults()
        for key in described.keys:
            spec: dict[str, Any] = {"type": encode_type(described.hints[key]) if key in described.hints else None}
            default = defaults.get(key)
            if _is_json(default):
                spec["default"] = default
            if fields.setdefault(key, spec) != spec:
                raise RuntimeError(f"{key} is a different field in {command}'s parser than in another's")
            commands.setdefault(key, []).append(command)
        owners.update(described.owners)
        settings = {"parser_mode": parser.parser_mode, "allow_abbrev": parser.allow_abbrev}
    every = list(cli._subcommand_parsers)
    classes = {ResFormerCLI} | {getattr(group, "group_class", None) for parser in cli._subcommand_parsers.values()
                                for group in parser.groups.values()}
    sources = signature_sources(Path(inspect.getsourcefile(c)) for c in classes
                                if c is not None and c.__module__.startswith("lit_resformer."))
    return {"versions": versions(),
            "sources": {str(path.relative_to(PACKAGE_ROOT)): signature_digest(path) for path in sources},
            "parser": settings, "commands": every,
            "only_in": {key: names for key, names in sorted(commands.items()) if names != every},
            "owners": dict(sorted(owners.items())), "fields": dict(sorted(fields.items()))}


def _is_json(value: Any) -> bool:
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        return False


def signature_sources(files: Iterable[Path]) -> list[Path]:
    """The files, and the project files from which their classes' signature parts (quick_check.signature_parts:
    fields, `__init__` signatures, the CLI's parser methods) import a name (a type alias, a default), and so on:
    every file whose edit can change the parser."""
    found: set[Path] = set()
    pending = [path.resolve() for path in files]
    while pending:
        path = pending.pop()
        if path in found:
            continue
        found.add(path)
        parts = signature_parts(path)
        named = {name.id for owner, node in parts if owner is not None
                 for name in ast.walk(node) if isinstance(name, ast.Name)}
        package = ".".join(path.relative_to(PACKAGE_ROOT).parts[:-1])
        for _, node in parts:
            if isinstance(node, ast.ImportFrom) and (node.module or node.level) and any(
                    alias.name in named for alias in node.names):
                spec = importlib.util.find_spec("." * node.level + (node.module or ""), package)
                # the package's own files only: a virtual environment may live beside it, under PACKAGE_ROOT
                if spec is not None and spec.origin and Path(spec.origin).resolve().is_relative_to(
                        PACKAGE_ROOT / "lit_resformer"):
                    pending.append(Path(spec.origin).resolve())
    return sorted(found)


if __name__ == "__main__":
    FIELDS_FILE.write_text(json.dumps(fit_fields_record(), indent=1) + "\n")
    print(f"{FIELDS_FILE} written")
