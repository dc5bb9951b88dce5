"""Configuration of an exported lit-resformer model: the training code's `ModelConfig`, as transformers stores it.

Travels inside the exported folder beside the model's own modules (`config.py`, `transformer.py`, ...), which it
imports relatively, as `trust_remote_code` loads a folder's code. Every field is a field of `ModelConfig` and is
checked by `ModelConfig` itself, so a value that training refuses is refused here with the same message. The variant
groups are stored as nested dictionaries, so `config.json` reads like the run's own config.

`config.json` also records the transformers release the folder was exported with and the major versions this code
was tested under; loading it with another major version logs one warning.
"""

from __future__ import annotations

import dataclasses

import transformers
from transformers import PretrainedConfig
from transformers.utils import logging

from .config import ModelConfig

logger = logging.get_logger(__name__)

# The transformers major versions this code is tested under (with the project's locked release and the newest one).
# Generation goes through parts of transformers that change between releases (5.24 renamed the cache argument).
TESTED_TRANSFORMERS_MAJORS = (5,)
_untested_versions_warned: set[str] = set()  # one warning per process and transformers version

# ModelConfig fields that choose how the model runs on a device (a preset's name, the attention kernel), not what it
# computes: not stored, so the exported model runs its default kernel wherever it is loaded.
NOT_ARCHITECTURE = ("size", "attn_impl")
MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig))
# transformers builds a config without arguments to learn its defaults: the shape of this preset.
DEFAULT_SIZE = "tiny"


class ResFormerConfig(PretrainedConfig):
    model_type = "lit_resformer"
    # The names other tools (lm-eval, generation utilities) look for.
    attribute_map = {
        "hidden_size": "d_model", "num_hidden_layers": "n_layer", "num_attention_heads": "n_head",
        "num_key_value_heads": "n_kv_head", "intermediate_size": "ffn_dim", "max_position_embeddings": "max_seq_len",
    }

    def __init__(self, use_cache: bool = True, exported_with_transformers: str | None = None,
                 tested_transformers_majors: list[int] | None = None, **kwargs):
        """The fields of `ModelConfig` as keyword arguments, variant groups as dicts (missing fields take their
        defaults, a missing shape the `DEFAULT_SIZE` preset's), e.g. `ResFormerConfig(n_layer=6, residual={"target":
        "v"})`, or `ResFormerConfig(**model_config.to_dict())`."""
        fields = {name: kwargs.pop(name) for name in MODEL_FIELDS if name in kwargs}
        for name, value in ModelConfig(**{"size": DEFAULT_SIZE, **fields}).to_dict().items():
            if name not in NOT_ARCHITECTURE:
                setattr(self, name, value)
        self.use_cache = use_cache  # forward returns its ResFormerCache unless told otherwise
        self.exported_with_transformers = exported_with_transformers
        majors = list(TESTED_TRANSFORMERS_MAJORS if tested_transformers_majors is None else tested_transformers_majors)
        if not majors or not all(isinstance(m, int) and not isinstance(m, bool) for m in majors):
            raise ValueError(f"tested_transformers_majors={tested_transformers_majors!r}: give a non-empty list of "
                             f"major versions, e.g. {list(TESTED_TRANSFORMERS_MAJORS)}")
        self.tested_transformers_majors = majors
        warn_if_untested_transformers(majors, exported_with_transformers)
        kwargs["tie_word_embeddings"] = False  # the paper's models have separate input and output embeddings
        super().__init__(**kwargs)

    def model_config(self) -> ModelConfig:
        """The training code's config of this model."""
        return ModelConfig(**{name: getattr(self, name) for name in MODEL_FIELDS if name not in NOT_ARCHITECTURE})


def warn_if_untested_transformers(tested_majors: list[int], exported_with: str | None) -> None:
    """One line, once per process, when the installed transformers is of a major version this code was not tested on."""
    installed = transformers.__version__
    if int(installed.split(".")[0]) in tested_majors or installed in _untested_versions_warned:
        return
    _untested_versions_warned.add(installed)
    exported = f" (exported with {exported_with})" if exported_with else ""
    tested = " or ".join(f"{major}.x" for major in tested_majors)
    logger.warning(f"this lit-resformer model's code was tested with transformers {tested}{exported}, but transformers "
                   f"{installed} is installed: loading or generation may fail or give different results")
