"""Muon beside AdamW: the parameter groups and their learning rates, refusal of bad settings, Muon against its AdamW
twin, exact resume and DDP under Muon."""

from __future__ import annotations

import copy
import math
import os
from types import SimpleNamespace

import pytest
import torch

from lit_resformer.model import ModelConfig
from lit_resformer.training.module import (
    MUON_LR_MULTIPLIERS,
    LitResFormer,
    MuonWithAdamW,
    newton_schulz_in_float32,
)
from tests.helpers.experiments import experiment, fit, fit_killed_at_step_5, read_metrics, refused

SMALL = dict(n_layer=2, n_head=2, d_model=32, ffn_dim=64, max_seq_len=64, vocab_size=300)
# Every group of mixing weights and gates the model has, DenseFormer and value embeddings too.
EVERYTHING = dict(residual={"target": "k", "learnable": "token", "gate_rank": 4, "gate_bias": True},
                  value_embed={"layers": [1, 2], "value_weight": "learnable"}, dwa={"enabled": True},
                  attn_gate={"per": "head"}, xsa={"per": "head"}, satformer={"enabled": True},
                  dense_value={"layers": "last"})


def module(config: dict | None = None, max_steps: int = 10, **hparams) -> LitResFormer:
    """A LitResFormer whose optimizer can be configured without a Trainer (only max_steps is read)."""
    lit = LitResFormer(ModelConfig(**{**SMALL, **(config or {})}), **hparams)
    lit._trainer = SimpleNamespace(max_steps=max_steps)
    return lit


def named_groups(lit: LitResFormer) -> dict[str, dict]:
    names, groups = lit.parameter_groups()
    assert len(set(names)) == len(names)
    return dict(zip(names, groups, strict=True))


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("variant", ["vanilla", "everything"])
def test_every_parameter_lands_in_exactly_one_group(optimizer, variant):
    lit = module(EVERYTHING if variant == "everything" else {}, optimizer=optimizer,
                 value_embed_lr_mult=10.0 if variant == "everything" else None)
    grouped = [id(p) for group in named_groups(lit).values() for p in group["params"]]
    assert len(grouped) == len(set(grouped))
    assert set(grouped) == {id(p) for p in lit.model.parameters()}


