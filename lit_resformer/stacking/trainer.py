"""`lit-resformer fit-stacked`: the runs of one stack trained in one process, each as `lit-resformer fit` trains it.

Every run is set up by `fit`'s own command line (`ResFormerCLI`: the same parsing, checks, resume point, seeding and
instantiation in the same order, so the run starts from the solo run's initialisation), its data built at once
under its own seed (so its loader draws the solo run's order), and it keeps its own Lightning trainer as its
bookkeeper: wired to its module, data module, optimizer and scheduler as `Trainer.fit` wires them, the trainer's
loggers write the run's metrics, its checkpoint callback writes its checkpoints through Lightning's own
`dump_checkpoint`, its throughput monitor times it and its progress counters say where it is. The callbacks' and
the module's hooks are called where Lightning's fit loop calls them; `RunStack` takes the step for all runs.

What the loop replays of Lightning's is what a stack admits (rules.stack_problem): one device, one micro-batch a
step, validation every `val_check_interval` steps, training within one epoch of the data. A run's directory ends
up as the solo run's would: config.yaml, checkpoints (which `fit --ckpt_path last` resumes alone, and this command
resumes stacked), csv/ and tb/ logs, corpus.json. A run whose loss turns non-finite is recorded as diverged (its
divergence.json) and leaves the stack's bookkeeping; the others go on.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from lightning.pytorch.loggers.utilities import _log_hyperparams
from lightning.pytorch.trainer.states import RunningStage, TrainerFn, TrainerStatus
from lightning.pytorch.utilities.combined_loader import CombinedLoader

from lit_resformer.config.files import load_experiment
from lit_resformer.data import LMDataModule
from lit_resformer.options import OptionParser
from lit_resformer.runs.checkpoint_reading import read_checkpoint
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.stacking.engine import GraphedStep, RunStack
from lit_resformer.stacking.rules import StackError, check_stack, compute_dtype
from lit_resformer.training.checkpoint_saving import AtomicCheckpointIO, RunCheckpoint
from lit_resformer.training.config_checker import ConfigChecker
from lit_resformer.training.lightning_cli import CLI_SETTINGS, PARSER_SETTINGS, ResFormerCLI, RunConfig
from lit_resformer.training.module import LitResFormer, TrainingThroughput

GRAPH_CHOICES = ("auto", "on", "off")


@dataclass(frozen=True)
class RunSpec:
    """One run of a stack: the config `fit --config` would read, and the run's directory."""

    config: Path
    root: Path

    @property
    def name(self) -> str:
        return str(self.root)


class _PreparedCLI(ResFormerCLI):
    """`lit-resformer fit` up to where it would train: parsed, checked, seeded and instantiated."""

    def _run_subcommand(self, subcommand: str) -> None:
        pass


