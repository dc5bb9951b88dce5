"""RunStack: a stack of runs trained as one equals each run trained alone (fp32, 50 steps, per-run clipping and
AdamW), also where the runs differ in the model's numbers (λ, μ); per-run clipping is not global clipping; models of
different shapes are refused; the chunked loss's generated batching rule; on CUDA the step as one CUDA graph."""

from __future__ import annotations

import pytest
import torch
from torch.func import vmap

from lit_resformer.model.loss import linear_cross_entropy, plain_cross_entropy
from lit_resformer.stacking.engine import GraphedStep, RunStack
from tests.helpers.models import build, small, tokens

TOLERANCE = 1e-5  # fp32, on the losses of every step
CLIP = 1.0


def solo_step(model, optimizer, inputs, labels) -> float:
    """One step of a run alone, as Lightning takes it: loss, backward, clip_grad_norm_, AdamW."""
    optimizer.zero_grad(set_to_none=True)
    loss = model(inputs, labels=labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    optimizer.step()
    return loss.item()


def adamw(model, lr):
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)


def train_side_by_side(configs, seeds, lrs, steps):
    """Losses [step][run] of the runs trained alone and stacked, on the same batches (each run its own)."""
    alone = [build(config, seed).train() for config, seed in zip(configs, seeds, strict=True)]
    stacked = [build(config, seed).train() for config, seed in zip(configs, seeds, strict=True)]
    alone_opt = [adamw(m, lr) for m, lr in zip(alone, lrs, strict=True)]
    stack = RunStack(stacked)
    stack_opt = [adamw(m, lr) for m, lr in zip(stacked, lrs, strict=True)]
    max_norms = torch.full((len(configs),), CLIP)
    alone_losses, stacked_losses = [], []
    for step in range(steps):
        # each run its own four batches, in turn: enough to see the loss fall
        batch = torch.stack([tokens(batch=4, length=17, seed=1000 * run + step % 4) for run in range(len(configs))])
        inputs, labels = batch[:, :, :-1], batch[:, :, 1:]
        alone_losses.append([solo_step(m, o, inputs[i], labels[i]) for i, (m, o)
                             in enumerate(zip(alone, alone_opt, strict=True))])
        losses, _ = stack.train_step(inputs, labels, max_norms, stack_opt)
        stacked_losses.append(losses.tolist())
    return torch.tensor(alone_losses), torch.tensor(stacked_losses), alone, stacked


def test_a_stack_of_two_runs_trains_each_as_alone_for_50_steps():
    config = small(residual={"target": "v"})
    alone, stacked, alone_models, stacked_models = train_side_by_side([config, config], [0, 1], [3e-3, 1e-3], 50)
    assert (alone - stacked).abs().max() < TOLERANCE
    assert (alone[-1] < alone[0]).all()  # they trained
    for a, b in zip(alone_models, stacked_models, strict=True):  # each run's own parameters hold its own weights
        for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
            assert (p - q).abs().max() < 1e-4, name


@pytest.mark.parametrize("variant", [
    {"residual": {"target": "v", "self_weight": 1.0, "lam": 0.5}, "other": {"residual": {"target": "v", "self_weight": 1.0, "lam": 0.2}}},
    {"neutreno_lambda": 0.4, "other": {"neutreno_lambda": 0.2}},
    {"residual": {"target": "v", "source": "all", "self_weight": "uniform", "lam": "uniform"},
     "other": {"residual": {"target": "v", "source": "all", "self_weight": 0.5, "lam": 0.5}}},
], ids=["lambda", "neutreno-mu", "uniform-vs-fixed-weights"])
def test_runs_that_differ_in_the_models_numbers_stack(variant):
    variant = dict(variant)
    other = variant.pop("other")
    configs = [small(**variant), small(**other)]
    stack = RunStack([build(c, 0) for c in configs])
    assert stack.numbers, "the runs' own numbers are handed to each run"
    alone, stacked, _, _ = train_side_by_side(configs, [0, 0], [3e-3, 3e-3], 10)
    assert (alone - stacked).abs().max() < TOLERANCE
    assert (alone[:, 0] != alone[:, 1]).any()  # the numbers matter


