"""Load exported Hugging Face folders where lit-resformer cannot be imported, and record what they compute.

    python -I hf_remote_check.py CASES.pt RESULTS.pt TRANSFORMERS_HOME

TRANSFORMERS_HOME is the folder that holds the calling process's `transformers` package: `-I` drops PYTHONPATH,
yet a test run against another transformers release (first on PYTHONPATH) must check that release.

CASES maps a name to {"dir", "ids", "max_new_tokens", "padded_ids", "padded_mask", "text"}. RESULTS holds the
version of transformers that loaded the folders and, for each folder, the class transformers built, the training
config the folder's config.json gives (remote-code folders), full-sequence logits, greedy `generate()` with the
logits of every decoding step and the bytes of the KV cache it kept, greedy generation of a left-padded batch, beam
search with and without the cache, and the tokenizer's ids of `text`.
The comparisons with the project's own model are the calling test's.

The project is installed in this environment (editable), so its packages are refused at import time: the check
below proves the folders load with torch and transformers alone.
"""

import importlib.abc
import sys

PROJECT_PACKAGES = ("lit_resformer", "benchmarks")


class RefuseProject(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in PROJECT_PACKAGES:
            raise ModuleNotFoundError(f"No module named {name!r} (the project is not installed here)", name=name)
        return None


sys.meta_path.insert(0, RefuseProject())
try:
    import lit_resformer  # noqa: F401
except ModuleNotFoundError:
    pass
else:
    sys.exit("lit_resformer is importable: the check would not show that the folders stand alone")

sys.path.insert(0, sys.argv[3])
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def cache_bytes(cache) -> int:
    """What the K/V tensors of a generate() cache hold: the model's own KV cache behind the exported cache adapter
    (`kv`), or the layers of transformers' cache (Llama)."""
    kv = getattr(cache, "kv", None)
    if kv is not None:
        tensors = [*kv.keys, *kv.values]
    else:
        tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def returned_cache(output):
    """The cache a generate() output holds, under the name the running transformers gives it (5.24 renamed it)."""
    return output["cache"] if "cache" in output else output["past_key_values"]


def main(cases_path: str, results_path: str) -> None:
    cases = torch.load(cases_path)
    results = {}
    for name, case in cases.items():
        model = AutoModelForCausalLM.from_pretrained(case["dir"], trust_remote_code=True, dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(case["dir"], trust_remote_code=True)
        greedy = dict(max_new_tokens=case["max_new_tokens"], do_sample=False, eos_token_id=None)  # never stop early
        with torch.no_grad():
            logits = model(case["ids"]).logits
        out = model.generate(case["ids"], attention_mask=torch.ones_like(case["ids"]), return_dict_in_generate=True,
                             output_logits=True, **greedy)
        padded = model.generate(case["padded_ids"], attention_mask=case["padded_mask"], **greedy)
        # Beam search reorders the cache between steps; recomputing everything (no cache) must agree with it.
        beams = [model.generate(case["ids"], attention_mask=torch.ones_like(case["ids"]), num_beams=3,
                                use_cache=use_cache, **greedy) for use_cache in (True, False)]
        results[name] = {
            "class": type(model).__name__,
            "config": model.config.model_config().to_dict() if hasattr(model.config, "model_config") else None,
            "logits": logits,
            "sequences": out.sequences,
            "step_logits": torch.stack(out.logits, dim=1),
            "cache_bytes": cache_bytes(returned_cache(out)),
            "cache_length": returned_cache(out).get_seq_length(),
            "padded_sequences": padded,
            "beam_sequences": beams,
            "text_ids": tokenizer(case["text"])["input_ids"],
        }
    assert not [m for m in sys.modules if m.partition(".")[0] in PROJECT_PACKAGES]
    torch.save({"transformers": transformers.__version__, "folders": results}, results_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
