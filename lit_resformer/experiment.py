"""An experiment config: how it composes, the LightningCLI that runs it (`lit-resformer fit|validate|test`) and
the checks it must pass.

Configs compose from pieces (configs/recipes, configs/data, configs/models), each a partial config. An experiment
file names its pieces under `compose`, paths relative to itself, and adds its own settings:

    compose: [../recipes/cpu.yaml, ../data/embedded.yaml, ../models/tiny.yaml]
    model:
      config: {residual: {target: v}}

`--config` of such a file means one `--config` per piece, in order, then one for its own settings: LightningCLI
merges several configs exactly so, later ones overriding earlier ones. A piece may compose others. The run's
config.yaml holds the whole resolved config.

`ConfigChecker` applies the same parser and the same checks to a config dict without training, building a Trainer
or reading data: the ablation grid validates its cells with it, so a cell is refused exactly when `fit` would
refuse it.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import types
import typing
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import ActionConfigFile, Namespace
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_warn
from omegaconf import OmegaConf
from tokenizers import Tokenizer

from .data import LMDataModule
from .data.tokenizer import TokenizerMismatch, load_tokenizer, parse_tokenizer_spec, tokenizer_fingerprint
from .lit_module import LitResFormer
from .model import ModelConfig
from .reporting import atomic_write
from .run_checkpoint import RunCheckpoint
from .run_dir import CSV_LOGS, TB_LOGS, RunDir, checkpoint_problem, read_checkpoint
from .trust import ALLOW_ANY_CLASS_FLAG, check_objects

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
    """Command-line arguments with every `--config FILE` replaced by one `--config` per layer of the file."""
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
        layers = config_layers(value) if Path(value).is_file() else [value]  # else: YAML text, jsonargparse's own
        for layer in layers:
            out += ["--config", yaml.safe_dump(layer, sort_keys=False) if isinstance(layer, dict) else str(layer)]
    return out


def config_name(args: Sequence[str]) -> str:
    """The stem of the last config file given on the command line ("default" for none): the run's default name."""
    files = [value for flag, value in zip(args, args[1:], strict=False) if flag == "--config"]
    files += [arg.split("=", 1)[1] for arg in args if arg.startswith("--config=")]
    files = [f for f in files if Path(f).is_file()]
    return Path(files[-1]).stem if files else "default"


