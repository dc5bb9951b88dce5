"""CUDA tests: `pytest -m gpu` (`make test-gpu`), skipped where no GPU is available.

Every variant trains under bf16, SDPA agrees with the explicit kernel, decoding (eager, CUDA-graph replay,
`generate`) reproduces the full forward pass, the compiled model equals the eager one, the chunked loss equals
PyTorch's cross-entropy, the Lightning loop does not synchronise between logging steps, and the 82M model trains
with bf16-mixed + torch.compile through `lit-resformer fit`, then resumes from its checkpoint. flash-attn is
tested only where it is installed (it is an optional extra).
"""

from __future__ import annotations

import warnings

import lightning as L
import pytest
import torch
from conftest import write_tiny_corpus

from lit_resformer import load_checkpoint
from lit_resformer.cli import main
from lit_resformer.model import ModelConfig, Transformer
from lit_resformer.model.decoding import GraphedDecodeStep
from lit_resformer.model.loss import linear_cross_entropy
from lit_resformer.runs.run_dir import RunDir
from lit_resformer.training.module import LitResFormer
from tests.helpers.experiments import tiny_experiment
from tests.helpers.models import DECODE_VARIANTS, loss_inputs, reference, small, spy_on_loss_paths, tokens

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CUDA = torch.device("cuda")
# Compiled forward + backward (the training path) for these; the forward pass is compiled for every variant.
COMPILED_TRAINING = ["vanilla", "resformer", "svformer", "cross-attention", "learnable-token", "denseformer",
                     "cla3+gqa", "neutreno+gqa"]


