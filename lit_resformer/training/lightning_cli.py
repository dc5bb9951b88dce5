"""`lit-resformer fit|validate|test`: the LightningCLI that trains and scores one run, in one run directory
(`lit_resformer.runs.run_dir`), every config problem reported in one line before anything is written there."""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.warnings import PossibleUserWarning

from lit_resformer.config.files import config_name, expand_config_args
from lit_resformer.config.messages import Fields, config_file_keys, explain_parser_error
from lit_resformer.config.trust import ALLOW_ANY_CLASS_FLAG, check_objects
from lit_resformer.data import LMDataModule
from lit_resformer.data.tokenizer import TokenizerMismatch
from lit_resformer.runs.checkpoint_reading import checkpoint_problem
from lit_resformer.runs.run_dir import CSV_LOGS, TB_LOGS, RunDir
from lit_resformer.training.checkpoint_saving import InterruptCheckpoint, RunCheckpoint
from lit_resformer.training.config_rules import check_checkpoint_matches, check_experiment
from lit_resformer.training.module import LitResFormer
from lit_resformer.writing import atomic_write


class ConfigParser(LightningArgumentParser):
    """fit's parser. A mistake on the command line or in a config file is one line naming the field, with the
    closest valid ones for an unknown key, instead of the whole usage (~130 lines) followed by the error."""

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        command = parser.prog.replace(" [options]", "")  # "lit-resformer fit"
        self.exit(2, f"{command}: error: {explain_parser_error(Fields.of(parser), message)}\n")