class RunConfig(SaveConfigCallback):
    """Writes the resolved config of a training run as its config.yaml; a different config already there is an error.
    validate and test only read a run: they leave its config.yaml alone."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if not trainer.is_global_zero or stage != "fit":
            return
        path = RunDir(trainer.default_root_dir).config_file
        text = self.parser.dump(self.config, skip_none=False)
        if path.exists() and path.read_text() != text and self.config.get("ckpt_path") is None:
            raise RuntimeError(f"{path} holds a different run's config; resume it with --ckpt_path last or "
                               f"choose another --trainer.default_root_dir")
        atomic_write(path, text)


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


# How the CLI is built, for `fit` and for the checker alike. The training module configures its own optimizer
# (AdamW groups and the warmup-cosine schedule), so LightningCLI's --optimizer/--lr_scheduler are not offered.
CLI_SETTINGS = dict(
    parser_class=ConfigParser,
    save_config_callback=RunConfig, save_config_kwargs={"overwrite": True},
    trainer_defaults={"use_distributed_sampler": False, "log_every_n_steps": 1},
    auto_configure_optimizers=False,
)
PARSER_SETTINGS = {"parser_mode": "omegaconf"}


def world_size(trainer: dict[str, Any]) -> int:
    devices, nodes = trainer.get("devices", "auto"), int(trainer.get("num_nodes") or 1)
    if isinstance(devices, (list, tuple)):
        per_node = len(devices)
    elif str(devices).lstrip("-").isdigit() and int(devices) > 0:
        per_node = int(devices)
    else:  # "auto" or -1: every visible GPU, else one CPU process
        accelerator = trainer.get("accelerator", "auto")
        gpus = torch.cuda.device_count() if accelerator in ("auto", "gpu", "cuda") else 0
        per_node = gpus or 1
    return per_node * nodes


def model_config(cfg: Namespace) -> ModelConfig:
    """The run's ModelConfig from a parsed config. vocab_size is linked from the tokenizer when the classes are
    built, so before that any value stands in for it."""
    fields = cfg.model.config
    fields = fields.as_dict() if hasattr(fields, "as_dict") else dict(vars(fields))
    try:
        return ModelConfig(**{**fields, "vocab_size": fields.get("vocab_size") or 1})
    except ValueError as err:
        raise ValueError(f"invalid model config (model.config): {err}") from None


def check_experiment(cfg: Namespace) -> None:
    """Checks across fields that the parser cannot express; derives trainer.accumulate_grad_batches from
    global_batch_tokens."""
    preview = model_config(cfg)
    seq_len = cfg.data.seq_len
    if seq_len > preview.max_seq_len:
        raise ValueError(f"data.seq_len={seq_len} exceeds model.config.max_seq_len={preview.max_seq_len}; "
                         f"lower data.seq_len or raise model.config.max_seq_len")
    tokens = cfg.global_batch_tokens
    if tokens is not None:
        per_step = cfg.data.micro_batch_size * seq_len * world_size(dict(vars(cfg.trainer)))
        if tokens % per_step:
            raise ValueError(f"global_batch_tokens={tokens} is not divisible by data.micro_batch_size x "
                             f"data.seq_len x devices = {per_step}")
        cfg.trainer.accumulate_grad_batches = tokens // per_step


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


# Data settings a run may change when it resumes: they decide how fast or where data is read and how much of the
# validation split is scored, not which token stream it trains on.
RESUMABLE_DATA_FIELDS = ("num_workers", "cache_dir", "val_sequences_per_domain")


def check_checkpoint_matches(cfg: Namespace, ckpt_path: str | Path, resuming: bool) -> None:
    """Refuse a checkpoint made with another model, tokenizer or (when `resuming` training) another token stream
    than `cfg` describes, naming every differing field; nothing is built or read but the checkpoint's index."""
    ckpt = read_checkpoint(ckpt_path, mmap=True)
    saved_model = (ckpt.get("hyper_parameters") or {}).get("config")
    differences = []
    if isinstance(saved_model, dict):
        ignore = {"vocab_size"}  # linked from the tokenizer, compared through it below
        saved = {k: v for k, v in ModelConfig(**saved_model).to_dict().items() if k not in ignore}
        wanted = {k: v for k, v in model_config(cfg).to_dict().items() if k not in ignore}
        differences += config_differences(saved, wanted, "model.config.")
    saved_data = ckpt.get("datamodule_hyper_parameters")
    if resuming and isinstance(saved_data, dict):
        wanted = cfg.data.as_dict()
        stream = [k for k in saved_data if k in wanted and k not in RESUMABLE_DATA_FIELDS]
        differences += config_differences({k: saved_data[k] for k in stream}, {k: wanted[k] for k in stream}, "data.")
    saved_tokenizer = next((v["tokenizer_json"] for v in ckpt.values() if isinstance(v, dict) and "tokenizer_json" in v),
                           None)
    kind, value = parse_tokenizer_spec(cfg.data.tokenizer)
    if saved_tokenizer is not None and kind == "file":  # a hub or trained tokenizer is compared when data is set up
        saved_hash = tokenizer_fingerprint(Tokenizer.from_str(saved_tokenizer))
        file_hash = tokenizer_fingerprint(load_tokenizer(kind, value))
        if saved_hash != file_hash:
            differences.append(f"tokenizer hash: {saved_hash} -> {file_hash} ({value})")
    if differences:
        action = "resume from" if resuming else "use"
        raise ValueError(f"cannot {action} {ckpt_path}: it was made with another config ({'; '.join(differences)}); "
                         f"use the checkpoint's settings, or train a new run in another --trainer.default_root_dir")


def check_classes(cfg: Namespace) -> None:
    """The data module's and the training module's own argument checks, without data: the data module reads no
    corpus in its constructor, and the model is built on the meta device (no memory)."""
    LMDataModule(**cfg.data.as_dict())
    with torch.device("meta"):
        LitResFormer(**{**cfg.model.as_dict(), "config": model_config(cfg).to_dict()})


