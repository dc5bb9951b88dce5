"""Data of the lrf_tiny_mc task: the jsonl file next to this module, as its validation split."""

from pathlib import Path

import datasets

QUESTIONS = Path(__file__).with_name("lrf_tiny_mc.jsonl")


def load_questions(**task_metadata) -> datasets.DatasetDict:
    # lm-eval calls custom_dataset with the task's metadata (version, ...); the data does not depend on it.
    return datasets.load_dataset("json", data_files={"validation": str(QUESTIONS)})
