"""fit's check before Lightning is imported (lit_resformer.config.quick_check): its record is fit's parser, it refuses
what fit refuses in one line naming the field, it never refuses what fit runs, and it imports neither torch nor
Lightning. The ranges it checks are held to the classes that own them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lit_resformer.config import field_checks
from lit_resformer.config import quick_check as quick
from lit_resformer.config.field_checks import FIELD_RANGES, accelerator_problem, check_ranges
from lit_resformer.config.quick_check import FIELDS_FILE, quick_check, signature_text
from tests.helpers.config_cases import ACCEPTED, REFUSED, cell_config
from tests.helpers.experiments import tiny_experiment

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted((REPO / "configs" / "experiments").glob("*.yaml"))


def checked(tmp_path: Path, config: dict, *extra: str) -> str | None:
    """quick_check of `fit --config CONFIG EXTRA`: its refusal, or None when it passes (it must decide)."""
    path = tmp_path / "quick.yaml"
    path.write_text(yaml.safe_dump(config))
    try:
        cfg = quick_check("fit", ["--config", str(path), *extra])
    except ValueError as refusal:
        return str(refusal)
    assert cfg is not None, "the record is not current: python -m lit_resformer.training.config_checker"
    return None


def test_the_record_is_fits_parser():
    """FIELDS_FILE is what fit's parser is now, made with the installed Lightning and jsonargparse."""
    from lit_resformer.training.config_checker import fit_fields_record

    assert json.loads(FIELDS_FILE.read_text()) == fit_fields_record(), (
        "fit's parser changed: write its record again with `python -m lit_resformer.training.config_checker`")
    assert quick.current_record() is not None


def test_a_record_of_other_signatures_is_not_used(monkeypatch):
    monkeypatch.setattr(quick, "signature_digest", lambda path: "another")
    assert quick.current_record.__wrapped__() is None
    monkeypatch.setattr(quick, "current_record", lambda: None)
    assert quick_check("fit", ["--trainer.max_step", "5"]) is None  # fit's own parser decides


def test_signature_text_is_what_shapes_a_parser(tmp_path):
    source = tmp_path / "module.py"

    def text(code: str) -> str:
        source.write_text(code)
        return signature_text(source)

    base = text("X = 1\nclass A(B):\n    y: int = 2\n    def __init__(self, a: int = X):\n        self.a = a\n")
    assert text("X = 1\nclass A(B):\n    y: int = 2\n\n    def __init__(self, a: int = X):\n        self.a = a + 1\n"
                "    def other(self):\n        pass\n") == base  # bodies, other methods and layout do not count
    assert text("X = 2\nclass A(B):\n    y: int = 2\n    def __init__(self, a: int = X):\n        pass\n") != base
    assert text("X = 1\nclass A(B):\n    y: int = 2\n    def __init__(self, a: float = X):\n        pass\n") != base
    assert text("X = 1\nclass A(B):\n    y: str = 2\n    def __init__(self, a: int = X):\n        pass\n") != base


@pytest.mark.parametrize("case", REFUSED)
def test_what_fit_refuses_is_refused_before_lightning(tmp_path, tiny_corpus, data_cache, case):
    """The grid-and-fit table (tests/helpers/config_cases.py; fit itself refuses each in tests/config/test_experiment.py):
    refused here too."""
    assert checked(tmp_path, cell_config(tmp_path, tiny_corpus, data_cache, REFUSED[case])) is not None


@pytest.mark.parametrize("case", ACCEPTED)
def test_what_fit_runs_passes(tmp_path, tiny_corpus, data_cache, case):
    assert checked(tmp_path, cell_config(tmp_path, tiny_corpus, data_cache, ACCEPTED[case])) is None


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=[p.stem for p in EXPERIMENTS])
def test_every_shipped_experiment_passes_where_its_accelerator_is(experiment):
    """No shipped experiment is refused, but for a GPU where there is none (fit refuses it then too)."""
    from lit_resformer.config.files import load_experiment

    wants_gpu = load_experiment(experiment)["trainer"].get("accelerator") in ("gpu", "cuda")
    try:
        assert quick_check("fit", ["--config", str(experiment)]) is not None
        assert not (wants_gpu and field_checks.visible_gpus() == 0)
    except ValueError as refusal:
        assert wants_gpu and "no GPU can be used here" in str(refusal), refusal


