"""Hostile and careless input: configs that would run code, bad values and files refused before compute with one line
naming what is wrong, and damaged run files and caches survived."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from helpers import chromium

from lit_resformer.cli import main
from lit_resformer.grids import GridError, load_grid
from lit_resformer.training.config_checker import ConfigChecker
from tests.helpers.eval_data import ARC_ROWS, arc_data_dir
from tests.helpers.experiments import tiny_experiment
from tests.helpers.fake_trainer import FAKE_TRAINER, THREE_CELLS, write_grid
from tests.helpers.grid_dirs import make_grid_dir, write_run

# ------------------------------------------------------------------------------------------ objects a config constructs


def command_callback(marker: Path) -> dict:
    """The attack: a Lightning callback whose hook is a shell command (submitit's CommandFunction)."""
    return {"class_path": "lightning.pytorch.callbacks.LambdaCallback",
            "init_args": {"on_fit_start": {"class_path": "submitit.helpers.CommandFunction",
                                           "init_args": {"command": ["sh", "-c", f"touch {marker}"]}}}}


def callable_callback(dotted: str) -> dict:
    return {"class_path": "lightning.pytorch.callbacks.LambdaCallback", "init_args": {"on_fit_start": dotted}}


# Each: trainer settings that name something a config may not construct, and the key the refusal must name.
UNTRUSTED_OBJECTS = {
    "shell command as a callback hook": (
        lambda marker: {"callbacks": [command_callback(marker)]},
        "trainer.callbacks[0].init_args.on_fit_start.class_path"),
    "builtin function as a callback hook": (
        lambda marker: {"callbacks": [callable_callback("builtins.print")]},
        "trainer.callbacks[0].init_args.on_fit_start"),
    "os function as a callback hook": (
        lambda marker: {"callbacks": [callable_callback("os.system")]},
        "trainer.callbacks[0].init_args.on_fit_start"),
    "file removal as the second callback's hook": (
        lambda marker: {"callbacks": [{"class_path": "lightning.pytorch.callbacks.LearningRateMonitor"},
                                      {"class_path": "lightning.pytorch.callbacks.LambdaCallback",
                                       "init_args": {"on_exception": "shutil.rmtree"}}]},
        "trainer.callbacks[1].init_args.on_exception"),
    "callable nested in an allowed strategy": (
        lambda marker: {"strategy": {"class_path": "lightning.pytorch.strategies.DDPStrategy",
                                     "init_args": {"ddp_comm_hook": "os.system"}}},
        "trainer.strategy.init_args.ddp_comm_hook"),
}


@pytest.fixture
def experiment(tmp_path, tiny_corpus, data_cache):
    """Factory: the tiny experiment YAML with `trainer` settings merged in."""
    def make(**trainer) -> Path:
        return tiny_experiment(tmp_path / "exp.yaml", tiny_corpus, data_cache, trainer={"max_steps": 1, **trainer})
    return make


@pytest.mark.parametrize("case", sorted(UNTRUSTED_OBJECTS))
def test_configs_cannot_construct_arbitrary_objects(tmp_path, experiment, capsys, case):
    """Refused by `fit` and by grid validation alike, before anything is built or written, naming the key and the
    allowed prefixes; the attack's command never runs."""
    settings, key = UNTRUSTED_OBJECTS[case]
    marker = tmp_path / "command-ran"
    path = experiment(**settings(marker))
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as refused:
        main(["fit", "--config", str(path), "--trainer.default_root_dir", str(run)])
    assert refused.value.code == 2
    first_line = capsys.readouterr().err.splitlines()[0]
    assert first_line.startswith(f"lit-resformer fit: error: {key}") and "lightning.pytorch.callbacks." in first_line
    assert "--allow-any-class" in first_line
    assert not run.exists() and not marker.exists()

    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"base": str(path), "baseline": "a", "cells": {"a": {}}}))
    with pytest.raises(GridError, match=f"cell 'a': {re.escape(key)}"):
        load_grid(grid)
    assert not marker.exists()


def test_the_attack_runs_only_when_the_user_lifts_the_limit_on_the_command_line(tmp_path, experiment):
    marker = tmp_path / "command-ran"
    path = experiment(callbacks=[command_callback(marker)])
    config = yaml.safe_load(path.read_text())
    assert ConfigChecker(allow_any_class=True).check(config)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"base": str(path), "baseline": "a", "cells": {"a": {}}}))
    assert load_grid(grid, allow_any_class=True).runs()
    # a config file cannot lift it itself: the flag is no config key
    with pytest.raises(GridError, match="unknown override key 'allow_any_class'"):
        grid.write_text(yaml.safe_dump({"base": str(path), "baseline": "a",
                                        "cells": {"a": {"allow_any_class": True}}}))
        load_grid(grid)
    main(["fit", "--allow-any-class", "--config", str(path), "--trainer.default_root_dir", str(tmp_path / "run")])
    assert marker.exists()  # proves the refusal above was the check, not a broken attack


