"""A config mistake in words: jsonargparse's multi-line errors as one line naming the field, the closest valid
fields for an unknown key, and what a field takes for a value of the wrong type."""

from __future__ import annotations

import difflib
import os
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from jsonargparse import ActionConfigFile
from lightning.pytorch.cli import LightningArgumentParser


class ConfigParser(LightningArgumentParser):
    """fit's parser. A mistake on the command line or in a config file is one line naming the field, with the
    closest valid ones for an unknown key, instead of the whole usage (~130 lines) followed by the error."""

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        sys.stderr.write(f"lit-resformer: error: {explain_parser_error(parser, message)}\n")
        sys.stderr.write(f"(`{parser.prog.replace(' [options]', '')} --help` lists every option)\n")
        self.exit(2)


def config_file_keys(parser: LightningArgumentParser) -> set[str]:
    """The keys that hold the paths of config files (`--config`), not config values."""
    return {a.dest for a in parser._actions if isinstance(a, ActionConfigFile)}


def config_fields(parser: LightningArgumentParser) -> list[str]:
    """Every dotted key a config may set (the paths of config files aside)."""
    return sorted(set(parser.get_defaults().keys()) - config_file_keys(parser))


def explain_parser_error(parser: LightningArgumentParser, message: str) -> str:
    """jsonargparse's (multi-line) error as one line: an unknown key with the closest fields, a value of the wrong
    type with what the field takes."""
    unknown = re.search(r"unrecognized arguments: --?([\w.]+)|does not accept option '([\w.]+)'|"
                        r"Key '([\w.]+)' is not expected", message)
    if unknown:
        key = next(group for group in unknown.groups() if group)
        return f"unknown key '{key}': {unknown_field(parser, config_fields(parser), key) or 'not a field'}"
    wrong = re.match(r'Parser key "([\w.]+)":.*?Got value: (.*)$', message, re.S)
    if wrong:
        key, value = wrong.groups()
        hint = expected_type(parser, key)
        if hint:
            return f"{key} expects {hint}, got {value.strip()}"
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def unknown_field(parser: LightningArgumentParser, fields: Sequence[str], key: str) -> str | None:
    """Why the dotted `key` is not a field (naming the class it would belong to and the closest fields), or None
    when it is one or lies inside one (e.g. a key of a mapping-valued field)."""
    if any(key == field or key.startswith(field + ".") for field in fields):
        return None
    parts = key.split(".")
    depth = max((d for d in range(1, len(parts)) if ".".join(parts[:d]) in parser.groups), default=0)
    parent, name = ".".join(parts[:depth]), parts[depth]
    prefix = parent + "." if parent else ""
    siblings = sorted({f[len(prefix):].split(".")[0] for f in fields if f.startswith(prefix)})
    group_class = getattr(parser.groups.get(parent), "group_class", None)
    owner = group_class.__name__ if group_class else f"'{parent}'" if parent else "the config"
    close = difflib.get_close_matches(name, siblings, n=3)
    return f"{owner} has no field '{name}'; " + (f"did you mean {close}?" if close else f"fields: {siblings}")


def expected_type(parser: LightningArgumentParser, key: str) -> str | None:
    """What the field `key` takes, in words (e.g. "one of ['none', 'v']"); None for a key that is no field."""
    action = next((a for a in parser._actions if a.dest == key), None)
    hint = getattr(action, "_typehint", None)
    return None if hint is None else describe_type(hint)



def describe_type(hint: Any) -> str:
    """A type annotation in words, for error messages."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return f"one of {list(args)}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(describe_type(a) for a in args))
    if hint is type(None):
        return "null"
    if hint is bool:
        return "true or false"
    if hint in (int, float):
        return "a number" + (" (integer)" if hint is int else "")
    if hint is str:
        return "a string"
    if hint in (list, tuple) or origin in (list, tuple, Sequence, typing.Sequence):
        return "a list"
    if hint is dict or origin in (dict, Mapping, typing.Mapping):
        return "a mapping"
    return getattr(hint, "__name__", str(hint))
