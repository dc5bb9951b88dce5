"""`fit`'s parser and checks before Lightning is imported: bad input refused in about a second, not after the
seconds that importing Lightning, torch and the model take.

fit's parser is built from the signatures of Lightning's Trainer and the project's classes, so building it needs them
imported. Its fields are recorded instead (FIELDS_FILE: every key with its type and default, the class each group of
keys comes from; written by `python -m lit_resformer.training.config_checker`, and a test fails when it no longer
equals the parser) and a jsonargparse parser made from that record parses the command line and the config files as
fit's would: an unknown key, a value of the wrong type or outside its choices is refused in fit's own words
(lit_resformer.config.messages). Then come the checks that need no torch (lit_resformer.config.field_checks: ranges,
the model config, the fields against each other, whether the accelerator exists here) and the data module's check of
a local corpus's files (lit_resformer.corpora.sources.local_files).

The record is used only while it is current: the same Lightning and jsonargparse releases, and the same signatures in
the project's files it was made from (the signature text of each, `signature_text`: edits elsewhere in those files
leave it current). Otherwise, and for whatever the record cannot decide (a class-valued field's own options, a whole
group given as a file), the check says nothing and fit's own parser decides after Lightning is imported. The check
never refuses what fit's parser would run."""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import operator
import types
import typing
from argparse import ArgumentError
from collections.abc import Sequence
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Union

from jsonargparse import ActionConfigFile, ArgumentParser, Namespace

from lit_resformer.config import field_checks
from lit_resformer.config.files import expand_config_args
from lit_resformer.config.messages import Fields, explain_parser_error, unknown_key, wrong_value
from lit_resformer.config.trust import ALLOW_ANY_CLASS_FLAG
from lit_resformer.corpora.sources import local_files

FIELDS_FILE = Path(__file__).with_name("fit_fields.json")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding lit_resformer/: FIELDS_FILE's sources are relative to it
VERSIONED = ("lightning", "jsonargparse")  # the releases whose classes and parsing the record was made with
# Options that show or print rather than run: fit's parser answers them.
NOT_A_RUN = ("-h", "--help", "--print_config")
# Methods of the CLI class whose whole body shapes the parser (the other classes shape it by their __init__'s
# signature and their fields).
PARSER_METHODS = ("add_arguments_to_parser", "subcommands")


