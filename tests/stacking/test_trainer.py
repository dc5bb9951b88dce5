"""`lit-resformer fit-stacked` against `lit-resformer fit`: a stacked run is the solo run, step by step (fp32, within
1e-5), in its logged metrics and its checkpoints; killed and resumed (stacked, or alone from the stack's checkpoint,
or stacked from solo checkpoints) it still is; cells of different λ stack; runs that cannot stack are refused before
anything is written; a run that diverges leaves the stack without stopping the others."""

from __future__ import annotations

import shutil

import pytest
import torch
import yaml

from lit_resformer import load_checkpoint
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.stacking.engine import RunStack
from lit_resformer.stacking.trainer import RunSpec, StackTrainer
from tests.helpers.experiments import (
    fit,
    fit_killed_at_step_5,
    fit_stacked,
    fit_stacked_killed_at_step,
    read_metrics,
    tiny_experiment,
)

TOLERANCE = 1e-5
STEPS = 50
SEEDS = (0, 1)
# Timing and what is measured in wall time: differ between any two runs.
TIMING = ("train/time", "train/device/batches_per_sec", "train/device/samples_per_sec", "train/device/items_per_sec",
          "train/device/flops_per_sec")
# What Lightning's throughput monitor counts from the start of each attempt: a resumed run counts again from 1.
PER_ATTEMPT = ("train/batches", "train/samples", "train/lengths")


def config(folder, corpus, cache, seed: int, steps: int = STEPS, name: str = "run", **model):
    return tiny_experiment(folder / f"{name}-seed{seed}-{steps}.yaml", corpus, cache, seed_everything=seed,
                           trainer={"max_steps": steps, "val_check_interval": 10},
                           checkpoint={"every_n_train_steps": 10},
                           model={"config": {"n_layer": 2, "n_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64,
                                             "residual": {"target": "v", **model}},
                                  "lr": 3e-3, "warmup_steps": 3},
                           data={"val_sequences_per_domain": 8})


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_corpus, data_cache):
    """Two seeds trained alone and stacked, STEPS steps each: {"configs", "solo", "stacked"} (run directories)."""
    root = tmp_path_factory.mktemp("stacked")
    configs = [config(root, tiny_corpus, data_cache, seed) for seed in SEEDS]
    solo = [root / f"solo{seed}" for seed in SEEDS]
    stacked = [root / f"stacked{seed}" for seed in SEEDS]
    for path, run in zip(configs, solo, strict=True):
        fit(path, run)
    fit_stacked(list(zip(configs, stacked, strict=True)))
    return {"root": root, "configs": configs, "solo": solo, "stacked": stacked}


def assert_same_metrics(solo, stacked, steps=None, resumed=False):
    a, b = read_metrics(solo), read_metrics(stacked)
    assert set(a) == set(b)
    for name in set(a) - set(TIMING) - set(PER_ATTEMPT if resumed else ()):
        assert [s for s, _ in a[name]] == [s for s, _ in b[name]], name
        worst = max((abs(x - y) for (_, x), (_, y) in zip(a[name], b[name], strict=True)), default=0.0)
        assert worst < TOLERANCE, (name, worst)
    if steps is not None:
        assert [s for s, _ in b["train/loss"]] == list(range(steps))


def flat(value, prefix=""):
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{prefix}{key}/").items()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{prefix}{i}/").items()}
    return {prefix: value}


@pytest.mark.integration
def test_stacked_runs_log_their_solo_runs_step_by_step(trained):
    for solo, stacked in zip(trained["solo"], trained["stacked"], strict=True):
        assert_same_metrics(solo, stacked, STEPS)
    # each run its own data order and initialisation: the two seeds differ
    first, second = (read_metrics(run)["train/loss"] for run in trained["stacked"])
    assert first[0][1] != second[0][1]