def test_muon_takes_the_hidden_matrices_and_nothing_else():
    lit = module(EVERYTHING, optimizer="muon")
    names = {id(p): n for n, p in lit.model.named_parameters()}
    groups = named_groups(lit)
    muon = {names[id(p)] for p in groups["muon"]["params"]}
    hidden = {n for n in names.values() if n.rsplit(".", 2)[-2] in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")}
    assert muon == hidden and all(n.startswith("blocks.") for n in muon)
    assert all(p.ndim == 2 for p in groups["muon"]["params"])  # a 1-D parameter never goes to Muon
    mixing = {names[id(p)] for p in lit.model.param_groups(0.1)[2]["params"]}
    assert {names[id(p)] for p in groups["mix"]["params"]} == mixing  # every gate and mixing weight, under AdamW
    assert any(".out_gate." in n for n in mixing) and any(".dense_value." in n for n in mixing)
    assert {names[id(p)] for p in groups["embed"]["params"]} == {"tok_emb.weight"}
    assert {names[id(p)] for p in groups["head"]["params"]} == {"lm_head.weight"}
    assert {names[id(p)] for p in groups["value_embed"]["params"]} == {n for n in names.values()
                                                                         if n.startswith("value_embeds.")}
    assert {names[id(p)] for p in groups["decay"]["params"]} == {n for n in names.values() if n.startswith("dwa.")}
    assert all(p.ndim == 1 for p in groups["no_decay"]["params"])  # the norms
    optimizer = lit.configure_optimizers()["optimizer"]
    assert isinstance(optimizer, MuonWithAdamW)
    assert [g["params"] for g in optimizer._muon.param_groups] == [groups["muon"]["params"]]


def test_group_learning_rates_are_as_configured():
    lr = 2e-3
    groups = named_groups(module(EVERYTHING, optimizer="muon", lr=lr))
    peaks = {name: group["lr"] for name, group in groups.items()}
    assert peaks == pytest.approx({"muon": lr * MUON_LR_MULTIPLIERS["muon"], "head": lr, "embed": lr,
                                   "value_embed": lr * 75.0, "mix": lr * 5.0, "decay": lr, "no_decay": lr})
    assert groups["mix"]["weight_decay"] == 0.0 and groups["muon"]["weight_decay"] == 0.1
    assert groups["embed"]["weight_decay"] == groups["value_embed"]["weight_decay"] == 0.0  # decay_embeddings off
    custom = named_groups(module(EVERYTHING, optimizer="muon", lr=lr, muon_lr_mult=10.0, head_lr_mult=0.5,
                                 embed_lr_mult=3.0, value_embed_lr_mult=7.0, mix_lr=0.02, decay_embeddings=True))
    assert {name: group["lr"] for name, group in custom.items()} == pytest.approx(
        {"muon": 10 * lr, "head": 0.5 * lr, "embed": 3 * lr, "value_embed": 7 * lr, "mix": 0.02, "decay": lr,
         "no_decay": lr})
    assert custom["embed"]["weight_decay"] == custom["value_embed"]["weight_decay"] == 0.1


def test_adamw_is_unchanged_unless_a_multiplier_is_set():
    config = {"value_embed": {"layers": [2]}, "residual": {"target": "v", "learnable": "tied"}}
    lit = module(config, mix_lr=0.05)
    names, groups = lit.parameter_groups()
    assert names == ["decay", "no_decay", "mix"]
    expected = lit.model.param_groups(0.1, mix_lr=0.05)
    assert [[id(p) for p in g["params"]] for g in groups] == [[id(p) for p in g["params"]] for g in expected]
    assert [{k: v for k, v in g.items() if k != "params"} for g in groups] == \
        [{k: v for k, v in g.items() if k != "params"} for g in expected]
    assert type(lit.configure_optimizers()["optimizer"]) is torch.optim.AdamW

    split = module(config, max_steps=100, mix_lr=0.05, value_embed_lr_mult=4.0, lr=1e-3, warmup_steps=4)
    names, groups = split.parameter_groups()
    assert names == ["decay", "no_decay", "mix", "value_embed"]
    tables = [p for n, p in split.model.named_parameters() if n.startswith("value_embeds.")]
    assert [id(p) for p in groups[3]["params"]] == [id(p) for p in tables]
    assert groups[3]["lr"] == pytest.approx(4e-3) and groups[3]["weight_decay"] == 0.0
    # the schedule scales every group alike: at its peak each group sits at its own peak lr
    scheduled = split.configure_optimizers()
    optimizer, schedule = scheduled["optimizer"], scheduled["lr_scheduler"]["scheduler"]
    start = [g["lr"] for g in optimizer.param_groups]
    assert start == pytest.approx([1e-7, 1e-7, 0.05 * 1e-4, 4e-7])  # warmup_start_lr / lr of each peak
    for _ in range(4):
        optimizer.step()
        schedule.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([1e-3, 1e-3, 0.05, 4e-3])


@pytest.mark.parametrize("settings,message", [
    ({"optimizer": "sgd"}, "model.optimizer='sgd' is not allowed; choose one of ['adamw', 'muon']"),
    ({"optimizer": "muon", "muon_lr_mult": 0.0}, "model.muon_lr_mult=0.0 must be a finite number > 0"),
    ({"optimizer": "muon", "head_lr_mult": -1.0}, "model.head_lr_mult=-1.0 must be a finite number > 0"),
    ({"embed_lr_mult": float("nan")}, "model.embed_lr_mult=nan must be a finite number > 0"),
    ({"optimizer": "muon", "muon_momentum": 1.0}, "model.muon_momentum=1.0 must be in [0, 1)"),
    ({"muon_lr_mult": 2.0}, "model.muon_lr_mult is set but model.optimizer='adamw'"),
    ({"value_embed_lr_mult": 2.0}, "model.value_embed_lr_mult is set but the model has no value-embedding tables"),
    ({"mix_lr": 0.1}, "model.mix_lr is set but the model has no learnable mixing weights"),
])
def test_bad_settings_are_refused_naming_the_field(settings, message):
    with pytest.raises(ValueError) as error:
        LitResFormer(ModelConfig(**SMALL), **settings)
    assert message in str(error.value)


def test_bad_settings_are_refused_by_the_command_line_before_training(tmp_path, tiny_corpus, data_cache, capsys):
    run = tmp_path / "run"
    config = experiment(tmp_path, tiny_corpus, data_cache)
    err = refused(capsys, config, run, "--model.optimizer", "sgd")
    assert "model.optimizer" in err and "['adamw', 'muon']" in err, err
    err = refused(capsys, config, run, "--model.muon_lr_mult", "2")
    assert "model.muon_lr_mult is set but model.optimizer='adamw'" in err, err


@pytest.mark.parametrize("gate", [{"attn_gate": {"per": "element"}}, {"xsa": {"per": "token"}},
                                  {"satformer": {"enabled": True}}, {"dense_value": {"layers": "last"}}])
def test_the_new_gates_are_mixing_weights(gate):
    lit = module(gate, mix_lr=0.07)  # accepted: the model has mixing weights
    names, groups = lit.parameter_groups()
    assert names[-1] == "mix" and groups[-1]["lr"] == 0.07
    logged = lit.mixing_weights()
    kind = next(iter(gate))
    label = {"attn_gate": "attn_gate_weight_norm", "xsa": "xsa_weight_norm", "satformer": "satformer_gate_norm",
             "dense_value": "dense_value_mu_norm"}[kind]
    assert any(name.endswith(label) for name in logged), logged


def test_the_muon_recipe_composes(tmp_path):
    from lit_resformer.config.files import load_experiment

    root = os.path.join(os.path.dirname(__file__), "..", "..", "configs")
    merged = load_experiment(os.path.join(root, "recipes", "cpu.yaml"), os.path.join(root, "recipes", "muon.yaml"))
    assert merged["model"]["optimizer"] == "muon" and merged["trainer"]["max_steps"] == 400
    LitResFormer(ModelConfig.preset("tiny"), **{k: v for k, v in merged["model"].items() if k != "config"})


def test_muon_state_round_trips_through_a_checkpoint():
    """MuonWithAdamW's state_dict loads into a fresh one that then steps exactly as the original: Muon's momentum and
    AdamW's moments and step counts come back, and the inner optimizers see the loaded groups."""
    torch.manual_seed(0)
    first = module({"residual": {"target": "v", "learnable": "tied"}}, optimizer="muon", lr=3e-3)
    second = module({"residual": {"target": "v", "learnable": "tied"}}, optimizer="muon", lr=3e-3)
    second.model.load_state_dict(first.model.state_dict())
    x = torch.randint(0, 300, (2, 9))

    def step(lit, optimizer):
        lit.model(x[:, :-1], labels=x[:, 1:]).backward()
        optimizer.step()
        optimizer.zero_grad()

    a = first.configure_optimizers()["optimizer"]
    for _ in range(3):
        step(first, a)
    second.model.load_state_dict(first.model.state_dict())
    b = second.configure_optimizers()["optimizer"]
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as from a checkpoint file: tensors of its own
    assert b._muon.param_groups[0] is b.param_groups[0] and b._adamw.state is b.state
    assert set(b.state[b.param_groups[0]["params"][0]]) == {"momentum_buffer"}
    for _ in range(2):
        step(first, a)
        step(second, b)
    for p, q in zip(first.model.parameters(), second.model.parameters(), strict=True):
        assert torch.equal(p, q)


# ------------------------------------------------------------------------------------------- training
def _train(lit: LitResFormer, datamodule, steps: int) -> float:
    """`steps` optimizer steps as Lightning's loop takes them (forward, backward, clip 1.0, step, schedule), with the
    module's own optimizer and schedule; then the validation loss over every domain."""
    configured = lit.configure_optimizers()
    optimizer, schedule = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    batches = iter(())
    for _ in range(steps):
        batch = next(batches, None)
        if batch is None:
            batches = iter(datamodule.train_dataloader())
            batch = next(batches)
        loss = lit.model(batch["input_ids"], labels=batch["labels"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lit.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
    with torch.no_grad():
        losses = [lit.model(b["input_ids"], labels=b["labels"]) for loader in datamodule.val_dataloader()
                  for b in loader]
    return torch.stack(losses).mean().item()


@pytest.mark.integration
def test_muon_ends_below_its_adamw_twin(tiny_datamodule):
    """200 steps of a small ResFormer (2 layers, d=32), the same lr, seed, data and schedule; only the optimizer
    differs. Measured: validation loss 1.285 under Muon against 1.338 under AdamW (lr 3e-3, one thread, ~13 s); the
    same ordering through `lit-resformer fit` (1.333 against 1.379 at lr 3e-3, 1.174 against 1.186 at 8e-3)."""
    datamodule = tiny_datamodule()
    datamodule.prepare_data()
    datamodule.setup("fit")
    losses, threads = {}, torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small only loses to threads (10x slower on 2 busy cores)
    try:
        for optimizer in ("adamw", "muon"):
            torch.manual_seed(0)
            config = {**SMALL, "vocab_size": datamodule.vocab_size, "residual": {"target": "v"}}
            lit = module(config, max_steps=200, optimizer=optimizer, lr=3e-3, warmup_steps=20)
            losses[optimizer] = _train(lit, datamodule, 200)
    finally:
        torch.set_num_threads(threads)
    assert math.isfinite(losses["muon"])
    assert losses["muon"] < losses["adamw"], losses


MUON = {"optimizer": "muon", "lr": 3e-3, "warmup_steps": 3}


@pytest.mark.integration
def test_muon_logs_every_group_lr_and_resumes_exactly(tmp_path, tiny_corpus, data_cache):
    """SIGKILL after the step-4 checkpoint of a Muon run, resume with --ckpt_path last: the same losses, bit for bit
    (Muon's momentum buffers and AdamW's moments come back from the checkpoint)."""
    config = experiment(tmp_path, tiny_corpus, data_cache, trainer={"max_steps": 8, "val_check_interval": 4},
                        model={**MUON, "config": {**{k: v for k, v in SMALL.items() if k != "vocab_size"},
                                                  "residual": {"target": "v", "learnable": "tied"}}})
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    fit(config, straight)
    metrics = read_metrics(straight)
    for name in ("muon", "head", "embed", "mix", "no_decay"):
        assert len(metrics[f"lr/{name}"]) == 8, name
    peak = dict(metrics["lr/muon"])[3] / dict(metrics["lr/no_decay"])[3]
    assert peak == pytest.approx(MUON_LR_MULTIPLIERS["muon"])
    assert metrics["train/lr"] == metrics["lr/muon"]  # the first group's, as before
    fit_killed_at_step_5(config, crashed)
    fit(config, crashed, "--ckpt_path", "last")
    resumed = read_metrics(crashed)
    assert resumed["train/loss"] == metrics["train/loss"]
    assert resumed["val/loss"] == metrics["val/loss"]
    assert resumed["lr/mix"] == metrics["lr/mix"]


@pytest.mark.integration
def test_resuming_under_another_optimizer_isrefused(tmp_path, tiny_corpus, data_cache):
    config = experiment(tmp_path, tiny_corpus, data_cache, trainer={"max_steps": 2})
    fit(config, tmp_path / "run")
    with pytest.raises(ValueError, match="trained with model.optimizer='adamw'"):
        fit(config, tmp_path / "run", "--ckpt_path", "last", "--trainer.max_steps", "3", "--model.optimizer", "muon")


@pytest.mark.parametrize("shape", [(24, 24), (16, 40), (40, 16)])
def test_float32_newton_schulz_is_torchs_iteration_without_the_bfloat16_rounding(shape):
    from torch.optim import _muon

    torch.manual_seed(0)
    grad = torch.randn(shape)
    ours = newton_schulz_in_float32(grad, (3.4445, -4.7750, 2.0315), 5, 1e-7)
    torchs = _muon._zeropower_via_newtonschulz(grad, (3.4445, -4.7750, 2.0315), 5, 1e-7).float()
    assert ours.dtype == torch.float32 and ours.shape == grad.shape
    # bfloat16 keeps 8 bits of mantissa: the two agree to its rounding, and ours is not torch's bf16 result itself
    assert torch.allclose(ours, torchs, atol=0.05) and not torch.equal(ours, torchs)
    # the iteration's singular values land in roughly (0.5, 1.5), as torch's docstring says of its own
    singular = torch.linalg.svdvals(ours)
    assert singular.min() > 0.3 and singular.max() < 1.5


def test_muon_steps_with_the_float32_iteration_on_cpu_and_restores_torchs():
    from torch.optim import _muon

    torch.manual_seed(0)
    matrix, bias = torch.nn.Parameter(torch.randn(8, 12)), torch.nn.Parameter(torch.zeros(8))
    optimizer = MuonWithAdamW([{"params": [matrix], "muon": True}, {"params": [bias]}], lr=0.02, betas=(0.9, 0.95),
                              eps=1e-8, momentum=0.95)
    matrix.grad, bias.grad = torch.randn(8, 12), torch.randn(8)
    start, grad = matrix.detach().clone(), matrix.grad.clone()
    optimizer.step()
    # Nesterov momentum from an empty buffer: update = grad.lerp(0.05 grad, 0.95); Muon's lr is scaled by
    # sqrt(max(1, 8 / 12)) = 1 and its decoupled weight decay is torch's default 0.1
    update = newton_schulz_in_float32(grad.lerp(0.05 * grad, 0.95), (3.4445, -4.7750, 2.0315), 5, 1e-7)
    torch.testing.assert_close(matrix.detach(), start * (1 - 0.02 * 0.1) - 0.02 * update, atol=1e-7, rtol=0)
    assert _muon._zeropower_via_newtonschulz is not newton_schulz_in_float32
