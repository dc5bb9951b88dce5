"""The LM head and its cross-entropy: the training loss, by one of two paths that give the same numbers.

`next_token_loss` is what the model trains through; `chunked_loss_pays` alone decides which path it takes.

- `plain_cross_entropy`: the head's fp32 logits for the whole batch, then `F.cross_entropy`. PyTorch's fused
  log-softmax and its backward pass touch every logit the fewest times, so on the CPU it is the faster path at
  every size measured (`python -m benchmarks loss_path`: the chunked one takes 1.1 to 2.4x as long for the
  head and loss at vocabularies 4,096 and 50,277).
- `linear_cross_entropy`: the logits never held for the whole batch. The head's logits are the largest tensor
  of a training step ([tokens x vocabulary], 3.3 GB in bf16 for 16 x 2,048 tokens and 50,304 columns) and the
  loss wants them in fp32. It takes `CHUNK_LOGITS` logits at a time, computes the chunk's loss in fp32 and,
  when gradients are needed, the chunk's gradients right away (d loss / d logits = softmax - one-hot), so
  nothing of the chunk is kept for the backward pass. Gradients are accumulated in fp32. On a GPU
  `torch.compile` fuses each chunk's element-wise work into a few passes.

On both paths the columns at or beyond `vocab_size` (the padding rows of the head) are invisible: never
predicted, never scored, and they receive no gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_LOGITS = 1 << 28  # logits per chunk: 1 GiB in fp32
# The most logits a step may hold at once on the plain path. Up to one chunk, chunking saves no memory: the
# single chunk's temporaries are as large as the plain path's logits, log-probabilities and their gradient.
PLAIN_MAX_LOGITS = CHUNK_LOGITS


def _rows_per_chunk(rows: int, columns: int) -> int:
    """Equal chunks of at most CHUNK_LOGITS logits each."""
    chunks = -(-rows * columns // CHUNK_LOGITS)
    return -(-rows // max(chunks, 1))


def _loss_and_grads(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                    ignore_index: int, with_grads: bool):
    """Mean loss over the scored tokens and, `with_grads`, its gradients for `hidden` and `weight`."""
    scored = labels != ignore_index
    count = scored.sum()
    targets = torch.where(scored, labels, 0)[:, None]
    columns = torch.arange(weight.shape[0], device=weight.device)
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    grad_hidden = torch.empty_like(hidden) if with_grads else None
    grad_weight = torch.zeros_like(weight, dtype=torch.float32) if with_grads else None
    step = _rows_per_chunk(hidden.shape[0], weight.shape[0])
    # Element-wise work only between the matmuls (no scatter), so torch.compile fuses it into a few passes.
    for start in range(0, hidden.shape[0], step):
        rows = slice(start, start + step)
        # Under autocast the matmul runs in bf16; the softmax and the loss are always fp32.
        logits = F.linear(hidden[rows], weight).float().masked_fill(columns >= vocab_size, float("-inf"))
        lse = torch.logsumexp(logits, dim=-1)
        total = total + ((lse - logits.gather(1, targets[rows]).squeeze(1)) * scored[rows]).sum()
        if with_grads:
            # d mean / d logits = (softmax - one_hot(target)) / count, zero on rows that are not scored.
            grad_logits = (torch.exp(logits - lse[:, None]) - (columns == targets[rows]).float()) \
                * (scored[rows] / count)[:, None]
            grad_hidden[rows] = grad_logits.to(weight.dtype) @ weight
            grad_weight += grad_logits.t().to(hidden.dtype) @ hidden[rows]
    return total / count, grad_hidden, grad_weight


class _LinearCrossEntropy(torch.autograd.Function):
    """Gradients are computed in the forward pass (chunk by chunk) and only scaled in the backward pass.

    The forward returns them beside the loss (marked non-differentiable) and `setup_context` saves them: that form
    lets torch.func transform the function, so that `vmap` over a stack of runs (lit_resformer.stacking) takes this
    path too, its batching rule generated from the forward's own operations."""

    generate_vmap_rule = True

    @staticmethod
    def forward(hidden, weight, labels, vocab_size: int, ignore_index: int):
        loss, grad_hidden, grad_weight = _loss_and_grads(hidden, weight, labels, vocab_size, ignore_index, True)
        return loss, grad_hidden, grad_weight.to(weight.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, grad_hidden, grad_weight = output
        ctx.mark_non_differentiable(grad_hidden, grad_weight)
        ctx.save_for_backward(grad_hidden, grad_weight)

    @staticmethod
    def backward(ctx, grad_loss, _grad_hidden, _grad_weight):
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_loss, grad_weight * grad_loss, None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                         ignore_index: int = -100) -> torch.Tensor:
    """Mean next-token loss of `hidden` [..., d] through the head `weight` [rows, d] against `labels` [...].

    Equals `F.cross_entropy((hidden @ weight.T)[..., :vocab_size].float(), labels, ignore_index=ignore_index)`.
    """
    hidden, labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _LinearCrossEntropy.apply(hidden, weight, labels, vocab_size, ignore_index)[0]
    return _loss_and_grads(hidden, weight, labels, vocab_size, ignore_index, False)[0]


def plain_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                        ignore_index: int = -100) -> torch.Tensor:
    """`linear_cross_entropy`'s loss from the whole batch's logits: the head's real rows only, softmax in fp32."""
    hidden, labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    # Slicing the weight's rows (not the logits' columns) keeps the logits contiguous and never computes the
    # padding columns; the slice's backward gives the padding rows a zero gradient.
    logits = F.linear(hidden, weight[:vocab_size]).float()
    return F.cross_entropy(logits, labels, ignore_index=ignore_index)


def chunked_loss_pays(device: torch.device, logits: int) -> bool:
    """Whether a step with `logits` head outputs (tokens x head rows) on `device` takes the chunked path.

    Off the CPU (CUDA): always, the path compiles to fused chunks and keeps the logits out of memory. On the
    CPU only when the plain path would hold more than `PLAIN_MAX_LOGITS` logits at once: below that the plain
    path is the faster one, with no crossover at the sizes measured.
    """
    return device.type != "cpu" or logits > PLAIN_MAX_LOGITS


def next_token_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                    ignore_index: int = -100) -> torch.Tensor:
    """The training loss of `hidden` [..., d] through the head `weight` [rows, d] against `labels` [...], by
    the path `chunked_loss_pays` picks for this device and size."""
    logits = hidden.numel() // hidden.shape[-1] * weight.shape[0]
    path = linear_cross_entropy if chunked_loss_pays(hidden.device, logits) else plain_cross_entropy
    return path(hidden, weight, labels, vocab_size, ignore_index)
