"""The fast path, proved on the CPU: the padded embedding and head, the two paths of the loss (chunked linear +
cross-entropy, plain logits + cross-entropy) and the one decision between them, the static-shape decode step, and a Lightning loop that reads nothing to the host between logging steps
while training exactly as before (golden losses)."""

from __future__ import annotations

import traceback
from pathlib import Path

import lightning as L
import pytest
import torch

from lit_resformer import load_checkpoint
from lit_resformer.cli import main
from lit_resformer.model import ModelConfig, Transformer, causal_lm_loss
from lit_resformer.model import loss as loss_module
from lit_resformer.model.decoding import GraphedDecodeStep
from lit_resformer.model.loss import chunked_loss_pays, linear_cross_entropy, plain_cross_entropy
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.training.module import LitResFormer
from tests.helpers.experiments import tiny_experiment
from tests.helpers.models import (
    DECODE_VARIANTS,
    build,
    loss_inputs,
    reference,
    small,
    spy_on_loss_paths,
    tokens,
)


# ---------------------------------------------------------------------------- the chunked loss
@pytest.fixture
def uneven_chunks(monkeypatch):
    """7 x 128 logits per chunk: 50 rows x 128 columns split into chunks of 7 rows and a last one of 1."""
    monkeypatch.setattr(loss_module, "CHUNK_LOGITS", 7 * 128)


def grads(loss, *tensors):
    return torch.autograd.grad(loss, tensors)


def test_chunked_loss_and_gradients_equal_the_reference_in_fp32(uneven_chunks):
    hidden, weight, labels = loss_inputs()
    ours, ref = linear_cross_entropy(hidden, weight, labels, vocab_size=100), reference(hidden, weight, labels, 100)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    (gh, gw), (rh, rw) = grads(ours, hidden, weight), grads(ref, hidden, weight)
    torch.testing.assert_close(gh, rh, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gw, rw, rtol=1e-5, atol=1e-6)
    assert torch.equal(gw[100:], torch.zeros_like(gw[100:]))  # padding rows learn nothing
    assert torch.equal(gh[::7], torch.zeros_like(gh[::7]))  # ignored positions send no gradient
    with torch.no_grad():  # the no-grad path (validation) computes the same loss
        torch.testing.assert_close(linear_cross_entropy(hidden, weight, labels, 100), ref, rtol=1e-5, atol=1e-5)


