"""A config mistake in words: jsonargparse's multi-line errors as one line naming the field, the closest valid
fields for an unknown key, and what a field takes for a value of the wrong type.

The words come from a parser's `Fields` (its keys, the class each group of them belongs to, each key's type), which
fit's own parser gives (`Fields.of`) and its recorded copy gives before Lightning is imported
(lit_resformer.config.quick_check), so both say a mistake the same way. Nothing here imports Lightning."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonargparse import ActionConfigFile, ArgumentParser


def config_file_keys(parser: ArgumentParser) -> set[str]:
    """The keys that hold the paths of config files (`--config`), not config values."""
    return {a.dest for a in parser._actions if isinstance(a, ActionConfigFile)}


@dataclass(frozen=True)
class Fields:
    """What a config parser knows of its fields: every dotted key a config may set (the paths of config files
    aside), the class each group of keys is built from (group key -> class name) and the type of each key."""

    keys: tuple[str, ...]
    owners: Mapping[str, str]
    hints: Mapping[str, Any]

    @classmethod
    def of(cls, parser: ArgumentParser) -> Fields:
        keys = tuple(sorted(set(parser.get_defaults().keys()) - config_file_keys(parser)))
        owners = {key: group.group_class.__name__ for key, group in parser.groups.items()
                  if getattr(group, "group_class", None) is not None}
        hints = {a.dest: a._typehint for a in parser._actions if getattr(a, "_typehint", None) is not None}
        return cls(keys, owners, hints)

    def groups(self) -> set[str]:
        """Every dotted prefix of a key: the groups of fields (e.g. 'model', 'model.config')."""
        return {".".join(key.split(".")[:depth]) for key in self.keys for depth in range(1, key.count(".") + 1)}


def explain_parser_error(fields: Fields, message: str) -> str:
    """jsonargparse's (multi-line) error as one line: an unknown key with the closest fields, a value of the wrong
    type with what the field takes."""
    key = unknown_key(message)
    if key is not None:
        return f"unknown key '{key}': {unknown_field(fields, key) or 'not a field'}"
    wrong = wrong_value(message)
    if wrong:
        key, value = wrong
        hint = expected_type(fields, key)
        if hint:
            return f"{key} expects {hint}, got {value}"
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def unknown_key(message: str) -> str | None:
    """The key a jsonargparse error refuses as unknown, or None for another error."""
    unknown = re.search(r"unrecognized arguments: --?([\w.]+)|does not accept option '([\w.]+)'|"
                        r"Key '([\w.]+)' is not expected|Option '([\w.]+)' is not accepted", message)
    return next(group for group in unknown.groups() if group) if unknown else None


def wrong_value(message: str) -> tuple[str, str] | None:
    """(key, value as written) of a jsonargparse error refusing a value of the wrong type, or None."""
    wrong = re.match(r'Parser key "([\w.]+)":.*?(?:Got value|Given value): (.*)$', message, re.S)
    return (wrong.group(1), wrong.group(2).strip()) if wrong else None


def unknown_field(fields: Fields, key: str) -> str | None:
    """Why the dotted `key` is not a field (naming the class it would belong to and the closest fields), or None
    when it is one or lies inside one (e.g. a key of a mapping-valued field)."""
    if any(key == field or key.startswith(field + ".") for field in fields.keys):
        return None
    parts = key.split(".")
    groups = fields.groups()
    depth = max((d for d in range(1, len(parts)) if ".".join(parts[:d]) in groups), default=0)
    parent, name = ".".join(parts[:depth]), parts[depth]
    prefix = parent + "." if parent else ""
    siblings = sorted({f[len(prefix):].split(".")[0] for f in fields.keys if f.startswith(prefix)})
    owner = fields.owners.get(parent) or (f"'{parent}'" if parent else "the config")
    close = difflib.get_close_matches(name, siblings, n=3)
    return f"{owner} has no field '{name}'; " + (f"did you mean {close}?" if close else f"fields: {siblings}")


def expected_type(fields: Fields, key: str) -> str | None:
    """What the field `key` takes, in words (e.g. "one of ['none', 'v']"); None for a key that is no field."""
    hint = fields.hints.get(key)
    return None if hint is None else describe_type(hint)


def describe_type(hint: Any) -> str:
    """A type annotation in words, for error messages."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return f"one of {list(args)}"
    if origin in (typing.Union, types.UnionType):  # the choices of its Literals as one list, where the first is
        choices = [choice for a in args if typing.get_origin(a) is typing.Literal for choice in typing.get_args(a)]
        return " or ".join(dict.fromkeys(f"one of {choices}" if typing.get_origin(a) is typing.Literal
                                         else describe_type(a) for a in args))
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