def test_allowed_classes_pass(experiment):
    path = experiment(
        callbacks=[{"class_path": "lightning.pytorch.callbacks.EarlyStopping", "init_args": {"monitor": "val/loss"}},
                   {"class_path": "LearningRateMonitor"}],
        logger={"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "x"}},
        strategy={"class_path": "lightning.pytorch.strategies.DDPStrategy",
                  "init_args": {"cluster_environment": {
                      "class_path": "lightning.pytorch.plugins.environments.SLURMEnvironment"}}},
        profiler="simple",
    )
    cfg = ConfigChecker().check(yaml.safe_load(path.read_text()))
    assert cfg.trainer.callbacks[1].class_path == "lightning.pytorch.callbacks.LearningRateMonitor"


# ------------------------------------------------------------------------------------------ command-line mistakes
# Each: arguments of `fit` after the tiny experiment's --config, and what the one-line error must say.
BAD_ARGUMENTS = {
    "misspelt model field": (["--model.config.n_layr", "3"], "unknown key 'model.config.n_layr'.*did you mean \\['n_layer'\\]"),
    "misspelt data field": (["--data.seqlen", "8"], "unknown key 'data.seqlen'.*did you mean \\['seq_len'"),
    "misspelt training field": (["--model.lrr", "0.1"], "unknown key 'model.lrr'.*did you mean \\['lr'\\]"),
    "misspelt section": (["--trainr.max_steps", "3"], "unknown key 'trainr.max_steps'"),
    "text for an integer": (["--data.seq_len", "abc"], "data.seq_len expects a number \\(integer\\), got abc"),
    "value outside its choices": (["--model.config.residual.target", "w"],
                                  "model.config.residual.target expects one of \\['none', 'v', 'q', 'k'\\], got w"),
    "text for a number": (["--trainer.max_steps", "many"], "trainer.max_steps"),
    "unknown source": (["--data.source", "ftp"], "data.source"),
    # argparse would take these as trainer.max_steps and data.seq_len
    "abbreviated option": (["--trainer.max_step", "3"], "unknown key 'trainer.max_step'.*did you mean \\['max_steps'"),
    "abbreviated option with =": (["--data.seq=8"], "unknown key 'data.seq'.*did you mean \\['seq_len'"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_argument_mistakes_are_one_line_first(tmp_path, experiment, capsys, case):
    arguments, message = BAD_ARGUMENTS[case]
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as refused:
        main(["fit", "--config", str(experiment()), *arguments, "--trainer.default_root_dir", str(run)])
    assert refused.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert re.match(f"lit-resformer fit: error: .*{message}", lines[0]), lines[0]
    assert len(lines) == 1  # the error alone: no usage dump
    assert not run.exists()


@pytest.mark.parametrize("subcommand", ["validate", "test"])
def test_validate_and_test_refuse_abbreviated_options_too(tmp_path, experiment, capsys, subcommand):
    with pytest.raises(SystemExit) as refused:
        main([subcommand, "--config", str(experiment()), "--trainer.limit_val_batche", "1",
              "--trainer.default_root_dir", str(tmp_path / "run")])
    assert refused.value.code == 2
    assert "did you mean ['limit_val_batches'" in capsys.readouterr().err.splitlines()[0]


def test_a_missing_config_file_is_named_before_lightning_is_imported(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        main(["fit", "--config", str(tmp_path / "missing.yaml")])
    assert refused.value.code == 2
    assert capsys.readouterr().err == f"lit-resformer fit: error: --config {tmp_path / 'missing.yaml'}: no such file\n"


# ------------------------------------------------------------------------------------------ files that are no checkpoint
class _RunsCode:
    """Pickled, it would call os.system when loaded without weights_only."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def write_bad_checkpoint(kind: str, path: Path) -> Path:
    import torch

    if kind == "text":
        path.write_text("not a checkpoint\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        torch.save({"state_dict": {"w": torch.zeros(10_000)}, "hyper_parameters": {}}, path)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif kind == "code":
        torch.save({"state_dict": _RunsCode(path.with_suffix(".ran"))}, path)
    elif kind == "tensor":
        torch.save(torch.zeros(3), path)
    elif kind == "foreign dict":
        torch.save({"weights": torch.zeros(3)}, path)
    return path


BAD_CHECKPOINTS = ["text", "empty", "truncated", "code", "tensor", "foreign dict"]
CHECKPOINT_COMMANDS = {
    "eval": lambda ckpt, out: ["eval", "--ckpt", str(ckpt), "--tasks", "lrf_tiny_mc", "--out", str(out)],
    "analyze": lambda ckpt, out: ["analyze", "--ckpt", str(ckpt), "--out", str(out)],
    "export": lambda ckpt, out: ["export", "--ckpt", str(ckpt), "--to-hf", str(out)],
}


@pytest.mark.parametrize("command", sorted(CHECKPOINT_COMMANDS))
@pytest.mark.parametrize("kind", BAD_CHECKPOINTS)
def test_a_file_that_is_no_checkpoint_is_named_in_one_line(tmp_path, command, kind):
    ckpt = write_bad_checkpoint(kind, tmp_path / "model.ckpt")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as refused:
        main(CHECKPOINT_COMMANDS[command](ckpt, out))
    message = str(refused.value.code)
    assert message.startswith(f"lit-resformer {command}: error: {ckpt}") and "\n" not in message, message
    assert "weights_only" not in message and "Traceback" not in message
    assert not out.exists() and not ckpt.with_suffix(".ran").exists()


# ------------------------------------------------------------------------------------------ resuming with another config
def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and modification time: equal states mean nothing was written."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_corpus, data_cache):
    """A tiny run trained 2 steps with a tokenizer.json file (so swapping the file's contents can be tried)."""
    from lit_resformer.corpora.sources import local_documents
    from lit_resformer.data.tokenizer import train_bpe

    root = tmp_path_factory.mktemp("trained")
    tokenizer = root / "tokenizer.json"
    train_bpe((d.text for d in local_documents(tiny_corpus)), 300).save(str(tokenizer))
    experiment = tiny_experiment(root / "exp.yaml", tiny_corpus, data_cache, trainer={"max_steps": 2},
                                 data={"tokenizer": str(tokenizer)})
    main(["fit", "--config", str(experiment), "--trainer.default_root_dir", str(root / "run")])
    return root


RESUME_MISMATCHES = {
    "SVFormer flags on a vanilla-v checkpoint": (["--model.config.share.svformer", "true",
                                                  "--model.config.residual.target", "none"],
                                                 "model.config.residual.target: 'v' -> 'none'.*share.svformer"),
    "another width": (["--model.config.d_model", "64"], "model.config.d_model: 32 -> 64"),
    "another seq_len": (["--data.seq_len", "32"], "data.seq_len: 16 -> 32"),
    "another tokenizer": (["--data.tokenizer", "bpe"], "data.tokenizer: '.*tokenizer.json' -> 'bpe'"),
    "another corpus": (["--data.holdout_fraction", "0.1"], "data.holdout_fraction: 0.05 -> 0.1"),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(RESUME_MISMATCHES))
def test_resuming_with_another_model_or_data_config_isrefused(trained, capsys, case):
    arguments, message = RESUME_MISMATCHES[case]
    before = tree_state(trained / "run")
    with pytest.raises(SystemExit) as refused:
        main(["fit", "--config", str(trained / "exp.yaml"), "--trainer.default_root_dir", str(trained / "run"),
              "--ckpt_path", "last", *arguments])
    assert refused.value.code == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert re.match(f"lit-resformer fit: error: cannot resume from .*last.ckpt: it was made with another config "
                    f"\\(.*{message}", first), first
    assert tree_state(trained / "run") == before


@pytest.mark.integration
def test_resuming_with_a_swapped_tokenizer_file_isrefused(trained, tmp_path, capsys):
    from tokenizers import Tokenizer

    tokenizer = trained / "tokenizer.json"
    original = tokenizer.read_text()
    swapped = Tokenizer.from_str(original)
    swapped.add_tokens(["<|extra|>"])
    tokenizer.write_text(swapped.to_str())
    try:
        before = tree_state(trained / "run")
        with pytest.raises(SystemExit):
            main(["fit", "--config", str(trained / "exp.yaml"), "--trainer.default_root_dir", str(trained / "run"),
                  "--ckpt_path", "last"])
        assert re.search(r"it was made with another config \(tokenizer hash: \w+ -> \w+", capsys.readouterr().err)
        assert tree_state(trained / "run") == before
    finally:
        tokenizer.write_text(original)


def test_the_data_module_refuses_a_checkpoint_of_another_tokenizer(tiny_datamodule):
    """The last line of defence, for trained and hub tokenizers: checked when Lightning restores the data state."""
    from lit_resformer.data.tokenizer import TokenizerMismatch, train_bpe

    data = tiny_datamodule()
    other = train_bpe(["completely different text " * 50], 300)
    with pytest.raises(TokenizerMismatch, match=r"data.tokenizer: the checkpoint was trained with tokenizer \w+, but"):
        data.load_state_dict({"tokenizer_json": other.to_str()})
    data.load_state_dict({"tokenizer_json": data.tokenizer.to_str()})  # its own tokenizer is accepted


# ------------------------------------------------------------------------------------------ local data that is not text
def parquet_bytes(columns: dict) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def garbage(size: int = 4096) -> bytes:
    import random

    return bytes(random.Random(0).randrange(256) for _ in range(size))


# Each: file name, its bytes, data module arguments beyond path, and what the error must say.
BAD_DATA = {
    "binary garbage as .txt": ("a.txt", garbage(), {}, r"a.txt is not utf-8 text \(byte 0x[0-9a-f]{2} at offset \d+"),
    "latin-1 text read as utf-8": ("a.txt", "un café noir".encode("latin-1"), {},
                                   r"a.txt is not utf-8 text \(byte 0xe9 at offset 6 .*set data.encoding"),
    "NUL bytes in valid utf-8": ("a.txt", b"plain words\x00\x00\x00more", {}, r"a.txt is not text \(it holds NUL"),
    "gzip as .txt": ("a.txt", __import__("gzip").compress(b"hello world " * 100), {}, r"a.txt is not utf-8 text"),
    "utf-16 read as utf-8": ("a.txt", "text in utf-16".encode("utf-16"), {}, r"a.txt is not utf-8 text"),
    "undecodable .jsonl": ("a.jsonl", b'{"text": "caf\xe9"}\n', {}, r"a.jsonl is not utf-8 text"),
    "image as .parquet": ("a.parquet", b"\x89PNG\r\n\x1a\n" + garbage(), {}, r"a.parquet is not a parquet file"),
    "parquet without a text column": ("a.parquet", parquet_bytes({"body": ["x"], "id": [1]}), {},
                                      r"a.parquet has no column 'text' \(columns: \['body', 'id'\]\)"),
    "parquet with numbers as text": ("a.parquet", parquet_bytes({"text": [1, 2]}), {},
                                     r"a.parquet column 'text' holds int64, not text"),
    "unknown encoding": ("a.txt", b"words", {"encoding": "klingon"}, r"data.encoding: unknown text encoding 'klingon'"),
}


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_local_data_that_is_not_text_is_refused_before_compute(tmp_path, case):
    from lit_resformer.data import LMDataModule

    name, content, arguments, message = BAD_DATA[case]
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / name).write_bytes(content)
    with pytest.raises(ValueError, match=message):
        LMDataModule(source="local", path=str(tmp_path / "corpus"), cache_dir=str(tmp_path / "cache"), **arguments)
    assert not (tmp_path / "cache").exists()


def test_a_bad_byte_past_the_checked_head_is_refused_when_read(tmp_path):
    from lit_resformer.corpora.sources import SNIFF_BYTES, local_documents

    corpus = tmp_path / "a.txt"
    corpus.write_bytes(b"words and more words.\n\n" * (SNIFF_BYTES // 10) + b"caf\xe9\n")
    with pytest.raises(ValueError, match=rf"a.txt is not utf-8 text \(byte 0xe9 at offset {corpus.stat().st_size - 2}"):
        list(local_documents(corpus))


def test_other_encodings_are_read_when_named(tmp_path):
    from lit_resformer.corpora.sources import local_documents
    from lit_resformer.data import LMDataModule

    (tmp_path / "a.txt").write_bytes("un café noir\n\nune crème brûlée".encode("latin-1"))
    LMDataModule(source="local", path=str(tmp_path / "a.txt"), encoding="latin-1")
    assert [d.text for d in local_documents(tmp_path / "a.txt", encoding="latin-1")] == ["un café noir",
                                                                                          "une crème brûlée"]


def test_fit_names_the_binary_file_in_one_line(tmp_path, data_cache, capsys):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "blob.txt").write_bytes(garbage())
    path = tiny_experiment(tmp_path / "exp.yaml", tmp_path / "corpus", data_cache)
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(path), "--trainer.default_root_dir", str(tmp_path / "run")])
    assert re.match(r"lit-resformer fit: error: data.path: .*blob.txt is not utf-8 text", capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------ damaged caches
def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _only(directory: Path, pattern: str) -> Path:
    (found,) = directory.glob(pattern)
    return found


# Each: how a cache entry is damaged (given the cache dir).
CACHE_DAMAGE = {
    "truncated tokenizer": lambda c: _truncate(_only(c / "tokenizers", "bpe-*[0-9].json")),
    "tokenizer meta missing": lambda c: _only(c / "tokenizers", "*.meta.json").unlink(),
    "tokenizer edited": lambda c: _flip_last_byte(_only(c / "tokenizers", "bpe-*[0-9].json")),
    "short packed memmap": lambda c: _truncate(_only(c / "packed", "*/train.npy")),
    "packed meta missing": lambda c: _only(c / "packed", "*/meta.json").unlink(),
    "packed bytes changed": lambda c: _flip_last_byte(_only(c / "packed", "*/val.0.npy")),
    "short token stream": lambda c: (_truncate(_only(c / "tokens", "*/train.bin")),
                                     __import__("shutil").rmtree(_only(c / "packed", "*"))),
    "token counts truncated": lambda c: _truncate(_only(c / "tokens", "*/train_counts.npy")),
}


@pytest.mark.parametrize("case", sorted(CACHE_DAMAGE))
def test_a_damaged_cache_entry_is_rebuilt_to_the_same_data(tmp_path, tiny_datamodule, case):
    import numpy as np

    def snapshot():
        data = tiny_datamodule(cache_dir=str(tmp_path))
        data.setup()
        rows = {p.name: np.load(p) for p in sorted(data._packed["dir"].glob("*.npy"))}
        return data.tokenizer.to_str(), rows, data.unigram_val_losses()

    tokenizer, rows, unigram = snapshot()
    CACHE_DAMAGE[case](tmp_path)
    tokenizer_again, rows_again, unigram_again = snapshot()
    assert tokenizer_again == tokenizer and unigram_again == unigram
    assert rows_again.keys() == rows.keys() and all(np.array_equal(rows[k], rows_again[k]) for k in rows)


# ------------------------------------------------------------------------------------------ the checkpoint folder
def fit(experiment: Path, run: Path, *arguments: str) -> None:
    main(["fit", "--config", str(experiment), "--trainer.default_root_dir", str(run), *arguments])


def checkpoint_steps(run: Path) -> dict[str, int]:
    from lit_resformer.runs.checkpoint_reading import read_checkpoint

    return {p.name: read_checkpoint(p, mmap=True)["global_step"] for p in sorted((run / "checkpoints").iterdir())}


@pytest.fixture
def four_steps(tmp_path, tiny_corpus, data_cache, monkeypatch):
    """A run trained 4 steps, a checkpoint every 2 (the system's temporary folder watched: `tmp_path/system-tmp`)."""
    import tempfile

    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    experiment = tiny_experiment(tmp_path / "exp.yaml", tiny_corpus, data_cache, trainer={"max_steps": 4})
    fit(experiment, tmp_path / "run")
    assert checkpoint_steps(tmp_path / "run") == {"last.ckpt": 4, "step000004.ckpt": 4}
    return experiment


@pytest.mark.integration
def test_a_moved_run_keeps_last_ckpt_the_newest_and_no_stale_checkpoints(tmp_path, four_steps):
    (tmp_path / "run").rename(tmp_path / "moved")
    fit(four_steps, tmp_path / "moved", "--ckpt_path", "last", "--trainer.max_steps", "6")
    assert checkpoint_steps(tmp_path / "moved") == {"last.ckpt": 6, "step000006.ckpt": 6}


@pytest.mark.integration
def test_resuming_from_a_step_checkpoint_prunes_it_once_a_newer_one_is_saved(tmp_path, four_steps):
    _truncate(tmp_path / "run/checkpoints/last.ckpt")  # killed while writing it: the step checkpoint is resumed
    with pytest.warns(UserWarning, match="resuming from .*step000004.ckpt: last.ckpt: .*not a readable checkpoint"):
        fit(four_steps, tmp_path / "run", "--ckpt_path", "last", "--trainer.max_steps", "6")
    assert checkpoint_steps(tmp_path / "run") == {"last.ckpt": 6, "step000006.ckpt": 6}


@pytest.mark.integration
def test_partial_files_of_killed_writes_are_cleaned_and_nothing_is_staged_elsewhere(tmp_path, four_steps):
    leftover = tmp_path / "run/checkpoints/.last.ckpt.x1y2z3.tmp"  # what a write killed midway leaves
    leftover.write_bytes(b"\0" * 1000)
    fit(four_steps, tmp_path / "run", "--ckpt_path", "last", "--trainer.max_steps", "6")
    assert not leftover.exists()
    assert not list((tmp_path / "system-tmp").iterdir())  # Lightning's own writes would have staged them here


def test_a_failed_checkpoint_write_leaves_the_previous_file_and_no_partial_one(tmp_path, monkeypatch):
    import torch

    from lit_resformer.training.checkpoint_saving import AtomicCheckpointIO

    target = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"global_step": 1}, target)

    staged = []

    def dies_midway(obj, f, *args, **kwargs):
        staged.append(Path(os.readlink(f"/proc/self/fd/{f.fileno()}")))  # where the bytes go
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"global_step": 2}, target)
    monkeypatch.undo()
    assert staged[0].parent == tmp_path  # the partial file is written beside its target, never in $TMPDIR
    assert io.load_checkpoint(target)["global_step"] == 1 and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


