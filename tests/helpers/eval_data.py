"""Offline evaluation inputs: a byte-level BPE trained on a tiny corpus, a task folder in prepare_data's layout,
and HF offline mode with every connection refused."""

from __future__ import annotations

import json
import socket

import datasets
import huggingface_hub
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS = "<|endoftext|>"

CORPUS = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Question: What do bees make?\nAnswer: honey and wax for their hive.",
    "Plants take light from the sun and water from the ground to grow tall.",
    "A spider has eight legs, an insect has six legs, and a dog has four.",
    "Frozen water is called ice; hot water turns to steam in the kettle.",
] * 4


def byte_bpe_tokenizer(vocab_size: int = 320, texts: list[str] = CORPUS) -> Tokenizer:
    """A byte-level BPE (GPT-2's pre-tokenizer, EOS as its one special token) trained on `texts`."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def go_offline(monkeypatch):
    """HF offline mode (env and the libraries' already-read flags), and any connection attempt fails."""
    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(name, "1")
        monkeypatch.setattr(datasets.config, name, True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[1:] or kwargs}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


ARC_ROWS = [  # ARC's schema, the project's own questions
    ("Which of these is a source of light?", ["a rock", "the sun", "a shadow", "a spoon"], "B"),
    ("What do roots take from the soil?", ["water", "sunlight", "wind", "sound"], "A"),
    ("Which object is attracted by a magnet?", ["wood", "glass", "an iron nail", "paper"], "C"),
]


def arc_data_dir(root) -> tuple:
    """A tiny offline folder in prepare_data's layout: ARC-format rows for arc_easy, validation split."""
    rows = {
        "id": [f"q{i}" for i in range(len(ARC_ROWS))],
        "question": [q for q, _, _ in ARC_ROWS],
        "choices": [{"text": c, "label": ["A", "B", "C", "D"]} for _, c, _ in ARC_ROWS],
        "answerKey": [a for _, _, a in ARC_ROWS],
    }
    datasets.Dataset.from_dict(rows).save_to_disk(str(root / "arc_easy" / "validation"))
    data_file = root / "arc_easy" / "validation" / "data-00000-of-00001.arrow"
    manifest = {"source": "test", "tasks": {"arc_easy": {
        "files": ["arc_easy/validation/data-00000-of-00001.arrow"], "format": "arrow", "split": "validation",
        "lm_eval_split": "test", "n_examples": len(ARC_ROWS), "source": "test", "note": "validation for test"}}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root, data_file
