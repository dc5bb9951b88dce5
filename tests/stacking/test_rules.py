"""Which runs may share a stack: seeds, optimizer settings and the model's numbers may differ (the numbers only where
the compute dtype holds them exactly), nothing else; a run needs settings the stacked loop supports."""

from __future__ import annotations

import copy

import pytest
import yaml

from lit_resformer.stacking.rules import StackError, check_stack, stack_key, stack_problem
from lit_resformer.training.config_checker import ConfigChecker
from tests.helpers.experiments import experiment


@pytest.fixture(scope="module")
def resolved(tmp_path_factory, tiny_corpus, data_cache):
    """A run's resolved config (the tiny experiment, every field with its value)."""
    path = experiment(tmp_path_factory.mktemp("rules"), tiny_corpus, data_cache)
    return ConfigChecker().resolved(yaml.safe_load(path.read_text()))


def changed(config: dict, **fields) -> dict:
    """A copy of `config` with dotted fields set."""
    config = copy.deepcopy(config)
    for dotted, value in fields.items():
        *parents, last = dotted.split("__")
        section = config
        for key in parents:
            section = section[key]
        section[last] = value
    return config


def test_seeds_optimizer_settings_and_the_models_numbers_stack(resolved):
    others = [
        changed(resolved, seed_everything=7),
        changed(resolved, data__seed=3, trainer__default_root_dir="elsewhere"),
        changed(resolved, model__lr=1e-4, model__weight_decay=0.0, model__warmup_steps=9, model__optimizer="muon"),
        changed(resolved, trainer__gradient_clip_val=0.5),
        changed(resolved, model__config__residual__lam=0.2, model__config__residual__self_weight=1.0),
        changed(resolved, model__config__init_std=0.01, model__config__rope_theta=500.0),
    ]
    for other in others:
        assert stack_key(other) == stack_key(resolved)
    check_stack([resolved, *others], [f"run{i}" for i in range(len(others) + 1)])


def test_anything_else_is_refused_by_name(resolved):
    cases = {
        "model.config.n_layer": changed(resolved, model__config__n_layer=3),
        "model.config.residual.target": changed(resolved, model__config__residual__target="k"),
        "data.micro_batch_size": changed(resolved, data__micro_batch_size=8),
        "trainer.max_steps": changed(resolved, trainer__max_steps=20),
        "model.config.neutreno_on": changed(resolved, model__config__neutreno_lambda=0.4),  # the term on in one only
    }
    for field, other in cases.items():
        assert stack_key(other) != stack_key(resolved)
        with pytest.raises(StackError, match=rf"b differs from a in .*{field}"):
            check_stack([resolved, other], ["a", "b"])


def test_under_bf16_a_number_bf16_cannot_hold_must_be_equal(resolved):
    bf16 = changed(resolved, trainer__precision="bf16-mixed")
    half = changed(bf16, model__config__residual__lam=0.25)  # exact in bf16
    fifth = changed(bf16, model__config__residual__lam=0.2)  # not: a stacked run would train with 0.2002
    assert stack_key(half) == stack_key(bf16)
    with pytest.raises(StackError, match="model.config.residual.lam: 0.5 -> 0.2"):
        check_stack([bf16, fifth], ["a", "b"])
    check_stack([fifth, changed(fifth, seed_everything=1)], ["a", "b"])  # equal, it stacks


def test_settings_the_stacked_loop_does_not_support_are_named(resolved):
    assert stack_problem(resolved) is None
    cases = {
        "trainer.accumulate_grad_batches=2": changed(resolved, trainer__accumulate_grad_batches=2),
        "trainer.devices=2": changed(resolved, trainer__devices=2),
        "trainer.callbacks=": changed(resolved, trainer__callbacks=[{"class_path": "x.Y"}]),
        "trainer.val_check_interval=0.5": changed(resolved, trainer__val_check_interval=0.5),
        "checkpoint.monitor='val/loss'": changed(resolved, checkpoint__monitor="val/loss"),
        "global_batch_tokens=128": changed(resolved, global_batch_tokens=128),
        "trainer.precision='16-mixed'": changed(resolved, trainer__precision="16-mixed"),
    }
    for message, config in cases.items():
        assert message in stack_problem(config)
        with pytest.raises(StackError, match="a stacked run needs"):
            check_stack([config], ["a"])
