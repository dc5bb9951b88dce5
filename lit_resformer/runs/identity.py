"""What makes a run what it is: the one definition of a run's identity, which the runner shares runs by, the board
counts a comparison once by, and the shared-config checks of the grids compare (tests/grids/test_shared_configs.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    counts their comparisons once (lit_resformer.verdicts.scoreboard_rows) and the grids that reuse another's runs are checked
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


class Twins:
    """Finds, for a run not started yet, the same run trained elsewhere: a finished run of another grid in the same
    runs folder (`elsewhere`: (its config as written, its run)), or an earlier run of this grid, whose config has the
    same identity (`identify`: a config's run identity as one string, None for a config that no longer validates;
    Grid.identity, which resolves each config once). Identical configs are matched as written; others are
    identified, and only against candidates of the same seed."""

    def __init__(self, elsewhere: list[tuple[dict, Any]], identify: Callable[[dict], str | None]):
        self.identify = identify
        self._elsewhere: dict[int, list[tuple[dict, Any]]] = {}  # seed -> finished runs of other grids
        for config, trained in elsewhere:
            self._elsewhere.setdefault(config.get("seed_everything"), []).append((config, trained))
        self._in_grid: dict[str, Any] = {}  # identity -> the first run of this grid with it

    def register(self, config: dict, run: Any) -> None:
        """A run of the grid that exists already (trained here, or through a link): later twins are linked to it."""
        identity = self.identify(config)
        if identity is not None:
            self._in_grid.setdefault(identity, run)

    def find(self, config: dict, run: Any) -> Any | None:
        """The run to share the not yet started run (its `config`, its folder `run`) with; None: train it there."""
        identity = self.identify(config)
        if identity is None:
            return None
        if identity in self._in_grid:
            return self._in_grid[identity]
        candidates = self._elsewhere.get(config.get("seed_everything"), [])
        shared = next((trained for other, trained in candidates if other == config), None)
        if shared is None:
            shared = next((trained for other, trained in candidates if self.identify(other) == identity), None)
        self._in_grid[identity] = shared or run
        return shared