# ------------------------------------------------------------------------------------------ grids: resume and busy runs
def test_a_grid_run_with_a_damaged_last_ckpt_resumes_from_a_step_checkpoint_and_says_so(tmp_path):
    import sys

    import torch

    from lit_resformer.execution.jobs import RunJob, execute

    run = tmp_path / "g/cell/seed0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "experiment.yaml").write_text("{}\n")
    torch.save({"state_dict": {}, "global_step": 4, "loops": {}}, run / "checkpoints/step000004.ckpt")
    (run / "checkpoints/last.ckpt").write_bytes(b"PK\x03\x04 cut short")  # killed while writing it
    command = [sys.executable, "-c", "import sys; print(' '.join(sys.argv[1:]))"]
    summary = execute(RunJob("g", "cell", 0, run, command))
    assert summary["status"] == "done" and summary["resumed_from"] == str(run / "checkpoints/step000004.ckpt")
    assert re.match(r"resuming from step000004.ckpt: last.ckpt: .*not a readable checkpoint", summary["resume_note"])
    assert json_of(run / "summary.json")["resume_note"] == summary["resume_note"]
    assert f"===== {summary['resume_note']}" in (run / "logs/stdout.log").read_text()
    assert "--ckpt_path last" in (run / "logs/stdout.log").read_text()


