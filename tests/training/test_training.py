"""Training pipeline: the Lightning CLI end to end, exact resume after SIGKILL, DDP, refusal of bad input."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lit_resformer import load_checkpoint
from lit_resformer.cli import main
from lit_resformer.model import ModelConfig
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.training.module import warmup_cosine, warmup_stable_decay
from tests.helpers.experiments import (
    experiment,
    fit,
    fit_killed_at_step_5,
    read_metrics,
    refused,
    tiny_experiment,
)
from tests.helpers.models import LEARNABLE_CHOICES

HELPERS = Path(__file__).parents[1] / "helpers"


def test_warmup_cosine_schedule():
    kw = dict(peak=6e-4, start=1e-7, warmup=120, total=10_000, final_ratio=0.1)
    assert warmup_cosine(0, **kw) == pytest.approx(1e-7)
    assert warmup_cosine(60, **kw) == pytest.approx((1e-7 + 6e-4) / 2)
    assert warmup_cosine(120, **kw) == pytest.approx(6e-4)
    assert warmup_cosine(10_000, **kw) == pytest.approx(6e-5)
    mid = 120 + (10_000 - 120) / 2
    assert warmup_cosine(mid, **kw) == pytest.approx((6e-4 + 6e-5) / 2)
    steps = [warmup_cosine(s, **kw) for s in range(120, 10_001, 100)]
    assert all(a >= b for a, b in zip(steps, steps[1:], strict=False))


def test_warmup_stable_decay_schedule():
    kw = dict(peak=2e-3, start=1e-7, warmup=100, total=1000, final_ratio=0.1)
    assert warmup_stable_decay(0, decay_start=800, **kw) == warmup_cosine(0, **kw) == pytest.approx(1e-7)
    assert warmup_stable_decay(50, decay_start=800, **kw) == warmup_cosine(50, **kw)  # the same warm-up
    assert warmup_stable_decay(100, decay_start=800, **kw) == warmup_stable_decay(800, decay_start=800, **kw) == 2e-3
    assert warmup_stable_decay(900, decay_start=800, **kw) == pytest.approx((2e-3 + 2e-4) / 2)  # linear
    assert warmup_stable_decay(1000, decay_start=800, **kw) == pytest.approx(2e-4)
    # a trunk holds the peak to the end, and a branch leaving it at step s follows it exactly up to s
    trunk = [warmup_stable_decay(step, decay_start=None, **kw) for step in range(1001)]
    branch = [warmup_stable_decay(step, decay_start=600, **kw) for step in range(1001)]
    assert trunk[100:] == [2e-3] * 901 and branch[:601] == trunk[:601] and branch[601] < trunk[601]
    assert all(a > b for a, b in zip(branch[600:], branch[601:], strict=False))


@pytest.mark.integration
def test_fit_writes_a_complete_run(tmp_path, tiny_corpus, data_cache):
    run = tmp_path / "run"
    fit(experiment(tmp_path, tiny_corpus, data_cache), run)
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    metrics = read_metrics(run)
    for name in ("train/loss", "train/lr", "train/grad_norm", "train/tokens_seen", "train/device/items_per_sec",
                 "val/loss", "val/loss/alpha", "val/loss/beta"):
        assert name in metrics, name
    assert [s for s, _ in metrics["train/loss"]] == list(range(10))
    assert metrics["train/tokens_seen"][-1][1] == 10 * 4 * 16
    assert metrics["val/loss/alpha"][0][0] == 0  # validation before the first step, then every 5 steps
    assert metrics["val/loss"][-1][1] < metrics["val/loss"][0][1]
    assert list((run / "tb").rglob("events.out.tfevents.*"))
    assert (run / "checkpoints" / "last.ckpt").exists()
    model, tokenizer = load_checkpoint(run / "checkpoints" / "last.ckpt")
    # vocab_size is linked from the tokenizer, never typed twice
    assert model.config.vocab_size == tokenizer.get_vocab_size()
    assert "vocab_size" not in resolved["model"]["config"]  # derived at run time, not a setting
    assert model.config.residual.target == "v"


@pytest.mark.integration
@pytest.mark.parametrize("name", list(LEARNABLE_CHOICES))
def test_learnable_mixing_weights_are_logged(tmp_path, tiny_corpus, data_cache, name):
    """Every choice that builds learnable weights (LEARNABLE_CHOICES: every choice of the config's Literals) trains
    three steps through `fit`, logs at every step what each of its modules reports (`Transformer.mixing_weights`),
    and those values move; the mixing group is undecayed and takes `mix_lr`."""
    run = tmp_path / "run"
    shape = {"n_layer": 2, "n_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64}
    mixing = ModelConfig(**shape, vocab_size=300, **LEARNABLE_CHOICES[name]).has_mixing_weights()
    mix_lr = {"mix_lr": 0.05} if mixing else {}  # DenseFormer's alphas alone are decayed, at the base lr
    cfg = experiment(tmp_path, tiny_corpus, data_cache, trainer={"max_steps": 3},
                     model={"config": {**shape, **LEARNABLE_CHOICES[name]}, "lr": 3e-3, "warmup_steps": 1, **mix_lr})
    fit(cfg, run)
    metrics = read_metrics(run)
    model, _ = load_checkpoint(run / "checkpoints" / "last.ckpt")
    logged = model.mixing_weights()
    assert logged
    for metric in logged:
        assert [step for step, _ in metrics[metric]] == [0, 1, 2], metric
        assert metrics[metric][-1][1] != metrics[metric][0][1], metric  # they train
    groups = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["optimizer_states"][0]["param_groups"]
    assert len(groups) == (3 if mixing else 2)  # decayed matrices, undecayed rest, then the mixing weights
    if mixing:
        assert groups[2]["weight_decay"] == 0.0 and groups[2]["initial_lr"] == 0.05 and groups[0]["initial_lr"] == 3e-3
        assert len(groups[2]["params"]) == len(model.param_groups(weight_decay=0.1)[2]["params"])


@pytest.mark.integration
def test_resume_after_sigkill_is_exact(tmp_path, tiny_corpus, data_cache):
    """SIGKILL after the step-4 checkpoint, resume with --ckpt_path last: same losses, bit for bit."""
    config = experiment(tmp_path, tiny_corpus, data_cache)
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    fit(config, straight)
    fit_killed_at_step_5(config, crashed)
    assert read_metrics(crashed)["train/loss"][-1][0] < 9  # it really died mid-run
    fit(config, crashed, "--ckpt_path", "last")
    a, b = read_metrics(straight), read_metrics(crashed)
    assert a["train/loss"] == b["train/loss"]
    assert a["val/loss"] == b["val/loss"]


@pytest.mark.integration
def test_resume_skips_a_truncated_last_checkpoint(tmp_path, tiny_corpus, data_cache):
    """A run killed while writing last.ckpt resumes from its newest intact step checkpoint, and says so."""
    config = experiment(tmp_path, tiny_corpus, data_cache, trainer={"max_steps": 4})
    run = RunDir(tmp_path / "run")
    fit(config, run.path)
    intact = run.checkpoints_dir / "step000004.ckpt"
    assert intact.is_file()
    run.last_checkpoint.write_bytes(run.last_checkpoint.read_bytes()[:1000])
    with pytest.warns(UserWarning, match=r"resuming from .*step000004.ckpt: last.ckpt: not a readable checkpoint"):
        fit(config, run.path, "--ckpt_path", "last", "--trainer.max_steps", "6")
    _, resumed = run.metric_files()
    with open(resumed, newline="") as f:
        resumed_steps = [int(row["step"]) for row in csv.DictReader(f) if row["train/loss"]]
    assert resumed_steps == [4, 5]  # from the step-4 checkpoint, not from scratch
    assert [s for s, _ in read_metrics(run.path)["train/loss"]] == list(range(6))


def test_bad_input_is_refused_before_training(tmp_path, tiny_corpus, data_cache, capsys):
    run = tmp_path / "run"
    cases = [
        ({"data": {"path": str(tmp_path / "missing")}}, (), "data.path"),
        ({"data": {"seq_len": 128}}, (), "data.seq_len=128 exceeds model.config.max_seq_len=64"),
        ({"global_batch_tokens": 100}, (), "global_batch_tokens=100 is not divisible"),
        ({"data": {"tokenizer": "no-such-tokenizer"}}, (), "tokenizer"),
        ({"model": {"config": {"size": "tiny", "residual": {"target": "v"}, "share": {"svformer": True}}}}, (),
         "share.svformer"),
        ({"model": {"mix_lr": 0.01}}, (), "model.mix_lr is set but the model has no learnable mixing weights"),
        ({"model": {"decay_start": 5}}, (), "model.decay_start=5 needs model.schedule: wsd"),
        ({"model": {"schedule": "wsd", "decay_start": 10}}, (), "model.decay_start=10 is not before trainer.max_steps=10"),
        ({"checkpoint": {"keep_steps": [0]}}, (), "checkpoint.keep_steps=[0] is out of range"),
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    cases.append(({"data": {"path": str(empty)}}, (), "data.path"))
    for sections, extra, message in cases:
        err = refused(capsys, experiment(tmp_path, tiny_corpus, data_cache, **sections), run, *extra)
        assert message in err, (message, err)
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(b"not a checkpoint")
    err = refused(capsys, experiment(tmp_path, tiny_corpus, data_cache), run, "--ckpt_path", str(broken))
    assert "is not a readable checkpoint" in err


def test_domain_without_documents_isrefused(tmp_path, tiny_corpus, data_cache, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for f in tiny_corpus.iterdir():
        (corpus / f.name).write_bytes(f.read_bytes())
    (corpus / "gamma.txt").write_text("\n\n")
    err = refused(capsys, experiment(tmp_path, corpus, data_cache), tmp_path / "run")
    assert "gamma" in err


@pytest.mark.integration
def test_existing_run_is_not_overwritten(tmp_path, tiny_corpus, data_cache, capsys):
    run = tmp_path / "run"
    config = experiment(tmp_path, tiny_corpus, data_cache, trainer={"max_steps": 2})
    fit(config, run)
    with pytest.raises(SystemExit):
        fit(config, run)
    assert "already holds a run" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("model", [{}, {"optimizer": "muon", "lr": 3e-3, "warmup_steps": 3}], ids=["adamw", "muon"])
def test_ddp_matches_single_process(tmp_path, tiny_corpus, data_cache, model):
    """2 CPU processes (gloo) with micro-batch 2 == 1 process with micro-batch 4: same global batch. Under Muon the
    gradients are all-reduced before the step, so both ranks orthogonalise the same matrices; measured at most 1.3e-4
    apart over 20 steps (AdamW: 5e-7; Muon's Newton-Schulz runs in bf16), within the 1e-3 both are held to."""
    steps = {"max_steps": 20, "val_check_interval": 10}
    single = experiment(tmp_path, tiny_corpus, data_cache, trainer=steps, model=model)
    fit(single, tmp_path / "single")
    ddp_dir = tmp_path / "ddp"
    ddp_dir.mkdir()
    ddp = experiment(ddp_dir, tiny_corpus, data_cache, data={"micro_batch_size": 2}, model=model,
                     trainer={**steps, "devices": 2, "strategy": "ddp"})
    proc = subprocess.run([sys.executable, "-m", "lit_resformer.cli", "fit", "--config", str(ddp),
                           "--trainer.default_root_dir", str(tmp_path / "ddp_run")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = read_metrics(tmp_path / "single")["train/loss"], read_metrics(tmp_path / "ddp_run")["train/loss"]
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(20))
    assert max(abs(x - y) for (_, x), (_, y) in zip(a, b, strict=True)) < 1e-3
    assert not math.isclose(a[0][1], a[-1][1])  # it trained


@pytest.mark.integration
def test_fused_adamw_is_clipped_directly_under_bf16(tmp_path, tiny_corpus, data_cache, monkeypatch):
    """On CUDA the optimizer is fused AdamW and Lightning's mixed-precision plugin would refuse to clip for it;
    the module clips itself. Forced here on the CPU under bf16-mixed: the update equals clip-then-step."""
    from lit_resformer.training.module import LitResFormer

    monkeypatch.setattr(LitResFormer, "_fused_adamw", lambda self: True)
    seen = {}
    original = torch.nn.utils.clip_grad_norm_

    def spy(parameters, max_norm, **kwargs):
        parameters = list(parameters)
        seen["before"] = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in parameters if p.grad is not None]))
        total = original(parameters, max_norm, **kwargs)
        seen["after"] = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in parameters if p.grad is not None]))
        return total

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    config = tiny_experiment(tmp_path / "e.yaml", tiny_corpus, data_cache,
                             trainer={"max_steps": 2, "precision": "bf16-mixed", "gradient_clip_val": 1e-3})
    main(["fit", "--config", str(config), "--trainer.default_root_dir", str(tmp_path / "run")])
    assert seen["before"] > 1e-3 and seen["after"] == pytest.approx(1e-3, rel=1e-3)
    state = torch.load(RunDir(tmp_path / "run").path / "checkpoints/last.ckpt", weights_only=True)
    assert state["optimizer_states"][0]["param_groups"][0]["fused"] is True
