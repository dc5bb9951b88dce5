"""What the cells of a grid change relative to its base experiment, as the dry run and the report show it."""

from __future__ import annotations

import json
from typing import Any


def common_changes(changes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Of {cell: {key: change}}, the changes that every cell makes alike (the grid's own overrides, typically)."""
    per_cell = list(changes.values())
    if len(per_cell) < 2:
        return {}
    return {key: change for key, change in per_cell[0].items() if all(c.get(key) == change for c in per_cell[1:])}


def show_value(value: Any) -> str:
    """A config value as JSON (strings quoted, null, true), so that "none" and null read differently."""
    return json.dumps(value, default=str)


def describe_changes(changes: dict[str, dict[str, tuple]]) -> str:
    """What each cell changes relative to the base experiment, one field a line, those of every cell listed once
    (the dry run's listing)."""
    common = common_changes(changes)
    lines = ["what each cell changes relative to the base experiment (base -> cell, defaults filled in):"]

    def show(fields: dict[str, tuple]) -> list[str]:
        return [f"      {key}: {show_value(before)} -> {show_value(after)}" for key, (before, after) in fields.items()]

    if common:
        lines += ["  every cell:", *show(common)]
    for cell, fields in changes.items():
        own = {key: change for key, change in fields.items() if key not in common}
        lines += [f"  {cell}:" + ("" if own else " nothing else" if common else " nothing (the base itself)"), *show(own)]
    return "\n".join(lines)