def test_per_run_clipping_is_not_global_clipping():
    """One run's gradient large, the other's small: each is clipped by its own norm, so the small one is left as it
    is, where clipping the stack's gradients together (clip_grad_norm_ over all of them) scales it down too."""
    config = small()
    stack = RunStack([build(config, 0), build(config, 1)])
    for grad in stack.grads:
        grad.copy_(torch.randn_like(grad))
        grad[0] *= 100.0 / grad[0].norm()
        grad[1] *= 0.01 / grad[1].norm()
    before = [g.clone() for g in stack.grads]
    norms = stack.grad_norms()
    count = len(stack.grads)
    assert norms.tolist() == pytest.approx([100.0 * count ** 0.5, 0.01 * count ** 0.5], rel=1e-5)
    stack.clip_grads_(norms, torch.full((2,), CLIP))
    assert stack.grad_norms()[0].item() == pytest.approx(CLIP, rel=1e-5)
    assert all(torch.equal(g[1], b[1]) for g, b in zip(stack.grads, before, strict=True))  # untouched
    globally = [torch.nn.Parameter(torch.zeros_like(b)) for b in before]  # the stack as one set of parameters
    for parameter, grad in zip(globally, before, strict=True):
        parameter.grad = grad.clone()
    torch.nn.utils.clip_grad_norm_(globally, CLIP)
    small_after_global = torch.linalg.vector_norm(torch.stack([p.grad[1].norm() for p in globally]))
    # global clipping scales both by CLIP / the stack's norm (~100 sqrt(count)): the small run's norm to ~1e-4
    assert small_after_global.item() == pytest.approx(0.01 * CLIP / 100.0, rel=1e-3)


def test_models_of_different_shapes_are_refused():
    with pytest.raises(ValueError, match="same parameters and buffers"):
        RunStack([build(small(), 0), build(small(n_layer=4), 0)])
    with pytest.raises(ValueError, match="differ in blocks.1.attn.neutreno"):
        RunStack([build(small(neutreno_lambda=0.4), 0), build(small(), 0)])


def test_the_chunked_loss_batches_under_vmap():
    """The chunked loss's autograd.Function under vmap (its batching rule generated from its forward) equals the
    plain loss run by run, loss and gradients."""
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 20, 8, generator=generator, requires_grad=True)
    weight = torch.randn(3, 128, 8, generator=generator, requires_grad=True)
    labels = torch.randint(0, 97, (3, 20), generator=generator)
    labels[0, 3] = -100
    losses = vmap(lambda h, w, y: linear_cross_entropy(h, w, y, 97))(hidden, weight, labels)
    grads = torch.autograd.grad(losses.sum(), (hidden, weight))
    reference = torch.stack([plain_cross_entropy(hidden[i], weight[i], labels[i], 97) for i in range(3)])
    expected = torch.autograd.grad(reference.sum(), (hidden, weight))
    assert (losses - reference).abs().max() < 1e-5
    for got, want in zip(grads, expected, strict=True):
        assert (got - want).abs().max() < 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_step_as_one_cuda_graph_equals_the_eager_step():
    """GraphedStep (three eager warm-up steps, then one captured step replayed) trains a stack as the eager step
    does, with capturable AdamW whose learning rate the schedule changes between replays."""
    torch.backends.cuda.matmul.allow_tf32 = False
    config = small(residual={"target": "v"})
    runs = []
    for graphed in (False, True):
        models = [build(config, seed).cuda().train() for seed in (0, 1)]
        stack = RunStack(models)
        optimizers = [torch.optim.AdamW(m.parameters(), lr=torch.tensor(3e-3, device="cuda"), capturable=True)
                      for m in models]
        max_norms = torch.full((2,), CLIP, device="cuda")

        def step(inputs, labels, stack=stack, optimizers=optimizers, max_norms=max_norms):
            return stack.train_step(inputs, labels, max_norms, optimizers)

        run = GraphedStep(step) if graphed else step
        losses = []
        for index in range(8):
            for optimizer in optimizers:
                optimizer.param_groups[0]["lr"].fill_(3e-3 / (1 + index))
            batch = torch.stack([tokens(batch=4, length=17, seed=100 * r + index) for r in range(2)]).cuda()
            losses.append(run(batch[:, :, :-1], batch[:, :, 1:])[0].clone())
        runs.append(torch.stack(losses))
    assert (runs[0] - runs[1]).abs().max() < 1e-4