# Refusals a newcomer meets first (a misspelt field, a negative or impossible setting), each in fit's words: (extra arguments, the words).
NAMED = {
    "an abbreviated option": (["--trainer.max_step", "5"],
                              "unknown key 'trainer.max_step': 'trainer' has no field 'max_step'; did you mean "
                              "['max_steps'"),
    "negative max_steps": (["--trainer.max_steps", "-5"],
                           "trainer.max_steps=-5 is out of range: it takes an integer >= -1 (-1: no limit)"),
    "an unknown residual target": (["--model.config.residual.target", "w"],
                                   "model.config.residual.target expects one of ['none', 'v', 'q', 'k'], got w"),
    "an unknown optimizer": (["--model.optimizer", "sgd"], "model.optimizer expects one of ['adamw', 'muon'], got sgd"),
    "a precision Lightning has not": (["--trainer.precision", "8"], "trainer.precision expects one of [64, 32, 16, "),
    "seq_len beyond the model": (["--data.seq_len", "128"], "data.seq_len=128 exceeds model.config.max_seq_len=64"),
    "a field of the model config": (["--model.config.n_head", "3"], "d_model=32 must be divisible by n_head=3"),
    "a config key in a file": ([], "unknown key 'model.lrr': LitResFormer has no field 'lrr'; did you mean ['lr'"),
    "a missing checkpoint": (["--ckpt_path", "/no/such.ckpt"], "--ckpt_path /no/such.ckpt is missing"),
}


@pytest.mark.parametrize("case", NAMED)
def test_refusals_name_the_field_and_what_it_takes(tmp_path, tiny_corpus, data_cache, case):
    extra, words = NAMED[case]
    config = yaml.safe_load(tiny_experiment(tmp_path / "base.yaml", tiny_corpus, data_cache).read_text())
    if case == "a config key in a file":
        config["model"]["lrr"] = 1e-3
    refusal = checked(tmp_path, config, *extra)
    assert refusal is not None and words in refusal and "\n" not in refusal, refusal


def test_options_inside_a_class_valued_field_are_left_to_fit(tmp_path, tiny_corpus, data_cache):
    config = yaml.safe_load(tiny_experiment(tmp_path / "base.yaml", tiny_corpus, data_cache).read_text())
    assert checked(tmp_path, config, "--trainer.callbacks+=crash.KillAtStep", "--trainer.callbacks.step=5",
                   "--trainer.callbacks.step", "5", "--allow-any-class") is None
    # a group as a file of its own is fit's parser's to read
    (tmp_path / "trainer.yaml").write_text("max_steps: 3\n")
    assert quick_check("fit", ["--config", str(tmp_path / "quick.yaml"), "--trainer", str(tmp_path / "trainer.yaml")
                               ]) is None