# --------------------------------------------------------------------------------------------- the record's types
def encode_type(hint: Any) -> Any:
    """A type hint as JSON data ("int", {"literal": [...]}, {"union": [...]}, {"list": ...}, ...), or None for a type
    the record does not spell out (a class, a time span): such a field takes any value here."""
    plain = {int: "int", float: "float", str: "str", bool: "bool", type(None): "null", Path: "path"}
    if hint in plain:
        return plain[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return {"literal": list(args)}
    parts = [encode_type(arg) for arg in args]
    if any(part is None for part in parts):
        return None
    if origin in (Union, types.UnionType):
        # a number's union in one order (int, float, null): typing caches int | float and float | int as one object,
        # spelled as whichever a process made first; any other union keeps the hint's order, which decides parsing
        numeric = ("int", "float", "null")
        return {"union": sorted(parts, key=numeric.index) if all(p in numeric for p in parts) else parts}
    if origin in (list, tuple, dict) and parts:
        return {origin.__name__: parts}
    return None


def decode_type(encoded: Any) -> Any:
    """The type hint `encode_type` wrote (typing.Any for None)."""
    plain = {"int": int, "float": float, "str": str, "bool": bool, "null": type(None), "path": Path}
    if encoded is None:
        return Any
    if isinstance(encoded, str):
        return plain[encoded]
    (kind, value), = encoded.items()
    if kind == "literal":
        return Literal[tuple(value)]
    parts = tuple(decode_type(part) for part in value)
    if kind == "union":
        return functools.reduce(operator.or_, parts)
    return {"list": list, "tuple": tuple, "dict": dict}[kind][parts if kind != "list" else parts[0]]


# --------------------------------------------------------------------------------------------- is it current
def signature_parts(path: Path) -> list[tuple[str | None, ast.AST]]:
    """What of a source file shapes fit's parser, as (the class it belongs to, or None at module level, the node):
    each class's bases and decorators, fields and `__init__` signature, and the CLI's PARSER_METHODS whole; the
    module-level assignments (type aliases, defaults, the CLI's settings); and the imports of the names these use."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parts: list[tuple[str | None, ast.AST]] = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            parts.append((None, node))
        elif isinstance(node, ast.ClassDef):
            parts.append((node.name, ast.Tuple(elts=[*node.bases, *node.decorator_list])))
            for item in node.body:
                if isinstance(item, (ast.Assign, ast.AnnAssign)) or (
                        isinstance(item, ast.FunctionDef) and item.name in PARSER_METHODS):
                    parts.append((node.name, item))
                elif isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    parts.append((node.name, item.args))
    used = {name.id for _, node in parts for name in ast.walk(node) if isinstance(name, ast.Name)}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias for alias in node.names if (alias.asname or alias.name).split(".")[0] in used]
            if names:
                where = {"module": node.module, "level": node.level} if isinstance(node, ast.ImportFrom) else {}
                parts.append((None, type(node)(names=names, **where)))
    return parts


def signature_text(path: Path) -> str:
    """`signature_parts` as `ast.dump`s (no line numbers): moving code or editing a method body leaves it as it is."""
    return "\n".join(f"{owner}: {ast.dump(node)}" for owner, node in signature_parts(path))


def signature_digest(path: Path) -> str:
    return hashlib.sha256(signature_text(path).encode()).hexdigest()


def versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in VERSIONED}


@cache
def current_record() -> dict | None:
    """FIELDS_FILE's record when it describes the parser fit would build here, else None."""
    if not FIELDS_FILE.is_file():
        return None
    record = json.loads(FIELDS_FILE.read_text())
    try:
        if record["versions"] != versions():
            return None
        if any(signature_digest(PACKAGE_ROOT / name) != digest for name, digest in record["sources"].items()):
            return None
    except (metadata.PackageNotFoundError, OSError):
        return None
    return record


# --------------------------------------------------------------------------------------------- the check
def fields_of(record: dict, subcommand: str) -> dict[str, dict]:
    """The recorded fields of a subcommand's parser: key -> {"type": ..., "default": ...}."""
    return {key: spec for key, spec in record["fields"].items()
            if subcommand in record["only_in"].get(key, record["commands"])}


def recorded_parser(record: dict, subcommand: str) -> tuple[ArgumentParser, Fields]:
    """A jsonargparse parser of the recorded fields, set up as the subcommand's own, and their Fields."""
    parser = ArgumentParser(exit_on_error=False, **record["parser"])
    parser.add_argument("--config", action=ActionConfigFile)
    fields = fields_of(record, subcommand)
    for key, spec in fields.items():
        parser.add_argument(f"--{key}", type=decode_type(spec["type"]), default=spec.get("default"))
    hints = {key: decode_type(spec["type"]) for key, spec in fields.items() if spec["type"] is not None}
    return parser, Fields(tuple(sorted(fields)), record["owners"], hints)


def _class_valued(record: dict) -> tuple[str, ...]:
    """Keys whose type the record does not spell out: a class given by name takes options of its own."""
    return tuple(key for key, spec in record["fields"].items() if spec["type"] is None)


def recordable_args(args: Sequence[str], opaque: Sequence[str]) -> list[str]:
    """The command line less the options the record cannot parse: those inside a class-valued field
    (`--trainer.callbacks+=X`, `--trainer.callbacks.step 5`), with their values."""
    out, rest = [], list(args)
    while rest:
        arg = rest.pop(0)
        name = arg.split("=", 1)[0]
        if any(name.startswith((f"--{key}.", f"--{key}+")) for key in opaque):
            if "=" not in arg and rest and not rest[0].startswith("--"):
                rest.pop(0)
            continue
        out.append(arg)
    return out


def quick_check(subcommand: str, args: Sequence[str]) -> Namespace | None:
    """`lit-resformer SUBCOMMAND ARGS` (fit, validate, test) parsed and checked as fit would before it imports
    Lightning: ValueError in one line for a config fit refuses, naming the field and what it takes
    (FileNotFoundError for a config file that is not there); the parsed config when it passes; None when this cannot
    decide (the record is not current, or the command line asks for help)."""
    words = expand_config_args([arg for arg in args if arg != ALLOW_ANY_CLASS_FLAG])  # FileNotFoundError, ValueError
    record = current_record()
    if record is None or subcommand not in record["commands"] or any(
            arg.split("=", 1)[0] in NOT_A_RUN for arg in words):
        return None
    parser, fields = recorded_parser(record, subcommand)
    try:
        cfg = parser.parse_args(recordable_args(words, _class_valued(record)))
    except ArgumentError as err:
        key = unknown_key(str(err))
        if key is None and wrong_value(str(err)) is None:
            return None  # not a mistake the record can name: fit's parser will
        if key is not None and key in fields.groups():
            return None  # a whole group given as a file or a value (`--trainer trainer.yaml`): fit's parser reads it
        raise ValueError(explain_parser_error(fields, str(err))) from None
    problem = field_checks.accelerator_problem(cfg.trainer.accelerator)
    if problem:
        raise ValueError(problem)
    ckpt = cfg.get("ckpt_path")
    if ckpt not in (None, "last", "best", "hpc") and not Path(ckpt).is_file():
        raise ValueError(f"--ckpt_path {ckpt} is missing")
    field_checks.check_experiment(cfg, gpus=field_checks.visible_gpus())
    if cfg.data.source == "local":  # the data module's own check of its files, which reads no corpus
        local_files(cfg.data.path, cfg.data.domain_field, cfg.data.encoding)
    return cfg