class StackCheckpointIO(AtomicCheckpointIO):
    """Writes a stacked run's checkpoint in the solo run's form: its weights copied out of the stack's storage (a
    view saved as it is would carry every run's weights), its learning rates as numbers and its optimizer not
    `capturable` (a CUDA graph keeps them as device tensors), as `fit` alone writes them."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        checkpoint = {**checkpoint, "state_dict": {k: v.clone() for k, v in checkpoint["state_dict"].items()}}
        for state in checkpoint.get("optimizer_states", []):
            for group in state["param_groups"]:
                group.update(lr=float(group["lr"]), capturable=False)
        for schedule in checkpoint.get("lr_schedulers", []):
            schedule["_last_lr"] = [float(rate) for rate in schedule["_last_lr"]]
        super().save_checkpoint(checkpoint, path, storage_options)


def _only(callbacks: list, kind: type):
    found = [cb for cb in callbacks if isinstance(cb, kind)]
    if len(found) != 1:
        raise StackError(f"a stacked run needs exactly one {kind.__name__} callback, found {len(found)}")
    return found[0]


class StackedRun:
    """One run of a stack: its module, data module and Lightning trainer as `fit` builds them, its data loader, and
    the trainer wired to them as `Trainer.fit` wires it, without running the trainer's loop."""

    def __init__(self, spec: RunSpec, resume: bool):
        args = ["fit", "--config", str(spec.config), "--trainer.default_root_dir", str(spec.root)]
        cli = _PreparedCLI(LitResFormer, LMDataModule, args=[*args, *(["--ckpt_path", "last"] if resume else [])],
                           **CLI_SETTINGS, parser_kwargs=PARSER_SETTINGS)
        self.spec, self.run_dir = spec, RunDir(spec.root)
        self.module: LitResFormer = cli.model
        self.data: LMDataModule = cli.datamodule
        self.trainer = cli.trainer
        path = cli.config["fit"].get("ckpt_path")
        point = getattr(cli, "resume_point", None)
        self.checkpoint: Path | None = (point.path if point else None) if path == "last" else path and Path(path)
        self.alive = True  # False once it diverged
        # its data now, while its seed is the process's: the loader takes the run's training order from it
        self.data.prepare_data()
        self.data.setup("fit")
        self.loader = self.data.train_dataloader()
        self.saving_config = _only(self.trainer.callbacks, RunConfig)
        self.checkpointing = _only(self.trainer.callbacks, RunCheckpoint)
        trainer, module = self.trainer, self.module
        trainer.strategy.connect(module)
        module.trainer = trainer
        trainer._data_connector.attach_datamodule(module, datamodule=self.data)
        trainer.state.fn, trainer.state.status = TrainerFn.FITTING, TrainerStatus.RUNNING
        trainer.state.stage = RunningStage.TRAINING
        trainer.fit_loop._combined_loader = CombinedLoader(self.loader, "max_size_cycle")
        self.throughput = _only(module.configure_callbacks(), TrainingThroughput)

    @property
    def steps_per_epoch(self) -> int:
        return len(self.loader)

    def checkpoint_step(self) -> int:
        """The optimizer step its checkpoint was saved at (0 without one)."""
        return int(read_checkpoint(self.checkpoint, mmap=True)["global_step"]) if self.checkpoint else 0

    # ------------------------------------------------------------------ setup, as Trainer._run orders it
    def set_up(self) -> None:
        """The setup hooks (config.yaml written, checkpoint folder and throughput set up), the module's setup, and the
        checkpoint's model, data and callback states restored; the model on its device."""
        trainer, module = self.trainer, self.module
        trainer.strategy.setup_environment()
        for callback in (self.saving_config, self.checkpointing, self.throughput):
            callback.setup(trainer, module, "fit")
        module.setup("fit")
        module.configure_model()
        if self.checkpoint is not None:
            connector = trainer._checkpoint_connector
            connector.resume_start(self.checkpoint)
            connector.restore_datamodule()
            connector.restore_model()
            connector.restore_callbacks()
        trainer.strategy.model_to_device()

    def set_up_training(self, graphed: bool) -> None:
        """Its optimizer and schedule (`configure_optimizers`, through the strategy), restored from its checkpoint;
        its checkpoints written in the solo form; its hyper-parameters logged."""
        trainer = self.trainer
        trainer.strategy.setup(trainer)
        trainer.strategy.checkpoint_io = StackCheckpointIO()
        _log_hyperparams(trainer)
        if self.checkpoint is not None:
            connector = trainer._checkpoint_connector
            connector.restore_precision_plugin_state()
            connector.restore_optimizers_and_schedulers()
            loader_states = connector._loaded_checkpoint["loops"]["fit_loop"]["state_dict"].get("combined_loader")
            if loader_states:
                self.loader.load_state_dict(loader_states[0])
            connector.resume_end()
        if graphed:
            _capturable(self.optimizer, trainer.strategy.root_device)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.trainer.optimizers[0]

    @property
    def scheduler(self):
        return self.trainer.lr_scheduler_configs[0].scheduler

    # ------------------------------------------------------------------ the fit loop's progress, as Lightning counts it
    def epoch_started(self) -> None:
        self.trainer.fit_loop.epoch_progress.increment_ready()
        self.trainer.fit_loop.epoch_progress.increment_started()
        self.loader.sampler.set_epoch(self.trainer.fit_loop.epoch_progress.current.processed)

    def batch_stepped(self, last_in_epoch: bool) -> None:
        """The counters of one training batch up to its `on_train_batch_end` hooks: ready, started, one optimizer step
        with its zero_grad, processed, one scheduler step."""
        loop = self.trainer.fit_loop.epoch_loop
        loop.batch_progress.is_last_batch = last_in_epoch
        loop.batch_progress.increment_ready()
        loop.batch_progress.increment_started()
        optimizer = loop.automatic_optimization.optim_progress.optimizer
        optimizer.step.increment_ready()
        optimizer.zero_grad.increment_ready()
        optimizer.zero_grad.increment_started()
        optimizer.zero_grad.increment_completed()
        optimizer.step.increment_completed()
        loop.batch_progress.increment_processed()
        loop.scheduler_progress.increment_ready()
        loop.scheduler_progress.increment_completed()

    def batch_completed(self) -> None:
        self.trainer.fit_loop.epoch_loop.batch_progress.increment_completed()

    def validation_counted(self, batches: int) -> None:
        """The validation loop's counters of one validation of `batches` batches."""
        progress = self.trainer.fit_loop.epoch_loop.val_loop.batch_progress
        progress.reset_on_run()
        progress.increment_by(batches, is_last_batch=True)

    def advanced(self) -> None:
        self.trainer.fit_loop.epoch_loop._batches_that_stepped += 1

    def epoch_ended(self) -> None:
        self.trainer.fit_loop.epoch_progress.increment_processed()
        self.checkpointing.on_train_epoch_end(self.trainer, self.module)
        self.trainer.fit_loop.epoch_progress.increment_completed()

    # ------------------------------------------------------------------ logging
    def log(self, metrics: dict) -> None:
        """Into the run's loggers as Lightning logs a step's metrics: at its step, with the epoch."""
        self.trainer._logger_connector.log_metrics(metrics)

    def finish(self, status: str) -> None:
        for logger in self.trainer.loggers:
            logger.finalize(status)


