"""Hugging Face export of every variant, and lm-eval's own command line.

Every variant is exported to a trust_remote_code folder; one fresh `python -I` process, in which lit_resformer
cannot be imported, loads all folders with transformers alone and records logits, greedy `generate()` (with the
logits of each cached decoding step), the KV-cache bytes and left-padded batched generation. The project's model
is the reference for all of it. Slow tests score exported folders with lm-eval's `hf` model through the real
`lm_eval` command and run `lit-resformer lm-eval` end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_resformer import load_checkpoint
from lit_resformer.cli import main
from lit_resformer.eval.lm_eval_cli import lm_eval_argv, task_folder
from lit_resformer.export import MODEL_CODE, REMOTE_CODE, export_model, export_resformer, loading_code
from lit_resformer.model import ModelConfig, Transformer
from tests.helpers.eval_data import CORPUS, arc_data_dir, byte_bpe_tokenizer
from tests.helpers.experiments import tiny_experiment
from tests.helpers.hf_remote import (
    NEW_TOKENS,
    PROMPT_LEN,
    check_in_plain_transformers,
    exported_modules,
    reference_case,
)
from tests.helpers.models import LEARNABLE_CHOICES

# name -> ModelConfig overrides of a 6-layer model (d_model 32, 4 heads).
VARIANTS = {
    "resformer": {"residual": {"target": "v"}},
    "resformer-lambda": {"residual": {"target": "v", "self_weight": 1.0, "lam": 2.0}},
    "resformer-scalar": {"residual": {"target": "v", "learnable": "scalar"}},
    "resformer-head-gqa": {"residual": {"target": "v", "learnable": "head"}, "n_kv_head": 2},
    "resformer-token": {"residual": {"target": "v", "learnable": "token"}},
    "resformer-tied": {"residual": {"target": "v", "learnable": "tied"}},
    "resformer-last-layers": {"residual": {"target": "v", "layers": [4, 5, 6]}},
    "query-previous": {"residual": {"target": "q", "source": "previous", "learnable": "head"}},
    "key-all-uniform": {"residual": {"target": "k", "source": "all", "self_weight": "uniform", "lam": "uniform"}},
    "identity-all": {"residual": {"target": "v", "source": "all", "mapping": "identity", "self_weight": 1.0,
                                  "lam": 1.0}},
    "cross-attention-gqa": {"residual": {"target": "v", "mapping": "cross_attention", "source": "previous"},
                            "n_kv_head": 2},
    "neutreno": {"neutreno_lambda": 0.4},
    "resformer-neutreno-mqa": {"residual": {"target": "v"}, "neutreno_lambda": 0.2, "n_kv_head": 1},
    "denseformer": {"dwa": {"enabled": True, "dilation": 2, "period": 2}},
    "svformer": {"share": {"svformer": True}},
    "svformer-anchors-gqa": {"share": {"svformer": True, "anchors": [4]}, "n_kv_head": 2},
    "svformer-num-anchors-cla-k": {"share": {"svformer": True, "num_anchors": 4, "every": 2, "what": "k"}},
    "cla-gqa": {"share": {"every": 2, "what": "kv"}, "n_kv_head": 2},
    "share-k-every-3-mqa-resformer": {"share": {"every": 3, "what": "k"}, "n_kv_head": 1,
                                      "residual": {"target": "v"}},
    "first-q": {"share": {"first": "q"}},
    "first-k": {"share": {"first": "k"}},  # layers n >= 2 cache V only
    # The value path beyond the paper: x-transformers' per-head gate with a bias, RWKV-7's low-rank per-channel gate,
    # nanochat's value embeddings, modded-nanogpt's (shared table, gate reading the table, learned λ) with ResFormer.
    "token-gate-head-bias-gqa": {"residual": {"target": "v", "learnable": "token", "gate_bias": True}, "n_kv_head": 2},
    "token-gate-channel-low-rank": {"residual": {"target": "v", "learnable": "token", "gate_per": "channel",
                                                 "gate_rank": 4, "gate_bias": True}},
    "value-embed-alternate": {"value_embed": {"layers": "alternate"}},
    "value-embed-shared-lambda-resformer-gqa": {
        "value_embed": {"layers": [1, 2, 5, 6], "shared": True, "gate_width": 6, "gate_reads_table": True,
                        "gate_scale": 2.0, "value_weight": "learnable"},
        "residual": {"target": "v"}, "n_kv_head": 2},
    **LEARNABLE_CHOICES,  # every choice of the variant Literals that builds learnable weights
}


@pytest.fixture(scope="module")
def bpe():
    return byte_bpe_tokenizer()


def make_model(bpe, seed: int, **overrides) -> Transformer:
    """A small model whose learnable mixing weights (DenseFormer's alphas too) are moved off their initial values."""
    torch.manual_seed(seed)
    config = ModelConfig.from_dict({"n_layer": 6, "n_head": 4, "d_model": 32, "ffn_dim": 64, "init_std": 0.1,
                                    "vocab_size": bpe.get_vocab_size(), "max_seq_len": 64, **overrides})
    model = Transformer(config).eval()
    with torch.no_grad():
        for p in model.mixing_parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


@pytest.fixture(scope="module")
def svformer_run(tmp_path_factory, tiny_corpus, data_cache):
    """Two training steps of an SVFormer with an anchor and GQA, through `lit-resformer fit`."""
    root = tmp_path_factory.mktemp("svformer_run")
    config = tiny_experiment(
        root / "experiment.yaml", tiny_corpus, data_cache,
        trainer={"max_steps": 2, "val_check_interval": 2},
        model={"config": {"n_layer": 4, "n_head": 4, "n_kv_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64,
                          "share": {"svformer": True, "anchors": [3]}},
               "lr": 3e-3, "warmup_steps": 1})
    main(["fit", "--config", str(config), "--trainer.default_root_dir", str(root / "svformer")])
    return root / "svformer" / "checkpoints" / "last.ckpt"


def padded_vocab_export(bpe, folder: Path):
    """Embedding and LM head padded to 384 rows (a multiple of 128) as fast kernels keep them: export drops them."""
    model = make_model(bpe, seed=43, residual={"target": "v"})
    weights = model.state_dict()
    for name in ("tok_emb.weight", "lm_head.weight"):
        weights[name] = torch.cat([weights[name], torch.randn(384 - len(weights[name]), 32)])
    export_resformer(model.config, weights, bpe, folder)
    return model


@pytest.fixture(scope="module")
def checked(tmp_path_factory, bpe, svformer_run):
    """Every folder through one isolated process: {name: (expected, what the folder computed)}."""
    root = tmp_path_factory.mktemp("hf_export")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and robust to a busy machine
    models = {}
    for seed, (name, overrides) in enumerate(VARIANTS.items()):
        models[name] = make_model(bpe, seed, **overrides)
        export_model(models[name], bpe, root / name)
    models["vanilla"] = make_model(bpe, seed=40)
    export_model(models["vanilla"], bpe, root / "vanilla")
    models["padded-vocab"] = padded_vocab_export(bpe, root / "padded-vocab")
    main(["export", "--ckpt", str(svformer_run), "--to-hf", str(root / "checkpoint")])
    models["checkpoint"], _ = load_checkpoint(svformer_run)

    cases, expected = {}, {}
    for seed, (name, model) in enumerate(models.items()):
        cases[name], expected[name] = reference_case(model, root / name, seed, CORPUS[1])
    torch.set_num_threads(threads)
    results = check_in_plain_transformers(root, cases)
    return {name: (expected[name], results["folders"][name]) for name in models}, root


@pytest.mark.integration
def test_at_least_twelve_variants_and_every_extra_case_were_checked(checked):
    outcomes, root = checked
    assert set(outcomes) == {*VARIANTS, "vanilla", "padded-vocab", "checkpoint"}
    for name in outcomes:
        modeling = (root / name / "modeling_resformer.py").is_file()
        assert modeling == (name != "vanilla"), name
        assert outcomes[name][1]["class"] == ("LlamaForCausalLM" if name == "vanilla" else "ResFormerForCausalLM")
    config = json.loads((root / "svformer" / "config.json").read_text())
    assert config["auto_map"] == {"AutoConfig": "configuration_resformer.ResFormerConfig",
                                  "AutoModelForCausalLM": "modeling_resformer.ResFormerForCausalLM"}
    assert config["share"]["svformer"] is True and (root / "svformer" / "model.safetensors").is_file()


@pytest.mark.integration
@pytest.mark.parametrize("name", [*VARIANTS, "vanilla", "padded-vocab", "checkpoint"])
def test_exported_folder_computes_what_the_project_model_computes(checked, name):
    expected, got = checked[0][name]
    if name != "vanilla":  # config.json gives back the training config, every variant field of it
        assert got["config"] == expected["config"]
    assert (got["logits"] - expected["logits"]).abs().max() <= 1e-5
    assert torch.equal(got["sequences"], expected["sequences"])
    # Each decoding step through HF's cache reproduces the full-sequence logits of the project's model.
    assert (got["step_logits"] - expected["step_logits"]).abs().max() <= 1e-5
    # The cache holds only what layers produce (SVFormer: V once, CLA: one K/V per group): the analytic bytes.
    assert got["cache_length"] == PROMPT_LEN + NEW_TOKENS - 1
    assert got["cache_bytes"] == expected["cache_bytes"]


@pytest.mark.integration
@pytest.mark.parametrize("name", [*VARIANTS, "vanilla", "padded-vocab", "checkpoint"])
def test_beam_search_through_the_cache_equals_beam_search_recomputing_everything(checked, name):
    with_cache, without_cache = checked[0][name][1]["beam_sequences"]
    assert torch.equal(with_cache, without_cache)


@pytest.mark.parametrize("name", ["resformer", "cross-attention-gqa", "svformer-anchors-gqa", "denseformer",
                                  "identity-all", "first-k", "value-embed-shared-lambda-resformer-gqa"])
@pytest.mark.integration
def test_left_padded_batch_generates_what_each_prompt_generates_alone(checked, name):
    expected, got = checked[0][name]
    new_tokens = got["padded_sequences"][:, PROMPT_LEN:]
    for row, alone in enumerate(expected["padded_new_tokens"]):
        assert torch.equal(new_tokens[row], alone), row


@pytest.mark.integration
def test_exported_tokenizer_is_the_runs_tokenizer(checked, bpe, svformer_run):
    _, run_tokenizer = load_checkpoint(svformer_run)
    for name, tokenizer in (("svformer", bpe), ("vanilla", bpe), ("checkpoint", run_tokenizer)):
        assert checked[0][name][1]["text_ids"] == tokenizer.encode(CORPUS[1]).ids, name


@pytest.fixture(scope="module")
def remote_code(tmp_path_factory, bpe):
    """An exported folder and its (configuration, modeling) modules, loaded from it as transformers loads them."""
    folder = tmp_path_factory.mktemp("remote_code") / "resformer"
    export_model(make_model(bpe, seed=0, residual={"target": "v"}), bpe, folder)
    return folder, *exported_modules(folder)


def test_the_exported_code_is_the_training_code_unchanged(remote_code):
    """The model's modules travel as they are, beside the two thin files: no second copy of any variant."""
    folder = remote_code[0]
    thin = {path.name for path in REMOTE_CODE.glob("*.py")}
    copied = {path.name for path in folder.glob("*.py")} - thin
    assert thin == {"configuration_resformer.py", "modeling_resformer.py"} <= {p.name for p in folder.glob("*.py")}
    assert {"transformer.py", "config.py", "cache.py", "kernels.py"} <= copied
    for name in copied:
        assert (folder / name).read_bytes() == (MODEL_CODE / name).read_bytes(), name


def bad_values() -> list[tuple[str, object]]:
    """One value training refuses for every field with a fixed set of choices, and a few numeric ones."""
    fields = [(f"{group}.{name}", "bogus") for group, values in ModelConfig.preset("tiny").to_dict().items()
              if isinstance(values, dict) for name in values]
    return [*fields, ("n_head", 3), ("neutreno_lambda", -1.0), ("dwa.dilation", 0)]


@pytest.mark.parametrize("field,value", bad_values())
def test_a_value_training_refuses_is_refused_by_the_exported_config_with_the_same_message(remote_code, tmp_path,
                                                                                         field, value):
    """Allowed values cannot drift between training and export: config.json with the bad value, loaded through the
    folder's own configuration class, fails as ModelConfig fails."""
    folder, configuration, _ = remote_code
    tiny = {k: v for k, v in ModelConfig.preset("tiny").to_dict().items() if k not in ("size", "attn_impl")}
    group, _, name = field.rpartition(".")
    bad = {**tiny, group: {**tiny[group], name: value}} if group else {**tiny, name: value}
    with pytest.raises(ValueError) as training:
        ModelConfig(**bad)
    with pytest.raises(ValueError) as exported:
        configuration.ResFormerConfig(**bad)
    assert str(exported.value) == str(training.value)
    written = json.loads((folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**written, **bad}))
    with pytest.raises(ValueError) as loaded:
        configuration.ResFormerConfig.from_pretrained(tmp_path)
    assert str(loaded.value) == str(training.value)