@pytest.fixture(autouse=True)
def isolated():
    """fp32 comparisons without TF32 (LitResFormer turns TF32 on for training; tests share the process), and
    dynamo's caches emptied: after 8 compiled versions of one function (the model's forward, compiled for
    variant after variant) it would silently run the rest eagerly."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    torch._dynamo.reset()
    yield
    torch.set_float32_matmul_precision(before)


def on_cuda(config: ModelConfig, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(config).to(CUDA).eval()


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


# ---------------------------------------------------------------------------- the Lightning loop (first: the longest)
class SyncsByStep(L.Callback):
    """Counts the device synchronisations PyTorch reports (`set_sync_debug_mode`) in each optimizer step."""

    def __init__(self):
        self.records: list = []
        self.marks: list[tuple[int, int]] = []

    def on_train_start(self, trainer, pl_module):
        self.catcher = warnings.catch_warnings(record=True)
        self.records = self.catcher.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.marks.append((trainer.global_step, len(self.records)))

    def on_train_end(self, trainer, pl_module):
        torch.cuda.set_sync_debug_mode("default")
        self.marks.append((trainer.global_step, len(self.records)))
        self.catcher.__exit__(None, None, None)

    def by_step(self) -> dict[int, list[str]]:
        found: dict[int, list[str]] = {}
        for (step, start), (_, end) in zip(self.marks, self.marks[1:], strict=False):
            found.setdefault(step, []).extend(str(w.message)[:200] for w in self.records[start:end]
                                             if "synchroniz" in str(w.message))
        return {step: messages for step, messages in found.items() if messages}


def test_training_loop_does_not_synchronise_between_logging_steps(tmp_path, tiny_datamodule):
    datamodule = tiny_datamodule(micro_batch_size=4, seq_len=32)  # 70 batches: the 30 of this run in one epoch
    datamodule.prepare_data()
    datamodule.setup("fit")
    config = ModelConfig(n_layer=2, n_head=2, d_model=64, ffn_dim=128, max_seq_len=64,
                         vocab_size=datamodule.vocab_size, residual={"target": "v", "learnable": "scalar"})
    spy = SyncsByStep()
    trainer = L.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=15, log_every_n_steps=5,
                        accumulate_grad_batches=2, gradient_clip_val=1.0, limit_val_batches=0, num_sanity_val_steps=0,
                        enable_checkpointing=False, enable_model_summary=False, callbacks=[spy],
                        logger=L.pytorch.loggers.CSVLogger(tmp_path), default_root_dir=tmp_path,
                        use_distributed_sampler=False)
    trainer.fit(LitResFormer(config, lr=3e-3, warmup_steps=2), datamodule=datamodule)
    logging_steps = {4, 9, 14}  # global step when the step starts; the logs are written at its end
    unexpected = {step: messages for step, messages in spy.by_step().items() if step not in logging_steps | {0}}
    assert not unexpected, unexpected


def test_82m_fits_bf16_compiled_then_resumes(tmp_path):
    corpus = write_tiny_corpus(tmp_path / "corpus", documents_per_domain=1500)  # 55 batches of 16 x 256
    config = tiny_experiment(
        tmp_path / "82m.yaml", corpus, tmp_path / "cache",
        trainer={"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed", "max_steps": 100,
                 "val_check_interval": 50, "log_every_n_steps": 10},
        checkpoint={"every_n_train_steps": 50},
        model={"config": {"size": "82M"}, "lr": 1e-3, "warmup_steps": 10, "compile": True},
        data={"seq_len": 256, "micro_batch_size": 16})
    run = tmp_path / "run"
    main(["fit", "--config", str(config), "--trainer.default_root_dir", str(run)])
    first = RunDir(run).read_metrics()
    losses = dict(first["train/loss"])
    assert sorted(losses) == list(range(9, 100, 10))
    assert losses[99] < losses[9] - 1.0, losses  # it learns
    assert "train/device/items_per_sec" in first
    main(["fit", "--config", str(config), "--trainer.default_root_dir", str(run), "--trainer.max_steps", "120",
          "--ckpt_path", "last"])
    resumed = dict(RunDir(run).read_metrics()["train/loss"])
    assert {109, 119} <= set(resumed) and resumed[119] < losses[9] - 1.0
    model, tokenizer = load_checkpoint(run / "checkpoints" / "last.ckpt", device="cuda")
    assert model.config.size == "82M" and model.lm_head.weight.shape[0] == model.config.padded_vocab_size
    prompt = torch.tensor([tokenizer.encode("the river").ids], device=CUDA)
    assert model.generate(prompt, max_new_tokens=5).shape == (1, prompt.shape[1] + 5)


# ---------------------------------------------------------------------------- every variant, bf16
@pytest.mark.parametrize("name", list(DECODE_VARIANTS))
def test_every_variant_trains_under_bf16(name):
    model = on_cuda(small(**DECODE_VARIANTS[name])).train()
    x, y = tokens().to(CUDA), tokens(seed=2).to(CUDA)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, labels=y)
    loss.backward()
    reference_loss = model(x, labels=y)  # fp32
    assert abs(loss.item() - reference_loss.item()) < 2e-2 * reference_loss.item()
    for param_name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), param_name


@pytest.mark.parametrize("name", list(DECODE_VARIANTS))
def test_sdpa_equals_explicit_kernel_within_bf16_tolerance(name):
    overrides = {k: v for k, v in DECODE_VARIANTS[name].items() if k != "attn_impl"}
    sdpa = on_cuda(small(**overrides))
    explicit = on_cuda(small(**overrides, attn_impl="explicit"))
    x = tokens().to(CUDA)
    with torch.no_grad():
        assert relative_error(explicit(x), sdpa(x)) < 1e-4  # fp32
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert relative_error(explicit(x), sdpa(x)) < 2e-2  # bf16 operands: 1e-3 .. 1e-2


# ---------------------------------------------------------------------------- decoding
@pytest.mark.parametrize("name", list(DECODE_VARIANTS))
def test_decode_matches_forward_on_cuda(name):
    """Eager steps over the growing cache, graph replays of the static step, and generate(): the full forward's
    logits and greedy tokens."""
    model = on_cuda(small(**DECODE_VARIANTS[name]))
    x = tokens(length=14).to(CUDA)
    with torch.no_grad():
        full = model(x)
        cache = model.new_cache(batch=2, max_seq=14)
        eager = torch.cat([model(x[:, :5], cache=cache)] + [model(x[:, t:t + 1], cache=cache) for t in range(5, 14)], 1)
        cache = model.new_cache(batch=2, max_seq=16)
        prefill = model(x[:, :5], cache=cache)
        step = GraphedDecodeStep(model, cache, batch=2)
        graphed = torch.cat([prefill[:, -1:]] + [step(x[:, t:t + 1]).clone()[:, None] for t in range(5, 14)], 1)
    assert relative_error(eager, full) < 1e-4
    assert relative_error(graphed, full[:, 4:]) < 1e-4
    assert int(cache.pos) == 14
    greedy = x[:, :4]
    with torch.no_grad():
        for _ in range(8):
            greedy = torch.cat([greedy, model(greedy)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(model.generate(x[:, :4], max_new_tokens=8), greedy)


def test_graphed_steps_own_their_caches():
    """The decode benchmark's pattern: several graphs recorded in one process, each over a cache the caller no
    longer references, other tensors allocated in between, then replayed. Before the step kept its cache, the
    freed cache memory was reused and the first replay hit a device-side index assert."""
    x = tokens(length=14).to(CUDA)
    models = {name: on_cuda(small(**DECODE_VARIANTS[name])) for name in ("vanilla", "svformer")}
    steps, fulls = {}, {}
    for name, model in models.items():
        with torch.no_grad():
            fulls[name] = model(x)
            cache = model.new_cache(batch=2, max_seq=16)
            model(x[:, :5], cache=cache)
            steps[name] = GraphedDecodeStep(model, cache, batch=2)
        del cache
        torch.cuda.empty_cache()
        clutter = [torch.full((2, 4, 16, 8), 10**6, dtype=torch.float32, device=CUDA) for _ in range(64)]
    for name, step in steps.items():
        assert step.cache.pos.device.type == "cuda"
        with torch.no_grad():
            graphed = torch.stack([step(x[:, t:t + 1]).clone() for t in range(5, 14)], 1)
        assert relative_error(graphed, fulls[name][:, 5:]) < 1e-4
    del clutter


# ---------------------------------------------------------------------------- torch.compile
@pytest.mark.parametrize("name", list(DECODE_VARIANTS))
def test_compiled_forward_equals_eager(name):
    model = on_cuda(small(**DECODE_VARIANTS[name]))
    x = tokens().to(CUDA)
    with torch.no_grad():
        assert relative_error(torch.compile(model)(x), model(x)) < 1e-4


@pytest.mark.parametrize("name", COMPILED_TRAINING)
def test_compiled_training_step_equals_eager(name):
    model = on_cuda(small(**DECODE_VARIANTS[name])).train()
    x, y = tokens().to(CUDA), tokens(seed=2).to(CUDA)
    eager = model(x, labels=y)
    eager_grads = torch.autograd.grad(eager, list(model.parameters()))
    compiled = torch.compile(model)(x, labels=y)
    compiled_grads = torch.autograd.grad(compiled, list(model.parameters()))
    assert abs(compiled.item() - eager.item()) < 1e-5
    for (param_name, _), a, b in zip(model.named_parameters(), compiled_grads, eager_grads, strict=True):
        assert relative_error(a, b) < 1e-4, param_name


def test_compiled_cross_layer_attention_goes_through_flex_attention(monkeypatch):
    """Eq. 2 in compiled CUDA code uses the FlexAttention block mask (the masked SDPA kernel computes every score of
    both key blocks); the result is the eager masked SDPA's, forward and backward (the test above for every layer)."""
    from lit_resformer.model import kernels

    calls = []
    real = kernels.flex_attention
    monkeypatch.setattr(kernels, "flex_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    model = on_cuda(small(**DECODE_VARIANTS["cross-attention"])).train()
    x, y = tokens().to(CUDA), tokens(seed=2).to(CUDA)
    eager = model(x, labels=y)
    assert not calls
    compiled = torch.compile(model)(x, labels=y)
    assert calls, "the compiled model did not trace FlexAttention"
    assert abs(compiled.item() - eager.item()) < 1e-5


# ---------------------------------------------------------------------------- padded head, chunked loss
def test_chunked_loss_equals_cross_entropy_on_cuda():
    hidden, weight, labels = (t.detach().to(CUDA) for t in loss_inputs(rows=4096, d=64, vocab=50277, padded=50304))
    hidden.requires_grad_(), weight.requires_grad_()
    ours, ref = linear_cross_entropy(hidden, weight, labels, 50277), reference(hidden, weight, labels, 50277)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(torch.autograd.grad(ours, (hidden, weight)), torch.autograd.grad(ref, (hidden, weight)),
                    strict=True):
        assert relative_error(a, b) < 1e-5
    compiled = torch.compile(linear_cross_entropy)(hidden, weight, labels, 50277)
    torch.testing.assert_close(compiled, ref, rtol=1e-5, atol=1e-5)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ours, ref = linear_cross_entropy(hidden, weight, labels, 50277), reference(hidden, weight, labels, 50277)
        grads = torch.autograd.grad(ours, (hidden, weight)), torch.autograd.grad(ref, (hidden, weight))
    # the two head matmuls (50,304 and 50,277 columns) may round a logit to a neighbouring bf16 value
    assert abs(ours.item() - ref.item()) < 2e-3 * ref.item()
    for a, b in zip(*grads, strict=True):
        assert relative_error(a, b) < 2e-2


def test_the_training_loss_on_cuda_is_the_chunked_one(monkeypatch):
    """Even a step far below the CPU's plain-path budget: on a GPU the chunked path compiles into fused chunks."""
    taken = spy_on_loss_paths(monkeypatch)
    model = on_cuda(small()).train()
    model(tokens().to(CUDA), labels=tokens(seed=2).to(CUDA)).backward()
    assert taken == ["linear_cross_entropy"]


def test_padded_columns_are_never_predicted_on_cuda():
    model = on_cuda(small())
    x = tokens().to(CUDA)
    with torch.no_grad():
        before = model.generate(x[:, :4], max_new_tokens=6)
        model.lm_head.weight[model.config.vocab_size:] = 1e4
        assert torch.equal(model.generate(x[:, :4], max_new_tokens=6), before)
        assert model(x).shape[-1] == model.config.vocab_size


def test_flash_attention_equals_sdpa():
    pytest.importorskip("flash_attn", reason="flash-attn is an optional extra, not installed here")
    sdpa = on_cuda(small()).to(torch.bfloat16)
    flash = on_cuda(small(attn_impl="flash")).to(torch.bfloat16)
    x = tokens().to(CUDA)
    with torch.no_grad():
        assert relative_error(flash(x), sdpa(x)) < 2e-2