@pytest.mark.integration
def test_stacked_checkpoints_are_the_solo_runs_checkpoints(trained):
    """Every checkpoint holds what the solo run's holds: the same entries, the same loop counters, callback and data
    states, and weights and optimizer states within the tolerance; load_checkpoint loads it."""
    for solo, stacked in zip(trained["solo"], trained["stacked"], strict=True):
        files = sorted(p.name for p in RunDir(solo).checkpoints_dir.glob("*.ckpt"))
        assert files == sorted(p.name for p in RunDir(stacked).checkpoints_dir.glob("*.ckpt"))
        for name in files:
            a = flat(torch.load(RunDir(solo).checkpoints_dir / name, weights_only=True))
            b = flat(torch.load(RunDir(stacked).checkpoints_dir / name, weights_only=True))
            assert set(a) == set(b)
            for key in a:
                if isinstance(a[key], torch.Tensor):
                    assert a[key].shape == b[key].shape and a[key].dtype == b[key].dtype, key
                    assert torch.allclose(a[key].double(), b[key].double(), rtol=0, atol=1e-4), key
                elif isinstance(a[key], str) and str(solo) in a[key]:  # paths of the run's own files
                    assert b[key] == a[key].replace(str(solo), str(stacked)), key
                else:
                    assert a[key] == b[key], key
        model, _ = load_checkpoint(RunDir(stacked).last_checkpoint)
        reference, _ = load_checkpoint(RunDir(solo).last_checkpoint)
        tokens = torch.arange(16)[None]
        assert (model(tokens) - reference(tokens)).abs().max() < 1e-4


@pytest.mark.integration
def test_a_killed_stack_resumes_as_its_solo_runs_stacked_or_alone(trained, tmp_path):
    """Killed at step 25 (SIGKILL, after the step-20 checkpoint): resumed stacked, each run logs its solo run's
    losses; resumed alone by `fit --ckpt_path last` from the stack's checkpoint, so does it."""
    killed = [tmp_path / f"killed{seed}" for seed in SEEDS]
    fit_stacked_killed_at_step(list(zip(trained["configs"], killed, strict=True)), 25)
    assert read_metrics(killed[0])["train/loss"][-1][0] < STEPS - 1  # it died mid-run
    alone = tmp_path / "alone0"
    shutil.copytree(killed[0], alone)
    fit_stacked(list(zip(trained["configs"], killed, strict=True)), "--ckpt_path", "last")
    for solo, run in zip(trained["solo"], killed, strict=True):
        assert len(RunDir(run).metric_files()) == 2  # a second csv version for the resumed attempt
        assert_same_metrics(solo, run, STEPS, resumed=True)
    fit(trained["configs"][0], alone, "--ckpt_path", "last")
    assert_same_metrics(trained["solo"][0], alone, STEPS, resumed=True)


@pytest.mark.integration
def test_solo_runs_killed_mid_run_resume_stacked(trained, tmp_path):
    """Killed alone at step 5, after their step-4 checkpoints, and resumed stacked: their solo runs' losses."""
    configs = []
    for path in trained["configs"]:  # the same runs, checkpointed every 2 steps
        config_dict = yaml.safe_load(path.read_text())
        config_dict["checkpoint"]["every_n_train_steps"] = 2
        configs.append(tmp_path / path.name)
        configs[-1].write_text(yaml.safe_dump(config_dict))
    killed = [tmp_path / f"killed{seed}" for seed in SEEDS]
    for path, run in zip(configs, killed, strict=True):
        fit_killed_at_step_5(path, run)
        assert RunDir(run).has_checkpoint()
    fit_stacked(list(zip(configs, killed, strict=True)), "--ckpt_path", "last")
    for solo, run in zip(trained["solo"], killed, strict=True):
        assert [s for s, _ in read_metrics(run)["train/loss"]][:1] == [0]
        assert_same_metrics(solo, run, STEPS, resumed=True)