def _capturable(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """An optimizer made safe to capture in a CUDA graph: learning rates as device tensors (the scheduler fills them in
    place), steps on the device. StackCheckpointIO writes it back in the solo form."""
    if not isinstance(optimizer, torch.optim.AdamW):
        raise StackError(f"a CUDA graph needs every run's optimizer capturable (torch.optim.AdamW), not "
                         f"{type(optimizer).__name__}; train with --graph off")
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(float(group["lr"]), device=device)
        group["capturable"] = True
    for state in optimizer.state.values():
        if "step" in state:
            state["step"] = state["step"].to(device=device, dtype=torch.float32)


class _Divergence:
    """The first non-finite loss of every run, tracked on the device (`LitResFormer`'s watch, one per run);
    `diverged` reads it (one host sync)."""

    def __init__(self, runs: int, device: torch.device):
        self.finite = torch.ones(runs, dtype=torch.bool, device=device)
        self.finite_steps = torch.zeros(runs, dtype=torch.long, device=device)
        self.first_bad = torch.zeros(runs, device=device)

    def watch(self, losses: torch.Tensor) -> None:
        finite = torch.isfinite(losses)
        self.first_bad = torch.where(self.finite & ~finite, losses.float(), self.first_bad)
        self.finite &= finite
        self.finite_steps += self.finite

    def diverged(self) -> list[tuple[int, int, float]]:
        """(run index, finite steps before, first non-finite loss) of every run whose loss turned non-finite."""
        finite, steps, bad = self.finite.tolist(), self.finite_steps.tolist(), self.first_bad.tolist()
        return [(i, steps[i], bad[i]) for i, ok in enumerate(finite) if not ok]


class StackTrainer:
    """The runs of one stack, set up (`prepare`) and trained together (`fit`)."""

    def __init__(self, specs: list[RunSpec], resume: bool = False, graph: str = "auto"):
        if graph not in GRAPH_CHOICES:
            raise StackError(f"graph={graph!r} is not allowed; choose one of {list(GRAPH_CHOICES)}")
        if len({spec.root.resolve() for spec in specs}) != len(specs):
            raise StackError("every run of a stack needs its own --trainer.default_root_dir")
        checker = ConfigChecker()
        resolved = [checker.resolved(load_experiment(spec.config)) for spec in specs]
        check_stack(resolved, [spec.name for spec in specs])
        self.specs, self.resume, self.graph = specs, resume, graph
        self.dtype = compute_dtype(resolved[0])
        self.runs: list[StackedRun] = []

    def prepare(self) -> None:
        """Every run parsed, checked and built by `fit`'s CLI, one after the other (each under its own seed), then
        refused as a whole where the runs cannot step together; nothing is written before that."""
        self.runs = [StackedRun(spec, self.resume) for spec in self.specs]
        first = self.runs[0]
        self.max_steps = first.trainer.max_steps
        starts = {run.spec.name: run.checkpoint_step() for run in self.runs}
        if len(set(starts.values())) > 1:
            raise StackError(f"the runs of a stack step together, but their checkpoints are at different steps "
                             f"{starts}; resume them alone or in stacks of equal steps")
        self.start_step = next(iter(starts.values()))
        if self.max_steps > first.steps_per_epoch:
            raise StackError(f"trainer.max_steps={self.max_steps} is more than one epoch of the training split "
                             f"({first.steps_per_epoch} batches of data.micro_batch_size); a stack trains within one "
                             "epoch: lower trainer.max_steps, or train these runs alone")
        self.device = first.trainer.strategy.root_device
        adamw = all(run.module.hparams.optimizer == "adamw" for run in self.runs)
        if self.graph == "on" and (self.device.type != "cuda" or not adamw):
            raise StackError("--graph on needs CUDA (a CUDA graph captures the step on the GPU) and model.optimizer "
                             "adamw in every run (torch.optim.Muon cannot be captured); use --graph auto or off")
        self.graphed = self.graph == "on" or (self.graph == "auto" and self.device.type == "cuda" and adamw)

    def fit(self) -> None:
        if not self.runs:
            self.prepare()
        runs = self.runs
        for run in runs:
            run.set_up()
        self.stack = RunStack([run.module._core for run in runs])
        for run in runs:
            run.set_up_training(self.graphed)
        try:
            self._train()
        except BaseException:
            for run in runs:
                if run.alive:
                    run.finish("failed")
            raise

    # ------------------------------------------------------------------ the loop
    def _train(self) -> None:
        runs = self.runs
        first = runs[0]
        trainer = first.trainer
        self.divergence = _Divergence(len(runs), self.device)
        self.max_norms = torch.tensor([run.trainer.gradient_clip_val or float("inf") for run in runs],
                                      device=self.device)
        self.val_loaders = first.data.val_dataloader()
        self.val_batches = sum(len(loader) for loader in self.val_loaders)
        every_val = trainer.val_check_interval
        for run in runs:
            run.epoch_started()
            for step in range(self.start_step):  # the counters of the steps its checkpoint holds
                run.batch_stepped(last_in_epoch=False)
                run.batch_completed()
                if (step + 1) % every_val == 0:
                    run.validation_counted(self.val_batches)
                run.advanced()
        for run in runs:
            run.checkpointing.on_train_start(run.trainer, run.module)
            run.throughput.on_train_start(run.trainer)
            run.module.record_corpus()
        if self.start_step == 0:
            self._initial_validation()
        step = functools.partial(self.stack.train_step, max_norms=self.max_norms,
                                 optimizers=[run.optimizer for run in runs],
                                 autocast_dtype=None if self.dtype == torch.float32 else self.dtype)
        step = GraphedStep(step) if self.graphed else step
        iterators = [iter(run.loader) for run in runs]
        log_every = trainer.log_every_n_steps
        for batch_index in range(self.start_step, self.max_steps):
            last = batch_index + 1 == first.steps_per_epoch
            batches = [next(iterator) for iterator in iterators]
            logging = bool(log_every) and (batch_index + 1) % log_every == 0
            live = [run for run in runs if run.alive]
            # what the step logs of itself, read before it changes them (the learning rates it uses, the mixing
            # weights it starts from)
            logged = {run.spec.name: {**run.module.step_metrics(batches[0]["input_ids"].numel()),
                                      **{k: v.clone() for k, v in run.module.mixing_weights().items()}}
                      for run in live} if logging else {}
            inputs = torch.stack([b["input_ids"].to(self.device, non_blocking=True) for b in batches])
            labels = torch.stack([b["labels"].to(self.device, non_blocking=True) for b in batches])
            losses, norms = step(inputs, labels)
            for run in runs:
                run.scheduler.step()
            self.divergence.watch(losses)
            for run in runs:
                run.batch_stepped(last)
            saving = any(run.checkpointing._every_n_train_steps > 0
                         and (batch_index + 1) % run.checkpointing._every_n_train_steps == 0 for run in live)
            if logging or saving:
                self._retire_diverged()
            for index, run in enumerate(runs):
                if run.alive:
                    batch = batches[index]
                    run.throughput.on_train_batch_end(run.trainer, run.module, None, batch, batch_index)
                    run.checkpointing.on_train_batch_end(run.trainer, run.module, None, batch, batch_index)
                run.batch_completed()
                if run.alive and logging:
                    run.log({"train/loss": losses[index], **logged[run.spec.name], "train/grad_norm": norms[index]})
            if (batch_index + 1) % every_val == 0 or last:
                self._validate()
            for run in runs:
                run.advanced()
            if not any(run.alive for run in runs):
                break
        self._retire_diverged()
        for run in runs:
            if run.alive:
                run.epoch_ended()
                run.checkpointing.on_train_end(run.trainer, run.module)
                run.finish("success")

    def _autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=False)

    def _retire_diverged(self) -> None:
        """Runs whose loss turned non-finite are recorded as diverged (their divergence.json, as `fit` alone records
        it) and leave the stack's bookkeeping: no more logs, checkpoints or validation."""
        for index, finite_steps, loss in self.divergence.diverged():
            run = self.runs[index]
            if not run.alive:
                continue
            step = self.start_step + finite_steps
            run.run_dir.record_divergence(step, loss)
            print(f"{run.spec.name}: diverged: non-finite loss at step {step} ({loss})", file=sys.stderr)
            run.alive = False
            run.finish("failed")

    def _eval_batches(self):
        """(domain index, batch index, batch on the device) of every validation batch, domain by domain."""
        for domain, loader in enumerate(self.val_loaders):
            for index, batch in enumerate(loader):
                yield domain, index, {k: v.to(self.device) for k, v in batch.items()}

    @torch.no_grad()
    def _initial_validation(self) -> None:
        """The step-0 validation of every run (`LitResFormer`'s), its losses from one pass for all: in fp32, as the
        solo run's (it runs outside the precision plugin's autocast)."""
        live = [run for run in self.runs if run.alive]
        losses = {run.spec.name: {} for run in live}
        counts: dict[str, list] = {}
        domains = live[0].module.domains
        for domain, _, batch in self._eval_batches():
            values = self.stack.eval_losses(batch["input_ids"], batch["labels"])
            for index, run in enumerate(self.runs):
                if run.alive:
                    losses[run.spec.name].setdefault(domains[domain], []).append(values[index])
            counts.setdefault(domains[domain], []).append(live[0].module.tokens_and_bytes(batch["labels"]))
        for run in live:
            metrics = run.module.initial_validation_metrics(losses[run.spec.name], counts)
            for logger in run.trainer.loggers:
                logger.log_metrics(metrics, step=0)

    def _validate(self) -> None:
        """One validation of every run, as Lightning's validation loop runs it within fit: hooks, each run's metrics
        counted batch by batch, then logged at the step; the checkpoint callback's end-of-validation save."""
        live = [run for run in self.runs if run.alive]
        for run in live:
            run.trainer.state.stage = RunningStage.VALIDATING
            run.module.eval()
            run.throughput.on_validation_start(run.trainer, run.module)
        with torch.inference_mode(), self._autocast():
            for domain, batch_index, batch in self._eval_batches():
                values = self.stack.eval_losses(batch["input_ids"], batch["labels"])
                for index, run in enumerate(self.runs):
                    if run.alive:
                        run.module.update_eval_metrics(values[index], batch, domain)
                        run.throughput.on_validation_batch_end(run.trainer, run.module, None, batch, batch_index)
        for run in live:
            run.validation_counted(self.val_batches)
            run.log(run.module.domain_metrics("val"))
            run.module.train()
            run.throughput.on_validation_end(run.trainer, run.module)
            run.checkpointing.on_validation_end(run.trainer, run.module)
            run.trainer.state.stage = RunningStage.TRAINING