def json_of(path: Path) -> dict:
    import json

    return json.loads(path.read_text())


def fake_grid(tmp_path: Path) -> tuple[Path, list[str]]:
    import sys


    script = tmp_path / "fake_trainer.py"
    script.write_text(FAKE_TRAINER)
    grid = write_grid(tmp_path, {**THREE_CELLS, "cells": {k: v for k, v in THREE_CELLS["cells"].items() if k != "boom"}})
    return grid, [sys.executable, str(script), "fit"]


def test_a_second_runner_skips_runs_another_one_works_in_and_leaves_its_report(tmp_path):
    import io

    from lit_resformer.grids import GridOptions, run_grid
    from lit_resformer.runs.run_dir import RunDir

    grid, command = fake_grid(tmp_path)
    runs = tmp_path / "runs"
    busy = RunDir(runs / "g/resformer/seed0")
    first_report = runs / "g/index.html"
    first_report.parent.mkdir(parents=True)
    first_report.write_text("the first runner's report")
    out = io.StringIO()
    with busy.lock():  # the first runner trains this run
        outcome = run_grid(load_grid(grid), GridOptions(runs_dir=runs, train_command=command), progress=False, out=out)
    assert outcome.busy == ["g/resformer/seed0"] and outcome.failed == []
    assert outcome.summaries["g/vanilla/seed0"]["status"] == "done"
    assert not busy.summary_file.exists() and not busy.stdout_log.exists()  # not a byte written into it
    assert re.search(r"g/resformer/seed0 +skip: busy \(locked by \S+ \d+\)", out.getvalue())
    assert "1 run(s) busy in another process, left to it: g/resformer/seed0" in out.getvalue()
    assert first_report.read_text() == "the first runner's report"