@pytest.mark.integration
def test_cells_of_different_lambda_stack_and_match_their_solo_runs(tmp_path, tiny_corpus, data_cache):
    """Fig. 8's λ: V'_n = V_n + λ V_1 with λ 0.5 and 0.2, one seed each, trained alone and stacked."""
    configs = [config(tmp_path, tiny_corpus, data_cache, 0, 20, f"lam{lam}", self_weight=1.0, lam=lam)
               for lam in (0.5, 0.2)]
    solo = [tmp_path / f"solo-lam{lam}" for lam in (0.5, 0.2)]
    stacked = [tmp_path / f"stacked-lam{lam}" for lam in (0.5, 0.2)]
    for path, run in zip(configs, solo, strict=True):
        fit(path, run)
    fit_stacked(list(zip(configs, stacked, strict=True)))
    for a, b in zip(solo, stacked, strict=True):
        assert_same_metrics(a, b, 20)
    assert read_metrics(stacked[0])["train/loss"][-1] != read_metrics(stacked[1])["train/loss"][-1]


def test_runs_that_cannot_stack_are_refused_before_anything_is_written(tmp_path, tiny_corpus, data_cache, capsys):
    first = config(tmp_path, tiny_corpus, data_cache, 0)
    other = tiny_experiment(tmp_path / "deeper.yaml", tiny_corpus, data_cache, seed_everything=1,
                            model={"config": {"n_layer": 3, "n_head": 2, "d_model": 32, "ffn_dim": 64,
                                              "max_seq_len": 64}})
    runs = [(first, tmp_path / "a"), (other, tmp_path / "b")]
    with pytest.raises(SystemExit) as exit_info:
        fit_stacked(runs)
    message = str(exit_info.value)
    assert "cannot train in one stack" in message and "model.config.n_layer: 2 -> 3" in message
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.integration
def test_a_run_that_diverges_leaves_the_stack_and_the_others_go_on(trained, tmp_path, monkeypatch):
    """Seed 0's loss made non-finite from step 7: it is recorded as diverged at step 7 (as `fit` alone records it) and
    logs nothing after; seed 1 trains on, as its solo run."""
    losses = RunStack.losses
    calls = []

    def failing(self, inputs, labels):
        values = losses(self, inputs, labels)
        calls.append(None)
        return values + torch.tensor([float("nan") if len(calls) > 7 else 0.0, 0.0])

    monkeypatch.setattr(RunStack, "losses", failing)
    runs = [tmp_path / f"run{seed}" for seed in SEEDS]
    fit_stacked(list(zip(trained["configs"], runs, strict=True)))
    assert RunDir(runs[0]).diverged_step() == 7
    assert max(step for step, _ in read_metrics(runs[0])["train/loss"]) < 7
    assert_same_metrics(trained["solo"][1], runs[1], STEPS)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_a_graphed_stack_trains_as_its_solo_runs(tmp_path, tiny_corpus, data_cache):
    """On a GPU the stack's step is one CUDA graph (AdamW, fused and capturable): two seeds, 12 steps, fp32 (TF32
    matmuls, as the solo runs): each run's losses are its solo run's; its checkpoint resumes alone."""
    configs = [tiny_experiment(tmp_path / f"gpu{seed}.yaml", tiny_corpus, data_cache, seed_everything=seed,
                               trainer={"accelerator": "gpu", "max_steps": 12, "val_check_interval": 6},
                               checkpoint={"every_n_train_steps": 6}, data={"val_sequences_per_domain": 8})
               for seed in SEEDS]
    solo = [tmp_path / f"solo{seed}" for seed in SEEDS]
    stacked = [tmp_path / f"stacked{seed}" for seed in SEEDS]
    for path, run in zip(configs, solo, strict=True):
        fit(path, run)
    trainer = StackTrainer([RunSpec(path, run) for path, run in zip(configs, stacked, strict=True)])
    trainer.prepare()
    assert trainer.graphed
    trainer.fit()
    for a, b in zip(solo, stacked, strict=True):
        expected, got = read_metrics(a)["train/loss"], read_metrics(b)["train/loss"]
        assert [s for s, _ in got] == list(range(12))
        assert max(abs(x - y) for (_, x), (_, y) in zip(expected, got, strict=True)) < 1e-3
    resumed = tmp_path / "resumed0"
    shutil.copytree(stacked[0], resumed)
    fit(configs[0], resumed, "--ckpt_path", "last", "--trainer.max_steps", "18")
    assert [s for s, _ in read_metrics(resumed)["train/loss"]] == list(range(18))
