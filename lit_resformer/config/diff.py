"""What differs between two configs, field by field (dotted keys)."""

from __future__ import annotations

from typing import Any


def changed_fields(old: Any, new: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """{dotted key: (old value, new value)} for every leaf whose value differs between two configs, sorted by key;
    a key that only one side has is "<missing>" on the other."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for key in sorted(set(old) | set(new), key=str):
            out.update(changed_fields(old.get(key, "<missing>"), new.get(key, "<missing>"), f"{prefix}{key}."))
        return out
    return {} if old == new else {prefix.rstrip("."): (old, new)}


def config_differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two configs, e.g. ['trainer.max_steps: 300 -> 200']."""
    return [f"{key}: {a!r} -> {b!r}" for key, (a, b) in changed_fields(old, new, prefix).items()]
