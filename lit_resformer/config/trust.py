"""What a config may construct: configs and grids are data, so the classes they name (`class_path`) are limited to an
allow-list, and no function or other callable may be named at all.

jsonargparse turns any importable dotted name in a config into an object (a `class_path` into a class it will
instantiate, a string given for a callable parameter into that callable), so without a limit a config such as

    trainer:
      callbacks:
        - class_path: lightning.pytorch.callbacks.LambdaCallback
          init_args: {on_fit_start: {class_path: submitit.helpers.CommandFunction, init_args: {command: [sh, -c, ...]}}}

runs a shell command when training starts. `check_objects` walks a parsed config before anything is instantiated and
refuses every class outside `ALLOWED_PREFIXES` and every callable that is not a class. A user who trusts a file lifts
the limit with the command-line flag `ALLOW_ANY_CLASS_FLAG` (never a config key, which the file itself could set).
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

ALLOW_ANY_CLASS_FLAG = "--allow-any-class"
# The project's own classes; Lightning's callbacks, loggers, strategies, profilers, accelerators and plugins (the
# cluster environments and precision/IO plugins live in lightning.fabric); torch's optimizers and LR schedulers.
ALLOWED_PREFIXES = (
    "lit_resformer.",
    "lightning.pytorch.callbacks.",
    "lightning.pytorch.loggers.",
    "lightning.pytorch.strategies.",
    "lightning.pytorch.profilers.",
    "lightning.pytorch.accelerators.",
    "lightning.pytorch.plugins.",
    "lightning.fabric.plugins.",
    "lightning.fabric.accelerators.",
    "torch.optim.",
)
PLAIN_DATA = (str, int, float, bool, type(None), PurePath)


class DisallowedObject(ValueError):
    """A config names a class outside the allow-list, or a callable."""


def import_path(obj: Any) -> str:
    return f"{getattr(obj, '__module__', None) or '?'}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def allowed(class_path: str) -> bool:
    return class_path.startswith(ALLOWED_PREFIXES)


def check_objects(config: Any, key: str = "", skip: frozenset[str] = frozenset()) -> None:
    """Raise DisallowedObject naming the first key of a parsed config (jsonargparse Namespace, dicts and lists of
    them) that names a class outside ALLOWED_PREFIXES, or holds a callable that is not such a class. `skip` holds
    top-level keys that are not config values (e.g. the paths of the config files themselves)."""
    if isinstance(config, PLAIN_DATA):
        return
    if isinstance(config, (list, tuple)):
        for index, item in enumerate(config):
            check_objects(item, f"{key}[{index}]")
        return
    items = _mapping_items(config)
    if items is not None:
        class_path = items.get("class_path")
        if isinstance(class_path, str) and not allowed(class_path):
            raise _refusal(f"{key}.class_path" if key else "class_path", f"class {class_path} is not allowed")
        for name, value in items.items():
            if not key and name in skip:
                continue
            check_objects(value, f"{key}.{name}" if key else str(name))
        return
    if inspect.isclass(config):
        if not allowed(import_path(config)):
            raise _refusal(key, f"class {import_path(config)} is not allowed")
    elif callable(config) or inspect.ismodule(config):
        raise _refusal(key, f"{import_path(config)} is a {'module' if inspect.ismodule(config) else 'callable'}, "
                            f"not plain data or a class")


def _mapping_items(config: Any) -> dict | None:
    if isinstance(config, Mapping):
        return dict(config)
    if isinstance(config, argparse.Namespace):  # jsonargparse's Namespace is one
        return dict(vars(config))
    return None


def _refusal(key: str, what: str) -> DisallowedObject:
    return DisallowedObject(
        f"{key}: {what}; a config may construct only classes under {list(ALLOWED_PREFIXES)} "
        f"(pass {ALLOW_ANY_CLASS_FLAG} on the command line to lift this for a file you trust)"
    )