class PlainProgress(ProgressBar):
    """Lightning's progress bar where the output is no terminal (a grid run's logs/stdout.log, a pipe): a plain line
    at every twentieth of the steps to train, where a bar would be redrawn in place with carriage returns and escape
    codes (~200 KB of them in a run's log)."""

    LINES = 20

    def __init__(self) -> None:
        super().__init__()
        self._enabled = True
        self._start: tuple[float, int] | None = None  # (clock, step) when training started

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer, pl_module) -> None:
        self._start = (time.monotonic(), trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        step, total = trainer.global_step, trainer.max_steps
        every = max(1, math.ceil(total / self.LINES)) if total and total > 0 else 100
        if not self._enabled or self._start is None or step == self._start[1] or step % every:
            return
        if (batch_idx + 1) % trainer.accumulate_grad_batches:  # the step's later micro-batches see it too
            return
        seconds, start_step = time.monotonic() - self._start[0], self._start[1]
        loss = trainer.callback_metrics.get("train/loss")
        self.print(f"step {step}{f'/{total}' if total and total > 0 else ''}"
                   + (f"  train/loss {loss.item():.4f}" if loss is not None else "")
                   + f"  {(step - start_step) / seconds:.2f} steps/s", flush=True)


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


# How the CLI is built, for `fit` and for the checker alike. The training module configures its own optimizer
# (AdamW groups and the warmup-cosine schedule), so LightningCLI's --optimizer/--lr_scheduler are not offered.
CLI_SETTINGS = dict(
    parser_class=ConfigParser,
    save_config_callback=RunConfig, save_config_kwargs={"overwrite": True},
    trainer_defaults={"use_distributed_sampler": False, "log_every_n_steps": 1},
    auto_configure_optimizers=False,
)
# options are taken only as written: argparse would read `--trainer.max_step` as `--trainer.max_steps`
# (a subcommand's parser is named "lit-resformer fit", which every refusal starts with)
PARSER_SETTINGS = {"prog": "lit-resformer", "parser_mode": "omegaconf", "allow_abbrev": False}


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
            self.refuse(err)

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except ValueError as err:  # bad data or model settings found while building them
            self.refuse(err)
        except MisconfigurationException as err:  # a trainer setting Lightning refuses (its own words name it)
            self.refuse(f"the trainer's settings: {err}")

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Trainer:
        if self.subcommand == "fit":  # nothing trained is lost to Ctrl-C or an error
            callbacks = [*callbacks, InterruptCheckpoint(self.config.fit.checkpoint.dirpath)]
        chosen = [*(config.get("callbacks") or []), *callbacks]
        if (config.get("enable_progress_bar") is not False and not sys.stdout.isatty()
                and not any(isinstance(callback, ProgressBar) for callback in chosen)):
            callbacks = [*callbacks, PlainProgress()]  # Lightning's default bar, drawn for a terminal
        return super()._instantiate_trainer(config, callbacks)

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        """`--ckpt_path last` as RunDir.resume_point resolved it (Lightning's own search would pass over a damaged
        last.ckpt, and say that no checkpoint is a misconfiguration of ModelCheckpoint)."""
        kwargs = super()._prepare_subcommand_kwargs(subcommand)
        if kwargs.get("ckpt_path") == "last":
            resume = getattr(self, "resume_point", None)
            kwargs["ckpt_path"] = str(resume.path) if resume else None
        return kwargs

    def before_fit(self) -> None:
        if self.trainer.is_global_zero:
            resume = getattr(self, "resume_point", None)
            ckpt = resume.path if resume else self.config.fit.ckpt_path
            start = ("no checkpoint yet, starting at step 0" if ckpt == "last" else
                     f"resuming from {ckpt}" if ckpt else "starting at step 0")
            print(f"run directory: {self.trainer.default_root_dir} ({start})", flush=True)

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            run = RunDir(self.trainer.default_root_dir)
            saved = f"checkpoint: {run.last_checkpoint}" if run.last_checkpoint.is_file() else "no checkpoint saved"
            print(f"run directory: {run.path} (trained to step {self.trainer.global_step}); {saved}", flush=True)

    def _run_subcommand(self, subcommand: str) -> None:
        try:
            super()._run_subcommand(subcommand)
        except TokenizerMismatch as err:  # found when the checkpoint is restored, before any step
            self.refuse(err)

    def refuse(self, problem: object) -> None:
        """A config fit cannot run: one line on stderr naming the command, exit status 2."""
        command = self.config.get("subcommand") if isinstance(getattr(self, "config", None), Namespace) else None
        self.parser.exit(2, f"{self.parser.prog}{f' {command}' if command else ''}: error: {problem}\n")

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
            if ckpt is None and sub != "fit":
                raise ValueError(f"--ckpt_path last: {run.checkpoints_dir} holds no checkpoint to {sub}")
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


# What third parties print into every run's output that says nothing about it: (message, category) of the warnings
# and the start of Lightning's info lines, each silenced by itself.
THIRD_PARTY_WARNINGS = (
    # Lightning: num_workers 0 is the data module's choice (its data is packed in memory, data.num_workers)
    (r"The '\w+' does not have many workers", PossibleUserWarning),
    # torch's deprecation of its pytree LeafSpec, which Lightning's own pytree code constructs
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
    # torch's deprecation of torch.set_vital, which torchdata's StatefulDataLoader calls
    (r"'set_vital' is deprecated", UserWarning),
)
# Lightning's hint where `srun` is on the PATH: silenced outside a Slurm job (a login node, a workstation with Slurm
# installed; the grid's Slurm executor runs its trainer as a plain process, lit_resformer/execution/jobs.py), kept
# inside one, where a multi-process run started without srun would hang.
SRUN_HINT = (r"The `srun` command is available on your system but is not used", PossibleUserWarning)
THIRD_PARTY_INFO = ("💡 Tip: For seamless cloud logging",)  # Lightning's advertisement of its cloud logger


class _ThirdPartyInfo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(THIRD_PARTY_INFO)


def quiet_third_parties() -> None:
    """Silence THIRD_PARTY_WARNINGS, THIRD_PARTY_INFO and, outside a Slurm job, SRUN_HINT, each by its words; every
    other warning still shows."""
    outside_slurm = "SLURM_JOB_ID" not in os.environ
    for message, category in (*THIRD_PARTY_WARNINGS, *([SRUN_HINT] if outside_slurm else [])):
        warnings.filterwarnings("ignore", message=message, category=category)
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _ThirdPartyInfo) for f in rank_zero.filters):
        rank_zero.addFilter(_ThirdPartyInfo())


def run_cli(args: list[str] | None = None) -> None:
    """`lit-resformer fit|validate|test ...` (args None: sys.argv)."""
    quiet_third_parties()
    ResFormerCLI(LitResFormer, LMDataModule, args=args, **CLI_SETTINGS, parser_kwargs=PARSER_SETTINGS)