def test_a_runner_that_finds_only_done_and_busy_runs_leaves_the_report_to_the_other(tmp_path):
    """The other runner finished one run and trains the last: nothing is left to start here, and a report written
    now would show that run unfinished."""
    import io

    from lit_resformer.grids import GridOptions, run_grid
    from lit_resformer.runs.run_dir import RunDir

    grid, command = fake_grid(tmp_path)
    runs = tmp_path / "runs"
    reports = []
    options = GridOptions(runs_dir=runs, train_command=command, report=reports.append)
    run_grid(load_grid(grid), options, progress=False, out=io.StringIO())
    assert len(reports) == 1  # both runs done, the report written
    busy = RunDir(runs / "g/resformer/seed0")
    busy.summary_file.unlink()  # resformer is being trained again by the other runner
    out = io.StringIO()
    with busy.lock():
        outcome = run_grid(load_grid(grid), options, progress=False, out=out)
    assert outcome.busy == ["g/resformer/seed0"] and len(reports) == 1
    assert "1 run(s) busy in another process, left to it: g/resformer/seed0" in out.getvalue()


def test_a_run_taken_between_planning_and_starting_is_reported_busy_not_failed(tmp_path):
    from lit_resformer.execution.jobs import RunJob, execute
    from lit_resformer.runs.run_dir import RunDir

    run = RunDir(tmp_path / "g/cell/seed0")
    with run.lock():
        summary = execute(RunJob("g", "cell", 0, run.path, ["false"]), lock_wait_s=0.2)
    assert summary["status"] == "busy" and "in use by another process" in summary["error"]
    assert not run.summary_file.exists()


