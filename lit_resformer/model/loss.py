"""The LM head and its cross-entropy in one pass over chunks of tokens (the training loss).

The head's logits are the largest tensor of a training step ([tokens x vocabulary], 3.3 GB in bf16 for 16 x 2,048
tokens and 50,304 columns) and the loss wants them in fp32. `linear_cross_entropy` never holds them for the whole
batch: it takes `CHUNK_LOGITS` logits at a time, computes the chunk's loss in fp32 and, when gradients are needed,
the chunk's gradients right away (d loss / d logits = softmax - one-hot), so nothing of the chunk is kept for the
backward pass. Gradients are accumulated in fp32. Columns at or beyond `vocab_size` (the padding rows of the head)
are masked to -inf: they get probability 0, so they are never predicted, never scored and receive no gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_LOGITS = 1 << 28  # logits per chunk: 1 GiB in fp32


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
    """Gradients are computed in the forward pass (chunk by chunk) and only scaled in the backward pass."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, vocab_size: int, ignore_index: int):
        loss, grad_hidden, grad_weight = _loss_and_grads(hidden, weight, labels, vocab_size, ignore_index, True)
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_loss, grad_weight * grad_loss, None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                         ignore_index: int = -100) -> torch.Tensor:
    """Mean next-token loss of `hidden` [..., d] through the head `weight` [rows, d] against `labels` [...].

    Equals `F.cross_entropy((hidden @ weight.T)[..., :vocab_size].float(), labels, ignore_index=ignore_index)`.
    """
    hidden, labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _LinearCrossEntropy.apply(hidden, weight, labels, vocab_size, ignore_index)
    return _loss_and_grads(hidden, weight, labels, vocab_size, ignore_index, False)[0]