class ResFormerCLI(LightningCLI):
    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """fit, validate and test: the module has no prediction step (generation is `Transformer.generate`)."""
        return {name: args for name, args in LightningCLI.subcommands().items() if name != "predict"}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--global_batch_tokens", type=int | None, default=None,
                            help="tokens per optimizer step over all devices; sets trainer.accumulate_grad_batches")
        parser.add_lightning_class_args(RunCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.filename": "step{step:06d}", "checkpoint.auto_insert_metric_name": False,
                             "checkpoint.enable_version_counter": False,
                             "checkpoint.every_n_train_steps": 100, "checkpoint.save_last": True,
                             "checkpoint.save_top_k": 1, "checkpoint.monitor": None})
        parser.link_arguments("data.vocab_size", "model.config.vocab_size", apply_on="instantiate")

    def parse_arguments(self, parser, args) -> None:
        try:
            if isinstance(args, (dict, Namespace)):
                self.config = parser.parse_object(args)
            else:
                args = sys.argv[1:] if args is None else list(args)
                # a command-line flag only: a config file cannot lift the limit on what it constructs
                self.allow_any_class = ALLOW_ANY_CLASS_FLAG in args
                args = [arg for arg in args if arg != ALLOW_ANY_CLASS_FLAG]
                self.config_name = config_name(args)
                self.config = parser.parse_args(expand_config_args(args))
            self._check_arguments()
        except ValueError as err:  # a config mistake: one clear line, before anything is written
            parser.exit(2, f"lit-resformer: error: {err}\n")

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except ValueError as err:  # bad data or model settings found while building them
            self.parser.exit(2, f"lit-resformer: error: {err}\n")

    def _run_subcommand(self, subcommand: str) -> None:
        try:
            super()._run_subcommand(subcommand)
        except TokenizerMismatch as err:  # found when the checkpoint is restored, before any step
            self.parser.exit(2, f"lit-resformer: error: {err}\n")

    def _check_arguments(self) -> None:
        sub = self.config.get("subcommand")
        if sub is None:
            return
        cfg = self.config[sub]
        if not getattr(self, "allow_any_class", False):
            check_objects(cfg, skip=frozenset(config_file_keys(self._subcommand_parsers[sub])))
        if not cfg.trainer.default_root_dir:
            cfg.trainer.default_root_dir = str(Path("runs") / getattr(self, "config_name", "default"))
        run = RunDir(cfg.trainer.default_root_dir)
        ckpt = cfg.get("ckpt_path")
        if ckpt == "last":
            self.resume_point = run.resume_point()
            ckpt = self.resume_point.path if self.resume_point else None
        elif ckpt is not None:
            problem = checkpoint_problem(ckpt)
            if problem:
                raise ValueError(f"--ckpt_path {ckpt} is {problem}")
        elif sub == "fit" and run.has_training_output():
            raise ValueError(f"{run.path} already holds a run; resume it with --ckpt_path last, or choose another "
                             f"--trainer.default_root_dir")
        check_experiment(cfg)
        if ckpt is not None:
            check_checkpoint_matches(cfg, ckpt, resuming=sub == "fit")

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand]
        run = RunDir(cfg.trainer.default_root_dir)
        resume = getattr(self, "resume_point", None)
        if resume is not None and resume.fallback_reason:
            rank_zero_warn(f"resuming from {resume.path}: {resume.fallback_reason}")
            cfg.ckpt_path = str(resume.path)
        if self.subcommand == "fit" and cfg.ckpt_path is not None:
            # a resumed run's checkpoint folder holds its earlier checkpoints by design
            warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
        cfg.trainer.logger = run_loggers(cfg.trainer.logger, run)
        if cfg.checkpoint.dirpath is None:
            cfg.checkpoint.dirpath = str(run.checkpoints_dir)


def run_loggers(chosen: Any, run: RunDir) -> Any:
    """The loggers of a run: TensorBoard and CSV by default; a `trainer.logger` of the config (one or a list, any
    Lightning logger: W&B, MLflow, ...) replaces TensorBoard, and the run's CSV logger is added unless the list has
    one (a resolved config.yaml does), since the run's metrics file is what summaries, reports and resumes read.
    `trainer.logger: false` logs nothing."""
    if chosen is False:
        return False
    csv = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(run.path), "name": CSV_LOGS}}
    if chosen in (None, True):
        return [csv, {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                      "init_args": {"save_dir": str(run.path), "name": TB_LOGS}}]
    chosen = list(chosen) if isinstance(chosen, (list, tuple)) else [chosen]
    return chosen if any(_class_name(logger) == "CSVLogger" for logger in chosen) else [csv, *chosen]


def _class_name(spec: Any) -> str:
    """The class name of a `{class_path: ..., init_args: ...}` entry, or of an object."""
    return str(spec.get("class_path")).rsplit(".", 1)[-1] if hasattr(spec, "get") else type(spec).__name__


def run_cli(args: list[str] | None = None) -> None:
    """`lit-resformer fit|validate|test ...` (args None: sys.argv)."""
    ResFormerCLI(LitResFormer, LMDataModule, args=args, **CLI_SETTINGS, parser_kwargs=PARSER_SETTINGS)


class _ParserOnly(ResFormerCLI):
    """Builds the CLI's parser, then stops: no parsing, seeding, or classes."""

    def parse_arguments(self, parser, args) -> None:
        self.config = Namespace(seed_everything=False)

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
        self.fields = config_fields(self.parser)  # every key a config may set
        self.allow_any_class = allow_any_class

    def check(self, config: Mapping[str, Any]) -> Namespace:
        """The parsed config, or the first problem: argparse.ArgumentError for a key the parser does not know or a
        value of the wrong type; ValueError for a check of `fit` or of a constructor, or for an object the config
        may not construct (`lit_resformer.trust`)."""
        cfg = self.parser.parse_object(dict(config))
        if not self.allow_any_class:
            check_objects(cfg, skip=frozenset(config_file_keys(self.parser)))
        check_experiment(cfg)
        check_classes(cfg)
        return cfg

    def resolved(self, config: Mapping[str, Any]) -> dict:
        """Every field of a valid config with its value, defaults included: equal for configs that run the same."""
        return yaml.safe_load(self.parser.dump(self.check(config), skip_none=False))

    def unknown_field(self, key: str) -> str | None:
        """Why the dotted `key` is not a field, or None (see `unknown_field`)."""
        return unknown_field(self.parser, self.fields, key)

    def expected(self, key: str) -> str | None:
        """What the field `key` takes, in words; None for a key that is no field."""
        return expected_type(self.parser, key)


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