def test_a_model_built_from_its_config_is_the_training_codes_model_weight_for_weight(remote_code):
    """transformers' initialisation (post_init) leaves the model's own: the same seed gives the same weights."""
    modeling = remote_code[2]
    for overrides in ({"residual": {"target": "v", "learnable": "head", "source": "all", "self_weight": "uniform",
                                    "lam": "uniform"}, "dwa": {"enabled": True}},
                      {"residual": {"target": "v", "learnable": "token", "gate_per": "channel", "gate_rank": 2,
                                    "gate_bias": True},
                       "value_embed": {"layers": [2, 3], "gate_width": 4, "gate_reads_table": True,
                                       "value_weight": "learnable"}},
                      {"attn_gate": {"per": "element"}, "xsa": {"per": "token"}, "satformer": {"enabled": True},
                       "dense_value": {"layers": "all"}}):
        config = ModelConfig(n_layer=3, n_head=2, d_model=16, ffn_dim=32, vocab_size=64, max_seq_len=16, **overrides)
        torch.manual_seed(0)
        ours = Transformer(config).state_dict()
        torch.manual_seed(0)
        theirs = modeling.ResFormerForCausalLM(modeling.ResFormerConfig(**config.to_dict())).model.state_dict()
        assert set(theirs) == set(ours)
        for name, value in ours.items():
            assert torch.equal(theirs[name], value), name


