"""A fake `lit-resformer fit` that honours its contract (`--config YAML --trainer.default_root_dir RUN [--ckpt_path
last]`, a new `csv/version_N/metrics.csv` per start, `checkpoints/last.ckpt`, summary.json) in milliseconds, and the
grid files the runner tests write for it. The `fake` fixture (conftest.py) writes it to a file."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import yaml

FAKE_TRAINER = textwrap.dedent(
    '''
    import csv, json, math, os, signal, sys, time
    from pathlib import Path
    import yaml
    from lit_resformer.runs.run_dir import kept_checkpoint
    from lit_resformer.runs.run_dir import RunDir

    args = sys.argv[1:]
    config = yaml.safe_load(open(args[args.index("--config") + 1]))
    run = Path(args[args.index("--trainer.default_root_dir") + 1])
    resume = "--ckpt_path" in args
    cell = run.parent.name
    with open(run / "calls.jsonl", "a") as f:
        f.write(json.dumps({"argv": args, "pid": os.getpid(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "omp": os.environ.get("OMP_NUM_THREADS"), "time": time.time()}) + "\\n")
    if not resume and (run / "csv").exists():
        sys.exit("error: run directory already holds a run; resume it with --ckpt_path last")

    device_dir = os.environ.get("FAKE_DEVICE_DIR")
    if device_dir:  # device-pool test: no device may be held by two runs at once
        busy = [Path(device_dir) / f"busy-{d}" for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",")]
        for b in busy:
            try:
                os.close(os.open(b, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                sys.exit(f"device {b.name} is already in use by another run")
        (Path(device_dir) / f"started-{os.getpid()}").touch()
        deadline = time.time() + 60  # wait until enough runs are running concurrently
        while len(list(Path(device_dir).glob("started-*"))) < int(os.environ["FAKE_WAIT_FOR"]):
            if time.time() > deadline:
                sys.exit("the pool never ran enough runs at the same time")
            time.sleep(0.05)

    max_steps = config["trainer"]["max_steps"]
    val_every = config["trainer"]["val_check_interval"]
    ckpt_every = config["checkpoint"]["every_n_train_steps"]
    seed = config["seed_everything"]
    target = config["model"]["config"].get("residual", {}).get("target", "none")
    offset = {"none": 0.0, "v": -0.05, "q": 0.03, "k": 0.04}[target]
    ckpt = run / "checkpoints" / "last.ckpt"
    start = json.loads(ckpt.read_text())["step"] if resume and ckpt.exists() else 0
    versions = sorted(int(p.name.split("_")[1]) for p in (run / "csv").glob("version_*"))
    out_dir = run / "csv" / f"version_{versions[-1] + 1 if versions else 0}"
    out_dir.mkdir(parents=True)
    columns = ["step", "train/loss", "train/tokens_seen", "train/items_per_sec", "val/loss", "val/loss/code", "val/loss/english"]
    metrics = open(out_dir / "metrics.csv", "w", newline="")
    writer = csv.DictWriter(metrics, fieldnames=columns)
    writer.writeheader()
    (run / "config.yaml").write_text(yaml.safe_dump(config))

    def loss_at(step):
        return 2.0 + 3.0 * math.exp(-step / 8) + offset + 0.01 * math.sin(seed + step)

    for step in range(start, max_steps):
        if config["model"]["lr"] >= 1.0 and step == 3:
            RunDir(run).record_divergence(step, float("nan"))
            print("Traceback (most recent call last):", file=sys.stderr)
            print(f"FloatingPointError: diverged: non-finite loss at step {step} (nan)", file=sys.stderr)
            sys.exit(1)
        writer.writerow({"step": step, "train/loss": loss_at(step), "train/tokens_seen": (step + 1) * 512,
                         "train/items_per_sec": 1000.0 + seed})
        if (step + 1) % val_every == 0:
            writer.writerow({"step": step, "val/loss": loss_at(step) + 0.1, "val/loss/code": loss_at(step),
                             "val/loss/english": loss_at(step) + 0.2})
        metrics.flush()
        if step + 1 in (config["checkpoint"].get("keep_steps") or ()):  # a ladder's trunk keeps its branch points
            kept_checkpoint(run / "checkpoints", step + 1).parent.mkdir(exist_ok=True)
            kept_checkpoint(run / "checkpoints", step + 1).write_text(json.dumps({"step": step + 1}))
        if (step + 1) % ckpt_every == 0 or step + 1 == max_steps:
            (run / "checkpoints").mkdir(exist_ok=True)
            tmp = ckpt.with_suffix(".tmp")
            tmp.write_text(json.dumps({"step": step + 1}))
            tmp.replace(ckpt)
            if not resume and os.environ.get("FAKE_KILL_CELL") == cell and step + 1 >= int(os.environ["FAKE_KILL_AFTER"]):
                os.kill(os.getpid(), signal.SIGKILL)  # the machine dies right after a checkpoint
            if not resume and os.environ.get("FAKE_BLOCK_CELL") == cell and step + 1 >= 10:
                time.sleep(120)  # hangs until it is stopped (the SLURM job is preempted)
        time.sleep(float(os.environ.get("FAKE_STEP_SLEEP", "0")))
        hold = os.environ.get("FAKE_HOLD_UNTIL")  # trains no further step until the test creates this file
        deadline = time.time() + 300
        while hold and not Path(hold).exists():
            if time.time() > deadline:
                sys.exit(f"held for 300 s: {hold} never appeared")
            time.sleep(0.05)
    if device_dir:
        for b in busy:
            b.unlink()
    print(f"fit done at step {max_steps}")
    '''
)


BASE = {
    "seed_everything": 0,
    "global_batch_tokens": None,
    "trainer": {"max_steps": 20, "val_check_interval": 5, "precision": "32-true"},
    "checkpoint": {"every_n_train_steps": 5},
    "model": {"config": {"size": "tiny"}, "lr": 6.0e-4},
    "data": {"seq_len": 64, "micro_batch_size": 2},
}


def write_grid(tmp_path: Path, grid: dict, base: dict = BASE, name: str = "grid.yaml") -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"name": "g", "base": "base.yaml", **grid}, sort_keys=False))
    return path


THREE_CELLS = {
    "baseline": "vanilla",
    "seeds": [0],
    "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}, "boom": {"model.lr": 1000.0}},
}


def calls(run_dir: Path) -> list[dict]:
    path = run_dir / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
