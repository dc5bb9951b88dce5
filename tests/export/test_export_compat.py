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
from lit_resformer.model import ModelConfig, Transformer
from tests.helpers.eval_data import byte_bpe_tokenizer
from tests.helpers.hf_remote import exported_modules

VERSION = transformers.__version__  # before any test fakes another
INSTALLED = tuple(int(part) for part in VERSION.split(".")[:2])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export") / "hf"
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layer=2, n_head=2, d_model=16, ffn_dim=32, vocab_size=320, max_seq_len=32,
                                    residual={"target": "v"}))
    export_model(model, byte_bpe_tokenizer(), folder)
    return folder


@pytest.fixture(scope="module")
def configuration(exported):
    """The exported folder's configuration_resformer module, loaded from it as transformers loads it."""
    return exported_modules(exported)[0]


@pytest.fixture(scope="module")
def modeling(exported):
    """The exported folder's modeling_resformer module."""
    return exported_modules(exported)[1]


def tiny_hf_model(modeling):
    """An SVFormer with GQA (V cached once, K per layer), randomly initialised."""
    torch.manual_seed(0)
    config = modeling.ResFormerConfig(n_layer=3, n_head=4, n_kv_head=2, d_model=16, ffn_dim=32, vocab_size=64,
                                      max_seq_len=32, share={"svformer": True})
    return modeling.ResFormerForCausalLM(config).eval()


def test_the_cache_goes_by_the_name_of_the_installed_release(modeling):
    # transformers 5.24 renamed the cache argument and output field of every model (past_key_values -> cache).
    assert modeling.CACHE_NAME == ("cache" if INSTALLED >= (5, 24) else "past_key_values")


@torch.no_grad()
def test_generate_builds_the_models_own_cache_through_the_transformers_hook(modeling):
    """generate() must hand forward a ResFormerCache: the hook that builds it is internal to transformers. It is
    allocated once, for the max_length - 1 positions generate() feeds."""
    model = tiny_hf_model(modeling)
    ids = torch.randint(1, 64, (2, 5), generator=torch.Generator().manual_seed(0))
    out = model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0,
                         return_dict_in_generate=True)
    cache = out[modeling.CACHE_NAME]
    assert isinstance(cache, modeling.ResFormerCache) and cache.get_seq_length() == 5 + 4 - 1
    assert cache.kv.max_seq == 5 + 4 - 1
    assert torch.equal(out.sequences, model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None,
                                                     pad_token_id=0, use_cache=False))


@torch.no_grad()
def test_assisted_generation_crops_the_cache_back_to_the_accepted_tokens(modeling):
    """Prompt-lookup decoding drafts tokens and drops the cached positions of those the model rejects."""
    model = tiny_hf_model(modeling)
    ids = torch.randint(1, 8, (1, 12), generator=torch.Generator().manual_seed(2))  # repeats give drafts to look up
    greedy = dict(max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(model.generate(ids, prompt_lookup_num_tokens=3, **greedy), model.generate(ids, **greedy))


@torch.no_grad()
def test_forward_takes_the_cache_under_either_name_and_it_grows_as_needed(modeling):
    model = tiny_hf_model(modeling)
    ids = torch.randint(1, 64, (1, 9), generator=torch.Generator().manual_seed(1))
    full = model(ids, use_cache=False).logits
    for name in ("cache", "past_key_values"):
        cache = modeling.ResFormerCache(model.config)
        first = model(ids[:, :4], **{name: cache})
        assert first[modeling.CACHE_NAME] is cache and cache.kv.max_seq == 4  # what the first pass needs
        steps = [model(ids[:, t:t + 1], **{name: cache}).logits for t in range(4, 9)]
        assert cache.kv.max_seq == 16  # doubled twice, never past max_seq_len
        assert (torch.cat([first.logits, *steps], dim=1) - full).abs().max() <= 1e-5, name
    with pytest.raises(ValueError, match="`cache` or as `past_key_values`"):
        model(ids, cache=modeling.ResFormerCache(model.config), past_key_values=modeling.ResFormerCache(model.config))
    with pytest.raises(TypeError, match="the cache is a DynamicCache.*ResFormerCache"):
        model(ids, cache=DynamicCache())


def test_exported_config_records_the_transformers_release_and_the_tested_majors(exported, configuration):
    config = json.loads((exported / "config.json").read_text())
    assert config["exported_with_transformers"] == VERSION
    assert config["tested_transformers_majors"] == list(configuration.TESTED_TRANSFORMERS_MAJORS)
    # This suite is what the tested majors claim: it must be running under one of them.
    assert INSTALLED[0] in config["tested_transformers_majors"]


@pytest.fixture
def untested_warnings(monkeypatch, caplog, configuration):
    """Forgets earlier warnings about untested releases and returns the records of new ones. The tests fake a release
    on the transformers module the exported code imported: transformers can put a new module object in sys.modules
    after this test module imported its own (an import of a Llama class does)."""
    monkeypatch.setattr(configuration, "_untested_versions_warned", set())
    caplog.set_level(logging.WARNING, logger=configuration.__name__)
    return lambda: [r for r in caplog.records if r.name == configuration.__name__]


def test_loading_under_an_untested_major_version_warns_once_in_one_line(exported, configuration, modeling, monkeypatch,
                                                                        untested_warnings):
    monkeypatch.setattr(configuration.transformers, "__version__", "6.1.0")
    for _ in range(2):
        modeling.ResFormerForCausalLM.from_pretrained(exported)
    modeling.ResFormerConfig.from_pretrained(exported)
    (record,) = untested_warnings()
    message = record.getMessage()
    assert "\n" not in message
    assert f"tested with transformers 5.x (exported with {VERSION})" in message
    assert "transformers 6.1.0 is installed" in message


@pytest.mark.parametrize("version", [VERSION, "5.99.0"])
def test_loading_under_a_tested_major_version_is_silent(exported, configuration, monkeypatch, untested_warnings,
                                                        version):
    monkeypatch.setattr(configuration.transformers, "__version__", version)
    configuration.ResFormerConfig.from_pretrained(exported)
    assert untested_warnings() == []


def test_tested_majors_must_be_a_list_of_major_versions(configuration):
    for bad in ([], ["5"], [5.0], [True]):
        with pytest.raises(ValueError, match=r"tested_transformers_majors=.*e\.g\. \[5\]"):
            configuration.ResFormerConfig(tested_transformers_majors=bad)