def test_plain_and_chunked_paths_give_the_same_loss_and_gradients(uneven_chunks):
    hidden, weight, labels = loss_inputs(seed=1)
    chunked, plain = linear_cross_entropy(hidden, weight, labels, 100), plain_cross_entropy(hidden, weight, labels, 100)
    torch.testing.assert_close(plain, chunked, rtol=1e-5, atol=1e-5)
    plain_grads = grads(plain, hidden, weight)
    for a, b in zip(plain_grads, grads(chunked, hidden, weight), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    gw = plain_grads[1]
    assert torch.equal(gw[100:], torch.zeros_like(gw[100:]))  # the padding rows (at 50.0, see loss_inputs) unseen


def test_chunked_loss_under_bf16_autocast(uneven_chunks):
    """Both sides run the head matmul in bf16 and the softmax in fp32; what differs is only the order in which
    chunks accumulate, so the documented tolerance is 1e-4 on the loss and 1e-2 relative on the gradients."""
    hidden, weight, labels = loss_inputs(seed=3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, ref = linear_cross_entropy(hidden, weight, labels, 100), reference(hidden, weight, labels, 100)
        (gh, gw), (rh, rw) = grads(ours, hidden, weight), grads(ref, hidden, weight)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-4)
    for a, b in ((gh, rh), (gw, rw)):
        assert a.dtype == b.dtype == torch.float32
        assert ((a - b).norm() / b.norm()).item() < 1e-2


@pytest.fixture(params=["plain", "chunked"])
def loss_path(request, monkeypatch, uneven_chunks):
    """The model's loss through either path on the CPU: a plain-path budget of 0 logits forces the chunked one."""
    if request.param == "chunked":
        monkeypatch.setattr(loss_module, "PLAIN_MAX_LOGITS", 0)
    return request.param


def test_model_loss_equals_causal_lm_loss_of_its_logits(loss_path):
    model = build(small(residual={"target": "v", "learnable": "scalar"}))  # vocab 97 -> 128 rows
    assert model.lm_head.weight.shape[0] == model.config.padded_vocab_size == 128
    x, y = tokens(), tokens(seed=2)
    y[0, :3] = -100
    fused = model(x, labels=y)
    fused_grads = grads(fused, *model.parameters())
    ref = causal_lm_loss(model(x), y)
    ref_grads = grads(ref, *model.parameters())
    torch.testing.assert_close(fused, ref, rtol=1e-5, atol=1e-5)
    for (name, _), a, b in zip(model.named_parameters(), fused_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_the_loss_path_is_chunked_on_a_gpu_or_past_the_memory_budget_and_plain_for_small_cpu_steps(monkeypatch):
    budget = loss_module.PLAIN_MAX_LOGITS
    assert chunked_loss_pays(torch.device("cuda"), 1) and chunked_loss_pays(torch.device("cuda", 0), budget)
    assert not chunked_loss_pays(torch.device("cpu"), 16 * 256 * 4096)  # the CPU benchmarks' tiny step
    assert not chunked_loss_pays(torch.device("cpu"), budget)
    assert chunked_loss_pays(torch.device("cpu"), budget + 1)
    # the model asks the decision with its step's size: batch x tokens x the head's (padded) rows
    model = build(small())
    taken = spy_on_loss_paths(monkeypatch)
    x, y = tokens(), tokens(seed=2)
    model(x, labels=y)
    monkeypatch.setattr(loss_module, "PLAIN_MAX_LOGITS", x.numel() * 128 - 1)
    model(x, labels=y)
    assert taken == ["plain_cross_entropy", "linear_cross_entropy"]


# ---------------------------------------------------------------------------- the padded head is never seen
@pytest.mark.integration
def test_padding_rows_are_never_predicted_or_scored(loss_path):
    model = build(small())
    x, y = tokens(), tokens(seed=2)
    with torch.no_grad():
        logits, loss, greedy = model(x), model(x, labels=y), model.generate(x[:, :4], max_new_tokens=6)
        model.lm_head.weight[97:] = 1e4  # a padding column would now win every argmax and dominate every softmax
        model.tok_emb.weight[97:] = 1e4
        assert model(x).shape == (2, 20, 97)
        assert torch.equal(model(x), logits)
        assert torch.equal(model(x, labels=y), loss)
        assert torch.equal(model.generate(x[:, :4], max_new_tokens=6), greedy)


def test_padding_keeps_the_initial_weights_and_counts_only_real_parameters():
    """Built at vocab_size rows and padded with zeros: the same seed gives the same model as before padding."""
    torch.manual_seed(0)
    padded = Transformer(small())
    torch.manual_seed(0)
    unpadded = Transformer(small(vocab_size=128))  # a vocabulary that needs no padding: same RNG use up to the head
    assert torch.equal(padded.tok_emb.weight[97:], torch.zeros(31, 64))
    assert torch.equal(padded.lm_head.weight[97:], torch.zeros(31, 64))
    c = padded.config
    assert padded.num_params() == sum(p.numel() for p in padded.parameters()) - 2 * 31 * c.d_model
    assert padded.unpadded_state_dict()["lm_head.weight"].shape == (97, 64)
    assert unpadded.num_params() - padded.num_params() == 2 * 31 * c.d_model


def test_a_state_dict_saved_before_padding_still_loads(tmp_path):
    model = build(small())
    old = model.unpadded_state_dict()  # what a checkpoint held before the rows were padded
    fresh = Transformer(small())
    fresh.load_state_dict(old)
    x = tokens()
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))
    # through a Lightning checkpoint file, as load_checkpoint (eval, analysis, export) reads it
    path = tmp_path / "old.ckpt"
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    tokenizer = Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>"))
    torch.save({"hyper_parameters": {"config": model.config.to_dict()},
                "state_dict": {f"model.{k}": v for k, v in old.items()},
                "LMDataModule": {"tokenizer_json": tokenizer.to_str()}}, path)
    loaded, _ = load_checkpoint(path)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


@pytest.mark.integration
def test_resuming_training_from_a_checkpoint_saved_before_padding_isrefused(tmp_path, tiny_corpus, data_cache):
    run = tmp_path / "run"
    config = tiny_experiment(tmp_path / "e.yaml", tiny_corpus, data_cache, trainer={"max_steps": 2})
    main(["fit", "--config", str(config), "--trainer.default_root_dir", str(run)])
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    vocab = ModelConfig(**ckpt["hyper_parameters"]["config"]).vocab_size
    for name in ("model.tok_emb.weight", "model.lm_head.weight"):
        ckpt["state_dict"][name] = ckpt["state_dict"][name][:vocab]
    torch.save(ckpt, last)
    with pytest.raises(ValueError, match="saved before the embedding and LM head were padded"):
        main(["fit", "--config", str(config), "--trainer.default_root_dir", str(run), "--trainer.max_steps", "3",
              "--ckpt_path", "last"])


