"""Exported folders across transformers releases: the cache's name, the generation hook, and the version record.

The full comparison of every variant with the project's model is tests/export/test_export.py; run it (and this file) with
another transformers release first on PYTHONPATH to check that release.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
import transformers
from transformers import DynamicCache

from lit_resformer.export import export_model
from lit_resformer.export.hf_remote import configuration_resformer
from lit_resformer.export.hf_remote.configuration_resformer import TESTED_TRANSFORMERS_MAJORS, ResFormerConfig
from lit_resformer.export.hf_remote.modeling_resformer import CACHE_NAME, ResFormerCache, ResFormerForCausalLM
from lit_resformer.model import ModelConfig, Transformer
from tests.helpers.eval_data import byte_bpe_tokenizer

VERSION = transformers.__version__  # before any test fakes another
INSTALLED = tuple(int(part) for part in VERSION.split(".")[:2])


def tiny_hf_model() -> ResFormerForCausalLM:
    """An SVFormer with GQA (V cached once, K per layer), randomly initialised."""
    torch.manual_seed(0)
    config = ResFormerConfig(n_layer=3, n_head=4, n_kv_head=2, d_model=16, ffn_dim=32, vocab_size=64, max_seq_len=32,
                             share={"svformer": True})
    return ResFormerForCausalLM(config).eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export") / "hf"
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layer=2, n_head=2, d_model=16, ffn_dim=32, vocab_size=320, max_seq_len=32,
                                    residual={"target": "v"}))
    export_model(model, byte_bpe_tokenizer(), folder)
    return folder


def test_the_cache_goes_by_the_name_of_the_installed_release():
    # transformers 5.24 renamed the cache argument and output field of every model (past_key_values -> cache).
    assert CACHE_NAME == ("cache" if INSTALLED >= (5, 24) else "past_key_values")


@torch.no_grad()
def test_generate_builds_the_models_own_cache_through_the_transformers_hook():
    """generate() must hand forward a ResFormerCache: the hook that builds it is internal to transformers."""
    model = tiny_hf_model()
    ids = torch.randint(1, 64, (2, 5), generator=torch.Generator().manual_seed(0))
    out = model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0,
                         return_dict_in_generate=True)
    cache = out[CACHE_NAME]
    assert isinstance(cache, ResFormerCache) and cache.get_seq_length() == 5 + 4 - 1
    assert torch.equal(out.sequences, model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None,
                                                     pad_token_id=0, use_cache=False))


@torch.no_grad()
def test_forward_takes_the_cache_under_either_name():
    model = tiny_hf_model()
    ids = torch.randint(1, 64, (1, 6), generator=torch.Generator().manual_seed(1))
    full = model(ids, use_cache=False).logits
    for name in ("cache", "past_key_values"):
        cache = ResFormerCache(model.config)
        first = model(ids[:, :4], **{name: cache})
        assert first[CACHE_NAME] is cache
        rest = model(ids[:, 4:], **{name: cache}).logits
        assert (torch.cat([first.logits, rest], dim=1) - full).abs().max() <= 1e-5, name
    with pytest.raises(ValueError, match="`cache` or as `past_key_values`"):
        model(ids, cache=ResFormerCache(model.config), past_key_values=ResFormerCache(model.config))
    with pytest.raises(TypeError, match="the cache is a DynamicCache.*ResFormerCache"):
        model(ids, cache=DynamicCache())


def test_exported_config_records_the_transformers_release_and_the_tested_majors(exported):
    config = json.loads((exported / "config.json").read_text())
    assert config["exported_with_transformers"] == VERSION
    assert config["tested_transformers_majors"] == list(TESTED_TRANSFORMERS_MAJORS)
    # This suite is what the tested majors claim: it must be running under one of them.
    assert INSTALLED[0] in config["tested_transformers_majors"]


@pytest.fixture
def untested_warnings(monkeypatch, caplog):
    """Forgets earlier warnings about untested releases and returns the records of new ones."""
    monkeypatch.setattr(configuration_resformer, "_untested_versions_warned", set())
    caplog.set_level(logging.WARNING, logger=configuration_resformer.__name__)
    return lambda: [r for r in caplog.records if r.name == configuration_resformer.__name__]


def test_loading_under_an_untested_major_version_warns_once_in_one_line(exported, monkeypatch, untested_warnings):
    monkeypatch.setattr(transformers, "__version__", "6.1.0")
    for _ in range(2):
        ResFormerForCausalLM.from_pretrained(exported)
    ResFormerConfig.from_pretrained(exported)
    (record,) = untested_warnings()
    message = record.getMessage()
    assert "\n" not in message
    assert f"tested with transformers 5.x (exported with {VERSION})" in message
    assert "transformers 6.1.0 is installed" in message


@pytest.mark.parametrize("version", [VERSION, "5.99.0"])
def test_loading_under_a_tested_major_version_is_silent(exported, monkeypatch, untested_warnings, version):
    monkeypatch.setattr(transformers, "__version__", version)
    ResFormerConfig.from_pretrained(exported)
    assert untested_warnings() == []


def test_tested_majors_must_be_a_list_of_major_versions():
    for bad in ([], ["5"], [5.0], [True]):
        with pytest.raises(ValueError, match=r"tested_transformers_majors=.*e\.g\. \[5\]"):
            ResFormerConfig(tested_transformers_majors=bad)