# ---------------------------------------------------------------------------------------------- command line
def parser() -> argparse.ArgumentParser:
    parser = OptionParser(
        prog="lit-resformer fit-stacked",
        description="Train several runs that share a recipe and a model shape in one process, stacked into one model "
                    "(torch.func); each run is exactly the run `lit-resformer fit --config CONFIG "
                    "--trainer.default_root_dir RUN_DIR` trains, in its own run directory.")
    parser.add_argument("--run", nargs=2, action="append", required=True, metavar=("CONFIG", "RUN_DIR"),
                        help="a run of the stack: its experiment config and its run directory; repeat for each run")
    parser.add_argument("--ckpt_path", choices=["last"],
                        help="resume every run from its last checkpoint (a run without one starts), as `fit`")
    parser.add_argument("--graph", choices=GRAPH_CHOICES, default="auto",
                        help="capture the step as one CUDA graph: auto (on CUDA when every run's optimizer is AdamW), "
                             "on, off")
    return parser


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    specs = [RunSpec(Path(config), Path(root)) for config, root in args.run]
    try:
        trainer = StackTrainer(specs, resume=args.ckpt_path == "last", graph=args.graph)
        trainer.prepare()
    except StackError as err:
        sys.exit(f"lit-resformer fit-stacked: error: {err}")
    trainer.fit()
