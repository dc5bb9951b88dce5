"""Export a lit-resformer checkpoint as a Hugging Face model folder.

    export_hf("runs/x/checkpoints/last.ckpt", "runs/x/hf")   # lit-resformer export --ckpt ... --to-hf ...

A vanilla model becomes a plain ``LlamaForCausalLM``. Every other config becomes a ``trust_remote_code`` folder whose
code is the training code itself: the modules of ``lit_resformer/model/`` that the model needs (``transformer.py``,
``config.py`` and what they import, copied as they are: they import only torch and each other) beside the two thin
files of ``hf_remote/`` (files for exported folders, not modules of this package): ``configuration_resformer.py``
(``ModelConfig`` as a transformers config) and ``modeling_resformer.py`` (the ``PreTrainedModel`` wrapper and a cache
adapter over the model's own KV cache). They import each other relatively, which is how transformers finds the files
a folder's code needs and loads them as one package. With them: ``config.json`` with the variant fields,
``auto_map``, the transformers release it was exported with and the major versions the code is tested under, and
``model.safetensors`` with the training code's weights under ``model.``. Both kinds hold ``generation_config.json``
and the tokenizer (a ``PreTrainedTokenizerFast`` around the run's ``tokenizers.Tokenizer``, ``<|endoftext|>`` as BOS,
EOS and pad), so ``AutoModelForCausalLM``/``AutoTokenizer`` and lm-eval's ``hf`` model load either without this
project.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from lit_resformer.data.tokenizer import EOS_TOKEN
from lit_resformer.model import ModelConfig

MODEL_CODE = Path(__file__).parents[1] / "model"
REMOTE_CODE = Path(__file__).parent / "hf_remote"
MODELING_CLASS = "modeling_resformer.ResFormerForCausalLM"  # file.class, as auto_map names it


def write_modeling_code(out_dir: Path) -> None:
    """Copy the thin files of hf_remote/ into `out_dir` with the modules of model/ they import, directly or through
    each other: the files transformers finds through their relative imports when it loads them."""
    from transformers.dynamic_module_utils import get_relative_import_files, get_relative_imports

    thin = sorted(REMOTE_CODE.glob("*.py"))
    imported = {name for path in thin for name in get_relative_imports(path)} - {path.stem for path in thin}
    model = {MODEL_CODE / f"{name}.py" for name in imported}
    model |= {Path(needed) for path in model for needed in get_relative_import_files(path)}
    for source in (*thin, *sorted(model)):
        shutil.copyfile(source, out_dir / source.name)


def _special_token_id(tokenizer) -> int:
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    if eos_id is None:
        raise ValueError(f"the tokenizer has no {EOS_TOKEN!r} token")
    return eos_id


def _save_tokenizer(tokenizer, out_dir: Path, max_seq_len: int) -> None:
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=EOS_TOKEN, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
        model_max_length=max_seq_len,
    ).save_pretrained(out_dir)


def _set_special_tokens(hf_model, token_id: int) -> None:
    for config in (hf_model.config, hf_model.generation_config):
        config.bos_token_id = config.eos_token_id = config.pad_token_id = token_id


def export_resformer(config: ModelConfig, state_dict: dict, tokenizer, out_dir: str | Path) -> Path:
    """A ModelConfig and its weights -> a trust_remote_code folder with the model's own code in it. The classes that
    save the folder are the folder's own, loaded from it as transformers loads them."""
    from transformers import __version__ as transformers_version
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    token_id = _special_token_id(tokenizer)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_modeling_code(out_dir)
    model_class = get_class_from_dynamic_module(MODELING_CLASS, out_dir)
    hf_config = model_class.config_class(**config.to_dict(), exported_with_transformers=transformers_version)
    with torch.device("meta"):  # the weights are assigned below, so nothing is initialised
        hf_model = model_class(hf_config)
    weights = {name: tensor.detach().to("cpu").contiguous() for name, tensor in state_dict.items()}
    hf_model.model.load_state_dict(weights, strict=True, assign=True)
    _set_special_tokens(hf_model, token_id)
    # save_pretrained writes auto_map for these classes (and copies their files over the same files).
    model_class.config_class.register_for_auto_class()
    model_class.register_for_auto_class("AutoModelForCausalLM")
    hf_model.save_pretrained(out_dir, safe_serialization=True)
    _save_tokenizer(tokenizer, out_dir, hf_config.max_seq_len)
    return out_dir


def export_llama(model, tokenizer, out_dir: str | Path) -> Path:
    """A vanilla Transformer -> a plain LlamaForCausalLM folder (no custom code)."""
    from lit_resformer.model.hf import to_hf_llama

    token_id = _special_token_id(tokenizer)
    hf_model = to_hf_llama(model)
    _set_special_tokens(hf_model, token_id)
    out_dir = Path(out_dir)
    hf_model.save_pretrained(out_dir, safe_serialization=True)
    _save_tokenizer(tokenizer, out_dir, model.config.max_seq_len)
    return out_dir


def export_model(model, tokenizer, out_dir: str | Path) -> Path:
    """Write an in-memory (Transformer, tokenizers.Tokenizer) pair as an HF folder: Llama if vanilla, else remote code."""
    from lit_resformer.model.hf import non_vanilla_fields

    if not non_vanilla_fields(model.config):
        return export_llama(model, tokenizer, out_dir)
    return export_resformer(model.config, model.state_dict(), tokenizer, out_dir)


def loading_code(folder: str | Path) -> str:
    """The two lines that load an exported folder with transformers alone, asking nothing. A folder with its own code
    (`auto_map` in config.json) needs `trust_remote_code=True` for its tokenizer too: transformers >= 5 reads a
    folder's config before its tokenizer (AutoTokenizer.from_pretrained loads AutoConfig first), and a config with
    its own class is code to run, which it asks about, [y/N], unless told; the tokenizer files themselves name no
    code (tokenizer_config.json has no auto_map)."""
    folder = Path(folder)
    custom = "auto_map" in json.loads((folder / "config.json").read_text())
    trust = ", trust_remote_code=True" if custom else ""
    return (f"model = AutoModelForCausalLM.from_pretrained({str(folder)!r}{trust})\n"
            f"tokenizer = AutoTokenizer.from_pretrained({str(folder)!r}{trust})")


def export_hf(ckpt: str | Path, out_dir: str | Path) -> Path:
    """`lit-resformer export --ckpt PATH --to-hf DIR`: a Lightning checkpoint -> HF folder."""
    from lit_resformer import load_checkpoint

    ckpt = Path(ckpt)
    if not ckpt.is_file():
        raise FileNotFoundError(f"ckpt={str(ckpt)!r}: no such checkpoint file")
    model, tokenizer = load_checkpoint(ckpt)
    if tokenizer is None:
        raise ValueError(f"ckpt={str(ckpt)!r} holds no tokenizer; the HF folder needs one")
    return export_model(model, tokenizer, out_dir)
