"""What makes a run what it is: the one definition of a run's identity, which the runner shares runs by, the board
counts a comparison once by, and the shared-config checks of the grids compare (tests/grids/test_shared_configs.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What a run is (run_identity): its resolved config less where it trains and where it writes.
# Where it trains (precision and strategy do change the numbers, so they are not here):
PLACEMENT = ("trainer.accelerator", "trainer.devices", "trainer.num_nodes")
# Where it writes: these keys at any depth (the run folder, the checkpoints' folder, a logger's folder).
OUTPUT_LOCATIONS = frozenset({"default_root_dir", "dirpath", "save_dir"})


def run_identity(resolved: Mapping[str, Any]) -> dict:
    """What makes a run what it is: its resolved config (every field with its value, defaults and seed included:
    `ConfigChecker.resolved`, or the config.yaml Lightning wrote) less where it trains (PLACEMENT) and where it
    writes (OUTPUT_LOCATIONS). Runs with equal identities train the same model on the same data in the same order, so
    a finished one stands for the others: the runner shares them (Grid.identity, Grid.same_run), the scoreboard
    counts their comparisons once (lit_resformer.verdicts.claims) and the grids that reuse another's runs are checked
    with it (tests/grids/test_shared_configs.py). A new dict; `resolved` is left as it is."""
    placement = {tuple(key.split(".")) for key in PLACEMENT}

    def strip(value: Any, path: tuple | None) -> Any:
        if isinstance(value, Mapping):
            return {k: strip(v, None if path is None else (*path, k)) for k, v in value.items()
                    if k not in OUTPUT_LOCATIONS and (path is None or (*path, k) not in placement)}
        if isinstance(value, list):
            return [strip(v, None) for v in value]  # PLACEMENT names sections' fields, never a list's items
        return value

    return strip(resolved, ())


def placement(resolved: dict) -> tuple:
    """Where a resolved config trains: its PLACEMENT values."""
    return tuple((resolved.get(key.split(".")[0]) or {}).get(key.split(".")[1]) for key in PLACEMENT)