def test_the_check_imports_neither_torch_nor_lightning():
    code = ("import sys; from lit_resformer.config.quick_check import quick_check\n"
            "assert quick_check('fit', ['--config', 'configs/experiments/cpu-demo-resformer.yaml']) is not None\n"
            "print(sorted(m for m in ('torch', 'lightning', 'transformers', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------ the accelerator
def test_a_gpu_is_refused_where_torch_has_no_cuda(monkeypatch):
    monkeypatch.setattr(field_checks, "torch_build", lambda: {"version": "2.9.0+cpu", "cuda": None, "hip": None})
    assert "this torch (2.9.0+cpu) is built without CUDA" in accelerator_problem("gpu")
    assert "trainer.accelerator='cuda'" in accelerator_problem("cuda")
    assert accelerator_problem("cpu") is None and accelerator_problem("auto") is None
    assert accelerator_problem({"class_path": "lightning.pytorch.accelerators.CPUAccelerator"}) is None


def test_a_gpu_is_refused_where_none_is_visible_and_left_to_lightning_where_one_may_be(monkeypatch):
    monkeypatch.setattr(field_checks, "torch_build", lambda: {"version": "2.9.0+cu128", "cuda": "12.8", "hip": None})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "CUDA_VISIBLE_DEVICES='' hides every GPU" in accelerator_problem("gpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(field_checks.sys, "platform", "linux")
    monkeypatch.setattr(field_checks.Path, "exists", lambda self: False)
    assert "no GPU device" in accelerator_problem("gpu")
    monkeypatch.setattr(field_checks.Path, "exists", lambda self: str(self) == "/dev/nvidiactl")
    assert accelerator_problem("gpu") is None and field_checks.visible_gpus() is None


def test_lightning_agrees_there_is_no_gpu_here():
    """Where the check refuses a GPU on this machine, Lightning's Trainer does too."""
    from lightning.pytorch import Trainer

    if accelerator_problem("gpu") is None:
        pytest.skip("this machine may have a GPU")
    with pytest.raises(Exception, match="gpu|GPU|CUDA"):
        Trainer(accelerator="gpu", logger=False, enable_checkpointing=False)


# ------------------------------------------------------------------------------------------ ranges and their owners
# Each range's edge: (a value out of it, a value in it, the other settings the value needs).
EDGES = {
    "trainer.max_steps": (-2, -1, {}),
    "trainer.max_epochs": (-2, -1, {}),
    "trainer.num_nodes": (0, 1, {}),
    "trainer.reload_dataloaders_every_n_epochs": (-1, 0, {}),
    "checkpoint.save_top_k": (-2, -1, {}),
    "checkpoint.every_n_train_steps": (-1, 0, {}),
    "checkpoint.keep_steps": ([0], [1], {}),
    "data.seq_len": (0, 1, {}),
    "data.micro_batch_size": (0, 1, {}),
    "data.max_hub_tokens": (0, 1, {}),
    "data.num_workers": (-1, 0, {}),
    "data.val_sequences_per_domain": (0, 1, {}),
    "data.seed": (-1, 0, {}),
    "data.holdout_fraction": (0.5, 0.49, {}),
    "model.lr": (0.0, 1e-9, {}),
    "model.eps": (-1e-8, 1e-12, {}),
    "model.mix_lr": (0.0, 1e-3, {"config": {"size": "tiny", "residual": {"target": "v", "learnable": "scalar"}}}),
    "model.muon_lr_mult": (float("inf"), 2.0, {"optimizer": "muon"}),
    "model.head_lr_mult": (-1.0, 1.0, {}),
    "model.embed_lr_mult": (0.0, 1.0, {}),
    "model.value_embed_lr_mult": (0.0, 1.0, {"config": {"size": "tiny", "value_embed": {"layers": [1]}}}),
    "model.muon_momentum": (1.0, 0.0, {}),
    "model.warmup_steps": (-1, 0, {}),
    "model.final_lr_ratio": (1.01, 1.0, {}),
}


def built_by_owner(key: str, value, context: dict) -> None:
    """Build the class that takes `key` with `value`: an exception when it refuses it."""
    import torch
    from lightning.pytorch import Trainer

    from lit_resformer.data import LMDataModule
    from lit_resformer.training.checkpoint_saving import RunCheckpoint
    from lit_resformer.training.module import LitResFormer

    section, name = key.split(".", 1)
    if section == "trainer":
        Trainer(**{name: value}, logger=False, enable_checkpointing=False, accelerator="cpu")
    elif section == "checkpoint":
        RunCheckpoint(**{name: value})
    elif section == "data":
        LMDataModule(source="embedded", **{name: value})
    else:
        with torch.device("meta"):
            LitResFormer(**{"config": {"size": "tiny", "vocab_size": 300}, **context, name: value})


@pytest.mark.parametrize("key", FIELD_RANGES)
def test_each_range_is_its_classs_own(key):
    """The value out of range is refused by the check and by the class; the value at the edge by neither."""
    out, edge, context = EDGES[key]
    section, name = key.split(".", 1)

    def config(value):
        return {section: {name: value, **context}}

    with pytest.raises(ValueError, match=rf"^{key}=.* is out of range: it takes "):
        check_ranges(config(out))
    with pytest.raises(Exception):  # noqa: B017 - ValueError from the project's classes, Lightning's own otherwise
        built_by_owner(key, out, context)
    check_ranges(config(edge))
    built_by_owner(key, edge, context)


def test_every_range_has_its_edge():
    assert set(EDGES) == set(FIELD_RANGES)