@pytest.mark.integration
def test_two_runners_on_one_grid(tmp_path):
    """The second, started while the first trains, skips its busy runs and exits 0; the first ends with its report."""
    import os
    import subprocess
    import sys
    import time

    grid, command = fake_grid(tmp_path)
    # the first runner trains both runs at once, neither past its first step until the second runner has ended (however
    # long its start takes on a loaded machine), so that the second finds both busy
    release = tmp_path / "second-runner-ended"
    env = {**os.environ, "LIT_RESFORMER_TRAIN_CMD": " ".join(command), "FAKE_HOLD_UNTIL": str(release)}
    arguments = [sys.executable, "-m", "lit_resformer.cli", "grid", str(grid), "--runs-dir", str(tmp_path / "runs"),
                 "--cpu-slots", "2"]
    first = subprocess.Popen(arguments, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while len(list((tmp_path / "runs").glob("g/*/seed0/logs/stdout.log"))) < 2 and time.time() < deadline:
        time.sleep(0.1)
    try:
        second = subprocess.run(arguments, env=env, capture_output=True, text=True, timeout=300)
    finally:
        release.touch()
    first_out, _ = first.communicate(timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "busy in another process, left to it" in second.stdout and "report:" not in second.stdout
    assert first.returncode == 0 and "report:" in first_out, first_out
    statuses = {p.parent.parent.name: json_of(p)["status"] for p in (tmp_path / "runs/g").glob("*/seed0/summary.json")}
    assert statuses == {"vanilla": "done", "resformer": "done"}


# ------------------------------------------------------------------------------------------ eval: task files and network
@pytest.fixture
def tiny_lm():
    import torch

    from lit_resformer.data.tokenizer import train_bpe
    from lit_resformer.eval.lm_eval_model import LitResFormerLM
    from lit_resformer.model import ModelConfig, Transformer

    tokenizer = train_bpe(["Which object is attracted by a magnet? an iron nail"] * 20, 300)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layer=1, n_head=2, d_model=16, ffn_dim=32,
                                    vocab_size=tokenizer.get_vocab_size(), max_seq_len=64)).eval()
    return LitResFormerLM(model=model, tokenizer=tokenizer)


