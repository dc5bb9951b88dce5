"""Config files that compose: an experiment file names its pieces (configs/recipes, configs/data, configs/models),
each a partial config, under `compose`, paths relative to itself, and adds its own settings:

    compose: [../recipes/cpu.yaml, ../data/embedded.yaml, ../models/tiny.yaml]
    model:
      config: {residual: {target: v}}

`--config` of such a file means one `--config` per piece, in order, then one for its own settings: LightningCLI
merges several configs exactly so, later ones overriding earlier ones. A piece may compose others. The run's
config.yaml holds the whole resolved config.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml
from omegaconf import OmegaConf

COMPOSE = "compose"


def config_layers(path: str | Path, _within: tuple[Path, ...] = ()) -> list[Path | dict]:
    """The configs a config file stands for, in merge order: the pieces under its `compose` (each expanded the same
    way), then its own settings as a dict; a file without `compose` stands for itself."""
    path = Path(path).resolve()
    if path in _within:
        raise ValueError(f"{path} composes itself: {' -> '.join(str(p) for p in (*_within, path))}")
    config = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    if not isinstance(config, dict) or COMPOSE not in config:
        return [path]
    pieces = config.pop(COMPOSE)
    if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
        raise ValueError(f"{path}: {COMPOSE} must be a list of config files (relative to it), got {pieces!r}")
    layers: list[Path | dict] = []
    for piece in pieces:
        piece_path = path.parent / piece
        if not piece_path.is_file():
            raise ValueError(f"{path}: {COMPOSE} names {piece!r}, but {piece_path} does not exist")
        layers += config_layers(piece_path, (*_within, path))
    return layers + ([config] if config else [])


def load_experiment(*paths: str | Path) -> dict:
    """One dict holding what `fit --config P1 --config P2 ...` reads, pieces composed and interpolations resolved."""
    merged = OmegaConf.create({})
    for path in paths:
        for layer in config_layers(path):
            merged = OmegaConf.merge(merged, OmegaConf.load(layer) if isinstance(layer, Path) else layer)
    return OmegaConf.to_container(merged, resolve=True)


def expand_config_args(args: Sequence[str]) -> list[str]:
    """Command-line arguments with every `--config FILE` replaced by one `--config` per layer of the file.
    FileNotFoundError for a value that is neither a file nor a config written out as YAML."""
    out: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--config" and rest:
            value = rest.pop(0)
        elif arg.startswith("--config="):
            value = arg.split("=", 1)[1]
        else:
            out.append(arg)
            continue
        if Path(value).is_file():
            layers = config_layers(value)
        elif isinstance(yaml.safe_load(value), dict):  # a config given as YAML text, jsonargparse's own
            layers = [value]
        else:
            raise FileNotFoundError(f"--config {value}: no such file")
        for layer in layers:
            out += ["--config", yaml.safe_dump(layer, sort_keys=False) if isinstance(layer, dict) else str(layer)]
    return out


def config_name(args: Sequence[str]) -> str:
    """The stem of the last config file given on the command line ("default" for none): the run's default name."""
    files = [value for flag, value in zip(args, args[1:], strict=False) if flag == "--config"]
    files += [arg.split("=", 1)[1] for arg in args if arg.startswith("--config=")]
    files = [f for f in files if Path(f).is_file()]
    return Path(files[-1]).stem if files else "default"