# ---------------------------------------------------------------------------- static-shape decoding
@pytest.mark.integration
@pytest.mark.parametrize("name", list(DECODE_VARIANTS))
def test_static_decode_step_matches_full_forward(name):
    """Prefill on the growing cache, then decode with the position on the device and attention over the whole
    preallocated cache under a mask (the step GraphedDecodeStep records on CUDA): same logits."""
    config = small(**DECODE_VARIANTS[name])
    model = build(config)
    x = tokens(length=14)
    with torch.no_grad():
        full = model(x)
        cache = model.new_cache(batch=2, max_seq=16)  # two positions more than used: masked, never read
        steps = [model(x[:, :5], cache=cache)]
        cache.make_static()
        position = cache.pos
        steps.append(model(x[:, 5:7], cache=cache))  # a static step of two tokens
        steps += [model(x[:, t:t + 1], cache=cache) for t in range(7, 14)]
    assert cache.pos is position and int(cache.pos) == 14  # advanced in place, on the tensor itself
    assert (torch.cat(steps, 1) - full).abs().max().item() <= 1e-5


def test_graphed_decode_step_needs_cuda():
    model = build(small())
    with pytest.raises(ValueError, match="needs a CUDA model"):
        GraphedDecodeStep(model, model.new_cache(1, 8), batch=1)


@pytest.mark.slow
def test_compiled_loss_equals_eager(monkeypatch):
    """torch.compile traces the chunked loss's autograd.Function (inductor on the CPU: about 2 minutes), the path
    a GPU takes; on the CPU it is taken only past the plain path's budget, here 0 logits."""
    monkeypatch.setattr(loss_module, "PLAIN_MAX_LOGITS", 0)
    model = build(small(n_layer=2, residual={"target": "v"})).train()
    x, y = tokens(), tokens(seed=2)
    eager = model(x, labels=y)
    eager_grads = grads(eager, *model.parameters())
    compiled = torch.compile(model)(x, labels=y)
    for a, b in zip(grads(compiled, *model.parameters()), eager_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- the Lightning loop
# Recorded from the implementation before the padded head, the chunked loss and the sync-free loop (vocabulary
# 300 padded to 384 here, so the padding is part of what is compared): same run, same numbers. ResFormer with
# learnable scalar weights, 2 micro-batches per step.
GOLDEN = {
    "train/loss": [5.6991376876831055, 5.6956892013549805, 5.654404640197754, 5.548238754272461,
                  5.455214977264404, 5.344050407409668, 5.3028564453125, 5.266022682189941],
    "train/grad_norm": [1.103734016418457, 1.1682199239730835, 1.179137945175171, 1.1369209289550781,
                       1.109478235244751, 1.185314655303955, 1.1354787349700928, 1.1399028301239014],
    "mix/layer2/self": [0.5, 0.49999991059303284, 0.5007473230361938, 0.5029405355453491, 0.5052186250686646,
                       0.5061233639717102, 0.5063371658325195, 0.5064702033996582],
    "mix/layer3/history": [0.5, 0.5000001192092896, 0.5014689564704895, 0.5044007301330566, 0.5071660280227661,
                          0.5094519257545471, 0.5099282264709473, 0.5101091265678406],
    "val/loss": [5.701086759567261, 5.649044036865234, 5.442257881164551, 5.297011375427246, 5.242414951324463],
}
GOLDEN_VAL_STEPS = [0, 1, 3, 5, 7]


def golden_run(tmp_path, corpus, cache, log_every: int) -> dict:
    config = tiny_experiment(
        tmp_path / "golden.yaml", corpus, cache, global_batch_tokens=128,  # 2 micro-batches per step
        trainer={"max_steps": 8, "val_check_interval": 4, "log_every_n_steps": log_every},
        model={"config": {"n_layer": 3, "n_head": 2, "d_model": 32, "ffn_dim": 64, "max_seq_len": 64,
                          "residual": {"target": "v", "learnable": "scalar"}},
               "lr": 3e-3, "warmup_steps": 2})
    main(["fit", "--config", str(config), "--trainer.default_root_dir", str(tmp_path / f"run{log_every}")])
    return RunDir(tmp_path / f"run{log_every}").read_metrics()


@pytest.mark.integration
def test_training_curve_is_the_golden_one(tmp_path, tiny_corpus, data_cache):
    metrics = golden_run(tmp_path, tiny_corpus, data_cache, log_every=1)
    for name, expected in GOLDEN.items():
        steps = GOLDEN_VAL_STEPS if name == "val/loss" else list(range(8))
        assert [s for s, _ in metrics[name]] == steps, name
        assert [v for _, v in metrics[name]] == pytest.approx(expected, abs=1e-5), name
    # written every 4 steps, the logged values are the same numbers
    sparse = golden_run(tmp_path, tiny_corpus, data_cache, log_every=4)
    for name in ("train/loss", "train/grad_norm", "mix/layer2/self", "mix/layer3/history"):
        assert [s for s, _ in sparse[name]] == [3, 7], name
        assert [v for _, v in sparse[name]] == pytest.approx([GOLDEN[name][3], GOLDEN[name][7]], abs=1e-5)
    assert "train/device/items_per_sec" in sparse


HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")


class HostReads(L.Callback):
    """Records every read of a floating-point or boolean tensor's value to the host, by optimizer step.

    Token ids and data-loader indices are integer tensors and are not counted. Reads inside torch.optim are left
    out: a non-fused optimizer keeps its step counters on the host, on CUDA too, so reading them never waits on
    the device.
    """

    def __init__(self):
        self.reads: dict[int, list[str]] = {}
        self.step: int | None = None

    def __enter__(self):
        self.saved = {name: getattr(torch.Tensor, name) for name in HOST_READS}
        for name, original in self.saved.items():
            def read(tensor, *args, _original=original, _name=name, **kwargs):
                if self.step is not None and (tensor.is_floating_point() or tensor.dtype == torch.bool):
                    where = "".join(traceback.format_stack(limit=4)[:-1])
                    if "torch/optim/" not in where:
                        self.reads.setdefault(self.step, []).append(f"{_name}: {where}")
                return _original(tensor, *args, **kwargs)
            setattr(torch.Tensor, name, read)
        return self

    def __exit__(self, *exc):
        for name, original in self.saved.items():
            setattr(torch.Tensor, name, original)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.step = trainer.global_step

    def on_train_end(self, trainer, pl_module):
        self.step = None


def fit_tiny(tmp_path, datamodule, max_steps: int, callbacks, log_every: int = 3, **config):
    """LitResFormer on the tiny corpus, 2 micro-batches per step, no validation, through Lightning's own Trainer."""
    datamodule.prepare_data()
    datamodule.setup("fit")
    model_config = ModelConfig(n_layer=2, n_head=2, d_model=32, ffn_dim=64, max_seq_len=64,
                               vocab_size=datamodule.vocab_size, **config)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, log_every_n_steps=log_every,
                        accumulate_grad_batches=2, gradient_clip_val=1.0, limit_val_batches=0,
                        num_sanity_val_steps=0, enable_model_summary=False, callbacks=callbacks,
                        logger=L.pytorch.loggers.CSVLogger(tmp_path), default_root_dir=tmp_path,
                        use_distributed_sampler=False)
    trainer.fit(LitResFormer(model_config, lr=3e-3, warmup_steps=2), datamodule=datamodule)
    return trainer