def _load_in_plain_transformers(code: str, text: str) -> subprocess.CompletedProcess:
    """`code` (loading lines) run in a fresh `python -I` (no lit_resformer) with stdin closed, then the tokenizer on
    `text`: the ids on the last line of stdout."""
    script = (f"from transformers import AutoModelForCausalLM, AutoTokenizer\n{code}\n"
              f"print(tokenizer({text!r})['input_ids'])")
    return subprocess.run([sys.executable, "-I", "-c", script], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("variant", ["vanilla", "resformer"])
def test_the_printed_loading_lines_load_model_and_tokenizer_asking_nothing(tmp_path, bpe, variant):
    """What `lit-resformer export` prints to load a folder (export.loading_code) runs with stdin closed, asks no
    [y/N] question and gives the run's tokenizer; a folder with its own code needs trust_remote_code=True for the
    tokenizer too, since transformers reads the folder's config first."""
    folder = tmp_path / "hf"
    export_model(make_model(bpe, 3, **({"residual": {"target": "v"}} if variant == "resformer" else {})), bpe, folder)
    code = loading_code(folder)
    assert ("trust_remote_code=True" in code) == (variant == "resformer")
    done = _load_in_plain_transformers(code, CORPUS[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[y/N]" not in done.stdout + done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == bpe.encode(CORPUS[2]).ids
    if variant == "resformer":  # the tokenizer alone, without the flag: transformers asks about the config's code
        asked = _load_in_plain_transformers(f"tokenizer = AutoTokenizer.from_pretrained({str(folder)!r})", CORPUS[2])
        assert "[y/N]" in asked.stdout + asked.stderr


# ------------------------------------------------------------------------------------ lit-resformer lm-eval
def test_lm_eval_command_adds_only_the_missing_defaults(tmp_path):
    tasks = tmp_path / "tasks"
    assert lm_eval_argv(["--model_args", "ckpt=a.ckpt", "--tasks", "piqa"], tasks, "cpu") == [
        "run", "--model_args", "ckpt=a.ckpt", "--tasks", "piqa", "--model", "lit-resformer", "--device", "cpu",
        "--include_path", str(tasks)]
    mine = ["run", "--model", "hf", "--device=cuda:1", "--include_path", "x", "--tasks", "piqa"]
    assert lm_eval_argv(mine, tasks, "cpu") == mine
    assert lm_eval_argv(["ls", "tasks"], tasks, "cpu") == ["ls", "tasks"]
    assert lm_eval_argv(["--help"], tasks, "cpu") == ["run", "--help"]


def test_offline_task_folder_holds_the_project_tasks_and_the_prepared_data(tmp_path):
    from lm_eval.tasks import TaskManager

    from lit_resformer.eval.tasks import PROJECT_TASKS_DIR

    assert task_folder(None, tmp_path / "unused") == PROJECT_TASKS_DIR
    data_dir, _ = arc_data_dir(tmp_path / "data")
    folder = task_folder(data_dir, tmp_path / "tasks")
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    assert {"arc_easy", "lrf_tiny_mc"} <= set(manager.all_tasks)
    assert "dataset_path: arrow" in (folder / "offline" / "arc_easy.yaml").read_text()


# ------------------------------------------------------------------------------------ slow: lm-eval end to end
def lm_eval_samples(out_dir: Path, task: str) -> list[dict]:
    (path,) = Path(out_dir).rglob(f"samples_{task}_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def request_args(sample: dict) -> list[tuple]:
    """(context, continuation) of each request: tuples in memory, {"gen_args_i": {"arg_j": ...}} in lm-eval's files."""
    args = sample["arguments"]
    return [tuple(a.values()) for a in args.values()] if isinstance(args, dict) else [tuple(a) for a in args]


def assert_same_scores(ours: list[dict], theirs: list[dict]) -> None:
    ours, theirs = sorted(ours, key=lambda s: s["doc_id"]), sorted(theirs, key=lambda s: s["doc_id"])
    assert [s["doc_id"] for s in ours] == [s["doc_id"] for s in theirs] and ours
    for a, b in zip(ours, theirs, strict=True):
        assert request_args(a) == request_args(b)
        ll_a = torch.tensor([float(r[0][0]) for r in a["resps"]], dtype=torch.float64)
        ll_b = torch.tensor([float(r[0][0]) for r in b["resps"]], dtype=torch.float64)
        assert (ll_a - ll_b).abs().max() <= 1e-4, a["doc_id"]
        for metric in ("acc", "acc_norm"):
            assert a[metric] == b[metric], (a["doc_id"], metric)


OFFLINE_TASKS = ("lrf_tiny_mc", "arc_easy")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resformer-token", "svformer-anchors-gqa"])
def test_lm_evals_hf_model_on_an_exported_folder_matches_the_registered_model(tmp_path, bpe, name):
    from lit_resformer.eval.lm_eval_model import LitResFormerLM
    from lit_resformer.eval.run import run_eval

    model = make_model(bpe, seed=7, **VARIANTS[name])
    export_model(model, bpe, tmp_path / "hf")
    data_dir, _ = arc_data_dir(tmp_path / "data")
    ours = run_eval(LitResFormerLM(model=model, tokenizer=bpe, batch_size=4), tasks=list(OFFLINE_TASKS),
                    data_dir=data_dir, out_dir=tmp_path / "ours")

    # lm-eval's own command, unchanged: the hf model with trust_remote_code on the exported folder.
    lm_eval = Path(sys.executable).with_name("lm_eval")
    command = [str(lm_eval), "--model", "hf", "--model_args",
               f"pretrained={tmp_path / 'hf'},trust_remote_code=True,dtype=float32", "--tasks", ",".join(OFFLINE_TASKS),
               "--include_path", str(task_folder(data_dir, tmp_path / "tasks")), "--device", "cpu",
               "--batch_size", "4", "--output_path", str(tmp_path / "theirs"), "--log_samples"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "m")}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (results_path,) = (tmp_path / "theirs").rglob("results_*.json")
    theirs = json.loads(results_path.read_text())
    for task in OFFLINE_TASKS:
        assert_same_scores(ours["samples"][task], lm_eval_samples(tmp_path / "theirs", task))
        for metric in ("acc,none", "acc_norm,none"):
            assert ours["results"][task][metric] == theirs["results"][task][metric], (task, metric)


@pytest.mark.slow
def test_lit_resformer_lm_eval_runs_lm_evals_cli_on_a_checkpoint(tmp_path, svformer_run):
    from lit_resformer.eval.run import run_eval

    data_dir, _ = arc_data_dir(tmp_path / "data")
    command = [sys.executable, "-m", "lit_resformer.cli", "lm-eval", "--model_args", f"ckpt={svformer_run}",
               "--tasks", ",".join(OFFLINE_TASKS), "--data-dir", str(data_dir), "--batch_size", "4",
               "--output_path", str(tmp_path / "out"), "--log_samples"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (results_path,) = (tmp_path / "out").rglob("results_*.json")
    results = json.loads(results_path.read_text())
    assert results["config"]["model"] == "lit-resformer" and results["config"]["device"] == "cpu"
    direct = run_eval(svformer_run, tasks=list(OFFLINE_TASKS), data_dir=data_dir, batch_size=4)
    for task in OFFLINE_TASKS:
        assert_same_scores(direct["samples"][task], lm_eval_samples(tmp_path / "out", task))
