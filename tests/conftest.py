"""Shared fixtures: a tiny synthetic two-domain corpus, one data cache and one trained tiny run for the session, the
repository's grids loaded once, an LMDataModule factory, and the fake trainer the grid runner tests drive. Helpers
that are plain functions live in tests/helpers/."""

import json
import os
import random
import signal
import sys
import tempfile

import pytest

from lit_resformer.provenance import ALLOW_DIRTY_ENV
from lit_resformer.verdicts.verdict_cache import VERDICT_CACHE_ENV
from tests.helpers.fake_trainer import FAKE_TRAINER
from tests.helpers.repository_grids import repository_grid as cached_repository_grid

# The tests' grids train throwaway runs from whatever the checkout holds, uncommitted changes included (each run still
# records its patch); tests/grids/test_runner.py checks the refusal itself.
os.environ.setdefault(ALLOW_DIRTY_ENV, "1")
# Judged grids are cached by content (lit_resformer.verdicts.verdict_cache): the tests' throwaway grids keep theirs out of the
# user's cache, in one folder per test session.
os.environ.setdefault(VERDICT_CACHE_ENV, tempfile.mkdtemp(prefix="lit-resformer-verdicts-"))

_ALPHA_WORDS = "the a river stone bright quiet morning walks over under north song light old".split()
_BETA_WORDS = "def return if else for in range self value list dict none true false import".split()


def _sentences(words: list[str], rng: random.Random, count: int) -> str:
    return " ".join(
        " ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) + "." for _ in range(count)
    )


def write_tiny_corpus(folder, documents_per_domain: int = 60, seed: int = 0):
    """alpha.txt (blank-line separated prose-like documents) and beta.jsonl (code-like records)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    alpha = [_sentences(_ALPHA_WORDS, rng, rng.randint(2, 5)) for _ in range(documents_per_domain)]
    (folder / "alpha.txt").write_text("\n\n".join(alpha) + "\n", encoding="utf-8")
    with (folder / "beta.jsonl").open("w", encoding="utf-8") as out:
        for _ in range(documents_per_domain):
            out.write(json.dumps({"text": _sentences(_BETA_WORDS, rng, rng.randint(2, 5))}) + "\n")
    return folder


@pytest.fixture(autouse=True)
def _ctrl_c_raises_keyboard_interrupt():
    """Lightning ignores SIGINT once a fit was interrupted in-process (so that shutdown is not interrupted) and leaves
    it so, as does a shell starting pytest in the background; the processes a test starts would inherit that and
    never see the Ctrl-C the test sends them."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    return write_tiny_corpus(tmp_path_factory.mktemp("tiny_corpus"))


@pytest.fixture(scope="session")
def gpu_tier_corpus(tmp_path_factory):
    """Stands in for the code corpus the GPU tier writes on its machine: any local text file passes validation."""
    corpus = tmp_path_factory.mktemp("gpu_tier_corpus") / "python.jsonl"
    corpus.write_text("".join(f'{{"text": "def f{i}(): return {i}"}}\n' for i in range(50)))
    return corpus


@pytest.fixture(scope="session")
def repository_grid(gpu_tier_corpus):
    """configs/grids/<relative> -> its Grid, loaded once (tests/helpers/repository_grids.py); the GPU tier and
    evidence/fig14, which train on code, read the stand-in code corpus."""
    def load(relative: str):
        on_code_corpus = relative.startswith("gpu/") or relative == "evidence/fig14.yaml"
        return cached_repository_grid(relative, str(gpu_tier_corpus) if on_code_corpus else None)

    return load


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory):
    """One cache for the session, so the tiny corpus's BPE is trained once."""
    return tmp_path_factory.mktemp("lit_resformer_cache")


@pytest.fixture
def tiny_datamodule(tiny_corpus, data_cache):
    """Factory: LMDataModule over the tiny corpus with small defaults; keyword arguments override them."""
    from lit_resformer.data import LMDataModule

    def make(**overrides):
        args = dict(
            source="local",
            path=str(tiny_corpus),
            bpe_vocab_size=300,
            seq_len=16,
            micro_batch_size=4,
            holdout_fraction=0.05,
            cache_dir=str(data_cache),
        )
        args.update(overrides)
        return LMDataModule(**args)

    return make


@pytest.fixture
def fake(tmp_path):
    """The command line of the fake trainer (tests/helpers/fake_trainer.py), written to this test's folder."""
    script = tmp_path / "fake_trainer.py"
    script.write_text(FAKE_TRAINER)
    return [sys.executable, str(script), "fit"]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, tiny_corpus, data_cache):
    """A vanilla run of two steps through `lit-resformer fit`, trained once a session: its checkpoint is what users
    evaluate. Tests read it and never write into it."""
    from lit_resformer.cli import main

    root = tmp_path_factory.mktemp("eval_run")
    config = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": 1, "max_steps": 2, "val_check_interval": 2,
                    "check_val_every_n_epoch": None, "num_sanity_val_steps": 0, "enable_progress_bar": False,
                    "enable_model_summary": False},
        "model": {"config": {"n_layer": 2, "n_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64},
                  "lr": 3e-3, "warmup_steps": 1},
        "data": {"source": "local", "path": str(tiny_corpus), "bpe_vocab_size": 300, "seq_len": 16,
                 "micro_batch_size": 4, "holdout_fraction": 0.05, "cache_dir": str(data_cache)},
    }
    (root / "experiment.yaml").write_text(json.dumps(config))  # JSON is YAML
    main(["fit", "--config", str(root / "experiment.yaml"), "--trainer.default_root_dir", str(root / "vanilla")])
    return root / "vanilla"


# The integration tier (`make test-all`) is marked where each test is written (@pytest.mark.integration); these are
# marked here, their module being in other hands: each reads every repository grid, or the committed results.
INTEGRATION = {
    "test_claims.py": {
        "test_every_shipped_grid_states_its_claims",  # every grid file of the repository, loaded and resolved
        "test_reproduction_tier_trains_a_million_tokens_and_validates_on_the_whole_split",  # every repro grid
        "test_fig10_judges_the_identity_mapping_against_eq4_and_eq2",  # repository grids
        "test_committed_results_keep_their_verdicts_deltas_and_intervals",  # the scoreboard over docs/results
    },
}


# Module fixtures that take tens of seconds (the scoreboard over docs/results, every variant exported and checked in
# plain transformers): the tests that share one run on one pytest-xdist worker (--dist loadgroup), which computes it
# once. Without pytest-xdist (`-p no:xdist`) there are no workers to group, nor an `xdist_group` marker to mark with.
ONE_WORKER_FIXTURES = ("committed", "exported", "checked")


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config, items):
    grouped = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if item.originalname in INTEGRATION.get(item.path.name, ()):
            item.add_marker(pytest.mark.integration)
        for fixture in ONE_WORKER_FIXTURES if grouped else ():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(f"{item.path.stem}:{fixture}"))


def pytest_configure(config):
    """Under pytest-xdist each worker computes with one thread (and so do the processes its tests start): on two cores
    two workers of two threads each would oversubscribe the cores and run slower than one worker."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