@pytest.mark.integration
def test_nothing_is_read_to_the_host_between_logging_steps(tmp_path, tiny_datamodule):
    """Logs every 3 steps, the progress bar on: the loss, gradient norm, mixing weights, divergence check,
    throughput clock and bar are read on steps 3 and 6 only (global steps 2 and 5 when they start)."""
    spy = HostReads()
    with spy:
        fit_tiny(tmp_path, tiny_datamodule(), 6, [spy], residual={"target": "v", "learnable": "scalar"},
                 dwa={"enabled": True})
    assert set(spy.reads) == {2, 5}, {step: reads[:2] for step, reads in spy.reads.items()}


class PoisonAt(L.Callback):
    """Turns the final norm's weight to NaN before micro-batch `batch`: every loss from then on is NaN."""

    def __init__(self, batch: int):
        self.batch = batch

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == self.batch:
            with torch.no_grad():
                pl_module._core.norm.weight.fill_(float("nan"))


@pytest.mark.integration
def test_divergence_names_the_step_where_it_happened(tmp_path, tiny_datamodule):
    """The loss turns NaN in micro-batch 7 (optimizer step 3 with 2 micro-batches a step); it is read on the next
    logging step (6), the error names step 3, and no checkpoint of the diverged weights is written."""
    checkpoints = L.pytorch.callbacks.ModelCheckpoint(tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1,
                                                      filename="step{step}", auto_insert_metric_name=False)
    with pytest.raises(FloatingPointError, match=r"diverged: non-finite loss at step 3 \(nan\)"):
        fit_tiny(tmp_path, tiny_datamodule(), 8, [PoisonAt(7), checkpoints])
    saved = sorted(int(p.stem.removeprefix("step")) for p in Path(tmp_path / "ckpt").glob("step*.ckpt"))
    assert saved == [1, 2, 3]  # the weights after step 3's update are NaN: never saved
