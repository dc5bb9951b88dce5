"""N models of one shape as one: torch.func's `stack_module_state` + `vmap` + `functional_call`.

`RunStack` stacks the runs' parameters and buffers along a leading run dimension. Each run's own parameters are then
made views of its slice (their data and their gradients), so that each run's own optimizer (torch.optim.AdamW, Muon,
whatever `LitResFormer.configure_optimizers` built for it) steps its slice in place and its module's `state_dict`
reads it: the optimizer states, schedules and checkpoints stay the solo run's, and only the forward and backward
passes are batched. The forward pass is `vmap` over `functional_call` of one copy of the model on the meta device;
the numbers the model reads as plain Python numbers (the residual's fixed weights, NeuTRENO's μ, the value
embeddings' gate scale) are handed to each run as its own where they differ (PER_RUN_NUMBERS), else left as the
solo run's number. Nothing needs batched matmuls written by hand: every operation of the model has a batching rule
(PyTorch's, or the one generated for the chunked loss's autograd.Function); SDPA on the CPU has none and is looped
by vmap's fallback, which costs speed, not results.

Gradient clipping is per run (`clip_grads_`): each run's gradients are scaled by its own norm, as `fit` alone would,
never by the norm over the stack. `GraphedStep` captures a whole step (forward, backward, per-run clipping and every
run's optimizer step) as one CUDA graph.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from lit_resformer.model.transformer import Attention, FixedMix, ValueEmbedMix

# Attributes the forward pass reads as plain numbers, by module class: a stack hands each run its own.
PER_RUN_NUMBERS = {FixedMix: ("fixed",), Attention: ("neutreno",), ValueEmbedMix: ("scale",)}
# Attributes a stack does not compare between runs: the model config (lit_resformer.stacking.rules compares it
# field by field) and PyTorch's own bookkeeping.
UNCOMPARED = frozenset({"config", "training"})
# torch.nn.utils.clip_grad_norm_'s epsilon: clip coefficient = max_norm / (norm + eps).
CLIP_EPS = 1e-6


def _plain_attributes(module: nn.Module) -> dict:
    return {k: v for k, v in vars(module).items() if not k.startswith("_") and k not in UNCOMPARED}


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except (RuntimeError, TypeError, ValueError):  # tensors and other values without one truth value
        return a is b


def _numbers(value) -> bool:
    """A number, or a tuple of numbers."""
    parts = value if isinstance(value, tuple) else (value,)
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in parts)


class RunStack:
    """The runs' models trained as one (see the module's docstring). `models` must be built from configs that
    lit_resformer.stacking.rules lets share a stack, on one device; they are changed in place (their parameters
    become views of the stack)."""

    def __init__(self, models: Sequence[nn.Module]):
        if len(models) < 1:
            raise ValueError("a stack needs at least one model")
        self.size = len(models)
        self.numbers = self._per_run_numbers(models)
        self.base = copy.deepcopy(models[0]).to("meta")
        self.params, self.buffers = stack_module_state(list(models))
        for index, model in enumerate(models):
            for name, parameter in model.named_parameters():
                stacked = self.params[name]
                if stacked.grad is None:
                    stacked.grad = torch.zeros_like(stacked)
                parameter.data = stacked.detach()[index]
                parameter.grad = stacked.grad[index]

    @staticmethod
    def _per_run_numbers(models: Sequence[nn.Module]) -> dict[tuple[str, str], torch.Tensor]:
        """(module path, attribute) -> the runs' values [runs, ...] of every number that differs between them;
        ValueError for any other difference."""
        numbers = {}
        shapes = [{k: tuple(v.shape) for k, v in m.state_dict(keep_vars=True).items()} for m in models]
        if any(shape != shapes[0] for shape in shapes[1:]):
            raise ValueError("the models of a stack must have the same parameters and buffers, of the same shapes")
        per_model = [dict(m.named_modules()) for m in models]
        for path, module in per_model[0].items():
            others = [modules.get(path) for modules in per_model[1:]]
            if any(type(other) is not type(module) for other in others):
                raise ValueError(f"the models of a stack differ at {path or 'the top'}: modules of different types")
            for attribute, value in _plain_attributes(module).items():
                values = [value] + [getattr(other, attribute, None) for other in others]
                if all(_same(v, value) for v in values[1:]):
                    continue
                if attribute not in PER_RUN_NUMBERS.get(type(module), ()) or not all(map(_numbers, values)):
                    raise ValueError(f"the models of a stack differ in {path}.{attribute}: {values}")
                numbers[(path, attribute)] = torch.tensor(values, dtype=torch.float32,
                                                          device=next(models[0].parameters()).device)
        return numbers

    @contextlib.contextmanager
    def _numbers_of(self, numbers: dict[tuple[str, str], torch.Tensor]):
        """The base model reading `numbers` (one run's, inside vmap) for the per-run numbers."""
        saved = {}
        try:
            for (path, attribute), value in numbers.items():
                module = self.base.get_submodule(path)
                saved[(path, attribute)] = getattr(module, attribute)
                setattr(module, attribute, tuple(value.unbind(-1)) if value.ndim else value)
            yield
        finally:
            for (path, attribute), value in saved.items():
                setattr(self.base.get_submodule(path), attribute, value)

    def _loss(self, params, buffers, numbers, inputs, labels) -> torch.Tensor:
        with self._numbers_of(numbers):
            return functional_call(self.base, (params, buffers), (inputs,), {"labels": labels})

    def losses(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Each run's mean next-token loss on its own batch: inputs and labels [runs, batch, seq] -> [runs]."""
        self.base.train()
        return vmap(self._loss, randomness="error")(self.params, self.buffers, self.numbers, inputs, labels)

    def eval_losses(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Each run's mean loss on one batch [batch, seq] that all runs evaluate (validation) -> [runs]."""
        self.base.eval()
        return vmap(self._loss, in_dims=(0, 0, 0, None, None), randomness="error")(
            self.params, self.buffers, self.numbers, inputs, labels)

    @property
    def grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.params.values()]

    def zero_grads(self) -> None:
        """Zeros in place: the runs' parameters keep their views of the stacked gradients."""
        torch._foreach_zero_(self.grads)

    def grad_norms(self) -> torch.Tensor:
        """Each run's total gradient norm [runs]: the 2-norm of its tensors' 2-norms, as clip_grad_norm_ takes it."""
        per_tensor = [torch.linalg.vector_norm(g.reshape(self.size, -1), dim=1) for g in self.grads]
        return torch.linalg.vector_norm(torch.stack(per_tensor), dim=0)

    def clip_grads_(self, norms: torch.Tensor, max_norms: torch.Tensor) -> None:
        """Scale each run's gradients by min(1, max_norm / (norm + eps)) of its own norm and limit (inf: unclipped),
        as torch.nn.utils.clip_grad_norm_ does for a run alone: one run's large gradient never scales another's."""
        coefficients = torch.clamp(max_norms / (norms + CLIP_EPS), max=1.0)
        for grad in self.grads:
            grad.mul_(coefficients.view(-1, *[1] * (grad.ndim - 1)))


    def train_step(self, inputs: torch.Tensor, labels: torch.Tensor, max_norms: torch.Tensor,
                   optimizers: Sequence[torch.optim.Optimizer], autocast_dtype: torch.dtype | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """One training step of every run: forward (under autocast to `autocast_dtype` when given) and backward
        together, each run's gradients clipped by its own norm and limit, each run's optimizer stepped. Returns the
        losses and the gradient norms before clipping, [runs] each."""
        self.zero_grads()
        autocast = (torch.autocast(inputs.device.type, dtype=autocast_dtype, cache_enabled=False)
                    if autocast_dtype is not None else contextlib.nullcontext())
        with autocast:
            losses = self.losses(inputs, labels)
        losses.sum().backward()  # the runs are independent: each run's gradient is its own loss's
        norms = self.grad_norms()
        self.clip_grads_(norms, max_norms)
        for optimizer in optimizers:
            optimizer.step()
        return losses.detach(), norms


class GraphedStep:
    """A training step as one CUDA graph: `step(inputs, labels)` (for a stack: zeroed gradients, forward, backward,
    per-run clipping and every run's optimizer step, the optimizers capturable with their learning rates as device
    tensors that the schedulers fill in place) captured once and replayed, so the host launches one graph a step.

    The first `warmup` calls run `step` eagerly on a side stream; they are real steps (a CUDA graph needs the memory
    of a warm step). The next call captures it and every call from it replays the capture. Inputs are copied into
    the graph's static buffers; what it returns are the graph's static outputs, overwritten by the next call."""

    def __init__(self, step: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]], warmup: int = 3):
        self.step, self.warmup = step, warmup
        self.graph: torch.cuda.CUDAGraph | None = None
        self.calls = 0
        self.inputs: torch.Tensor | None = None
        self.labels: torch.Tensor | None = None
        self.outputs: tuple[torch.Tensor, ...] = ()

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.inputs is None:
            self.inputs, self.labels = torch.empty_like(inputs), torch.empty_like(labels)
        self.inputs.copy_(inputs, non_blocking=True)
        self.labels.copy_(labels, non_blocking=True)
        self.calls += 1
        if self.calls <= self.warmup:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                outputs = self.step(self.inputs, self.labels)
            torch.cuda.current_stream().wait_stream(side)
            return outputs
        if self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
            # thread-local: the data loader's pin-memory thread may use CUDA while the step is captured
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.outputs = self.step(self.inputs, self.labels)
        self.graph.replay()
        return self.outputs
