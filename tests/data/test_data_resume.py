"""The training order follows the run's seed (or an explicit data.seed), and resuming from a checkpoint continues it
exactly, within and across epochs."""

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torchdata.stateful_dataloader import StatefulDataLoader

from lit_resformer.cli import main
from lit_resformer.runs.run_dir import RunDir
from tests.helpers.experiments import tiny_experiment

TOTAL_STEPS = 20


class RecordingModel(L.LightningModule):
    """A tiny bigram model that remembers every input batch it trained on."""

    def __init__(self, vocab_size: int, ask_estimated_steps: bool = False):
        super().__init__()
        self.bigram = torch.nn.Embedding(vocab_size, vocab_size)
        self.ask_estimated_steps = ask_estimated_steps
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch["input_ids"].clone())
        logits = self.bigram(batch["input_ids"])
        return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())

    def configure_optimizers(self):
        if self.ask_estimated_steps:
            # A cosine schedule sized from the trainer reads this, which builds the train loader early
            # (before the checkpoint's loader state is read: Lightning issue #20550).
            assert self.trainer.estimated_stepping_batches == TOTAL_STEPS
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(datamodule, max_steps, ask_estimated_steps, checkpoint_dir=None, ckpt_path=None):
    model = RecordingModel(datamodule.vocab_size, ask_estimated_steps)
    callbacks = []
    if checkpoint_dir is not None:
        callbacks.append(ModelCheckpoint(dirpath=checkpoint_dir, every_n_train_steps=1, save_top_k=-1))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        # With max_epochs set, estimated_stepping_batches has to build the train loader to count its batches.
        max_epochs=100 if ask_estimated_steps else None,
        logger=False,
        callbacks=callbacks,
        enable_checkpointing=checkpoint_dir is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    return model.seen


@pytest.mark.integration
@pytest.mark.parametrize("ask_estimated_steps", [False, True])
def test_resume_continues_the_exact_batch_order(tiny_datamodule, tmp_path, ask_estimated_steps):
    # 561 train sequences / 64 = 8 batches per epoch: 20 steps cross two epoch boundaries.
    def make():
        return tiny_datamodule(micro_batch_size=64)

    straight = _fit(make(), TOTAL_STEPS, ask_estimated_steps, checkpoint_dir=tmp_path)
    assert len(straight) == TOTAL_STEPS
    assert not torch.equal(straight[0], straight[8]), "every epoch must be reshuffled"

    for stop in (5, 8, 11):  # mid first epoch, exactly at the epoch boundary, mid second epoch
        checkpoint = next(tmp_path.glob(f"*step={stop}.ckpt"))
        resumed = _fit(make(), TOTAL_STEPS, ask_estimated_steps, ckpt_path=str(checkpoint))
        assert len(resumed) == TOTAL_STEPS - stop
        for step, (expected, got) in enumerate(zip(straight[stop:], resumed, strict=True), start=stop):
            assert torch.equal(expected, got), f"resumed from step {stop}: batch of step {step} differs"


def test_train_loader_is_stateful_and_seeded(tiny_datamodule):
    first, second = tiny_datamodule(seed=1), tiny_datamodule(seed=1)
    loader = first.train_dataloader()
    assert isinstance(loader, StatefulDataLoader)
    batches = iter(loader)
    next(batches)
    state = loader.state_dict()
    expected = next(batches)["input_ids"]

    resumed = second.train_dataloader()
    resumed.load_state_dict(state)
    assert torch.equal(next(iter(resumed))["input_ids"], expected)
    other_seed = next(iter(tiny_datamodule(seed=2).train_dataloader()))["input_ids"]
    assert not torch.equal(next(iter(tiny_datamodule(seed=1).train_dataloader()))["input_ids"], other_seed)


def _first_epoch_order(datamodule) -> list[int]:
    return list(datamodule.train_dataloader().sampler)


@pytest.fixture
def run_seed(monkeypatch):
    """Seeds the run as LightningCLI does (`seed_everything`); the environment is restored afterwards."""
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    return lambda seed: L.seed_everything(seed, verbose=False)


def test_training_order_follows_the_run_seed_unless_data_seed_is_set(tiny_datamodule, run_seed):
    run_seed(1)
    seed1 = _first_epoch_order(tiny_datamodule())
    assert seed1 == _first_epoch_order(tiny_datamodule())  # same seed, same order
    assert seed1 == _first_epoch_order(tiny_datamodule(seed=1))
    run_seed(2)
    seed2 = _first_epoch_order(tiny_datamodule())
    assert seed2 != seed1 and sorted(seed2) == sorted(seed1)  # another seed: another order of the same sequences
    # an explicit data seed decouples the order from the run's seed (which then varies only the initialisation)
    assert _first_epoch_order(tiny_datamodule(seed=1)) == seed1
    run_seed(3)
    assert _first_epoch_order(tiny_datamodule(seed=2)) == seed2
    with pytest.raises(ValueError, match="data.seed: must be an integer >= 0 or null"):
        tiny_datamodule(seed=-1)


def test_resume_keeps_the_checkpoints_training_order(tiny_datamodule, run_seed):
    run_seed(5)
    original = tiny_datamodule()
    loader = original.train_dataloader()
    batches = iter(loader)
    next(batches)
    state = original.state_dict()
    assert state["data_seed"] == 5
    expected = next(batches)["input_ids"]

    run_seed(6)  # a resume under another run seed still continues the checkpoint's order
    resumed = tiny_datamodule()
    resumed.load_state_dict(state)
    assert resumed.data_seed == 5
    assert torch.equal(next(iter(resumed.train_dataloader()))["input_ids"], expected)


@pytest.mark.integration
def test_a_run_trains_in_the_order_of_its_seed_everything(tmp_path, tiny_corpus, data_cache, monkeypatch):
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    config = tiny_experiment(tmp_path / "experiment.yaml", tiny_corpus, data_cache, seed_everything=3,
                             trainer={"max_steps": 2, "val_check_interval": 2})
    main(["fit", "--config", str(config), "--trainer.default_root_dir", str(tmp_path / "run")])
    checkpoint = torch.load(RunDir(tmp_path / "run").last_checkpoint, weights_only=False)
    assert checkpoint["LMDataModule"]["data_seed"] == 3