def plant_task(folder: Path, marker: Path) -> None:
    """A task YAML whose `!function` imports a planted module (which leaves `marker` when imported)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "0_planted.yaml").write_text(
        "task: arc_easy\ndataset_path: arrow\ntest_split: validation\ndoc_to_text: '{{question}}'\n"
        "doc_to_target: 0\ndoc_to_choice: '{{choices.text}}'\nprocess_docs: !function planted.process_docs\n")
    (folder / "planted.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                       "def process_docs(docs):\n    return docs\n")


@pytest.mark.integration
def test_eval_loads_only_the_task_files_it_wrote_in_that_call(tmp_path, tiny_lm):

    from lit_resformer.eval.run import run_eval

    data_dir, _ = arc_data_dir(tmp_path / "data")
    out, marker = tmp_path / "out", tmp_path / "planted-code-ran"
    plant_task(out / "offline_tasks", marker)  # a leftover of an earlier call, or planted
    plant_task(data_dir, marker)
    results = run_eval(tiny_lm, tasks=["arc_easy"], data_dir=data_dir, out_dir=out)
    assert not marker.exists()
    assert [s["target"] for s in results["samples"]["arc_easy"]] == [1, 0, 2]  # the real task: answer keys B, A, C
    assert len(ARC_ROWS) == 3 and sorted(p.name for p in (out / "offline_tasks").iterdir()) == ["arc_easy.yaml"]
    # a folder the user names is theirs to trust
    plant_task(tmp_path / "mine", marker)
    own = tmp_path / "mine/0_planted.yaml"
    own.write_text(own.read_text().replace("task: arc_easy", "task: my_task"))
    with pytest.raises(Exception):  # noqa: B017 - the task has no data; what counts is that its code was loaded
        run_eval(tiny_lm, tasks=["my_task"], include_path=[tmp_path / "mine"])
    assert marker.exists()


def test_offline_eval_opens_no_connection_even_without_offline_settings(tmp_path, tiny_lm, monkeypatch):
    import socket

    import datasets
    import huggingface_hub

    from lit_resformer.eval.run import run_eval

    data_dir, _ = arc_data_dir(tmp_path / "data")
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # as a user's shell has them: unset
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_UPDATE_DOWNLOAD_COUNTS", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    attempts = []

    def record(*args, **kwargs):  # libraries swallow network errors, so a refusal alone would go unseen
        attempts.append(args[:2])
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", record)
    monkeypatch.setattr(socket.socket, "connect", record)
    monkeypatch.setattr(socket, "create_connection", record)
    results = run_eval(tiny_lm, tasks=["arc_easy"], data_dir=data_dir)
    assert results["n-samples"]["arc_easy"]["effective"] == 3
    assert attempts == []
    assert datasets.config.HF_HUB_OFFLINE is False and "HF_HUB_OFFLINE" not in os.environ  # restored after the call


# ------------------------------------------------------------------------------------------ the HTML report
# Each payload, if the page ran it, marks the page that loads the report (its parent frame) with data-pwned.
SCRIPT = "<script>parent.document.body.dataset.pwned=1</script>"
IMG = "<img src=x onerror=parent.document.body.dataset.pwned=2>"
SVG = "<svg onload=parent.document.body.dataset.pwned=3>"
ALERT = "<script>alert(document.domain)</script>"
LINK = "[click me](javascript:parent.document.body.dataset.pwned=4)"


def hostile_grid(tmp_path: Path) -> Path:
    """A grid whose description, data domain names and run errors carry script and attribute payloads."""

    grid_dir = make_grid_dir(tmp_path, {"description": f"Grid {SCRIPT} {ALERT} {LINK} end.", "baseline": "vanilla",
                                        "cells": {"vanilla": {}, "other": {"model.config.residual.target": "v"}}})
    curve = {s: 5.0 - s / 100 for s in range(100)}
    write_run(grid_dir, "vanilla", 0, curve, {99: {IMG: 3.0, "code": 3.1}})
    write_run(grid_dir, "other", 0, curve, {99: {IMG: 2.9, "code": 3.0}})
    write_run(grid_dir, "other", 1, curve, status="failed", error=f"ValueError: data.path: '{SVG}' does not exist")
    return grid_dir


def test_report_escapes_everything_it_quotes(tmp_path):
    """Without a browser: the page has no script element, no event handler and no javascript: address."""
    from html.parser import HTMLParser

    from lit_resformer.reports.grid_report import write_report

    index = write_report(hostile_grid(tmp_path))
    found = []

    class Elements(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend([f"<{tag}>"] if tag in ("script", "svg", "iframe") else [])
            found.extend(f"{tag}.{name}={value}" for name, value in attrs
                         if name.startswith("on") or "javascript:" in (value or "").lower())

    Elements().feed(index.read_text())
    assert found == []
    text = index.read_text()
    for payload in (SCRIPT, IMG, SVG, ALERT):
        assert __import__("html").escape(payload, quote=False) in text


@pytest.mark.integration
def test_report_payloads_stay_text_in_headless_chromium(tmp_path):
    from lit_resformer.reports.grid_report import write_report

    chromium.browser()
    index = write_report(hostile_grid(tmp_path))
    payloads = [SCRIPT, IMG, SVG, ALERT]
    dom = chromium.framed_dom(index, (
        'const scripted = Array.from(frame.querySelectorAll("a, img")).filter(e => /^javascript:/i.test(e.href || e.src));'
        'if (scripted.length) document.body.dataset.pwned = "link";'
        f"const payloads = {__import__('json').dumps(payloads).replace('</', '<' + chr(92) + '/')};"
        "const shown = payloads.filter(p => frame.body.innerText.includes(p)).length;"
        'document.body.setAttribute("data-shown", shown + "/" + payloads.length);'), tmp_path,
        size=(1200, 900))  # a desktop's frame: a phone's drops the tables to their decisive columns
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert f'data-shown="{len(payloads)}/{len(payloads)}"' in body, body  # every payload is visible as text
    assert "data-pwned" not in body, body  # and none of them ran
