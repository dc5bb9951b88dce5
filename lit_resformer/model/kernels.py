"""Attention kernels: SDPA (default), flash-attn (CUDA, optional extra), explicit (exposes A_n).

All kernels take q [B, H, T, d], k/v [B, Hkv, S, d] and `offset` = number of cached positions before
the T queries, and attend causally: query t sees keys s <= offset + t. `offset` is a 0-d tensor when decoding
with static shapes: k/v then span the whole preallocated cache and the mask hides the unwritten positions.
`key_blocks` > 1 means k/v are `key_blocks` position-aligned sequences concatenated along S (cross-layer
attention, Eq. 2); the causal mask is then repeated for each block. `padding` [B, offset + T] marks the real tokens
of left-padded rows (batched generation): real queries skip padded keys. That mask is built in exactly one place:
`causal_mask`, and as a FlexAttention block mask by `blocked_causal_block_mask` for compiled training on CUDA.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

try:  # absent from some torch builds; this module also travels into exported folders, to whatever torch is there
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
except ImportError:
    flex_attention = None

_flash_attn_func = None


def flash_available(device: torch.device) -> bool:
    return device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None


def causal_mask(t_q: int, t_k: int, offset: int, key_blocks: int, device: torch.device,
                padding: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean [t_q, key_blocks * t_k] mask, True where attention is allowed; with `padding` (boolean [B, t_k], t_k =
    offset + t_q) [B, 1, t_q, key_blocks * t_k], in which real queries skip padded keys while a padded query keeps its
    causal keys, so that no softmax row is empty (what a padded row computes is never read)."""
    rows = torch.arange(t_q, device=device)[:, None] + offset
    mask = torch.arange(t_k, device=device)[None, :] <= rows
    if padding is not None:
        mask = mask & (padding[:, None, None, :] | ~padding[:, None, offset:offset + t_q, None])
    return mask.repeat(*([1] * (mask.dim() - 1)), key_blocks)


def blocked_causal_block_mask(t: int, key_blocks: int, device: torch.device) -> BlockMask:
    """`causal_mask` (offset 0, t_q = t_k = t) as a FlexAttention block mask: key tiles above the diagonal of every
    key block are skipped, so attention costs `key_blocks` causal passes instead of the full [t, key_blocks * t]."""
    return create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx % t <= q_idx, None, None, t, key_blocks * t,
                             device=device)


def attention(q, k, v, *, offset: int | torch.Tensor, key_blocks: int = 1, impl: str = "sdpa",
              on_probs: Callable[[torch.Tensor], None] | None = None,
              padding: torch.Tensor | None = None) -> torch.Tensor:
    t_q, t_k = q.shape[-2], k.shape[-2] // key_blocks
    gqa = q.shape[1] != k.shape[1]
    static = isinstance(offset, torch.Tensor)
    if impl == "explicit" or on_probs is not None:
        return _explicit(q, k, v, causal_mask(t_q, t_k, offset, key_blocks, q.device, padding), on_probs)
    if not static and padding is None:
        if key_blocks > 1 and offset == 0 and t_q == t_k and _flex_wanted(q, impl):
            return flex_attention(q, k, v, block_mask=blocked_causal_block_mask(t_q, key_blocks, q.device),
                                  enable_gqa=gqa, kernel_options=FLEX_KERNEL_OPTIONS)
        if impl == "flash" and key_blocks == 1 and flash_available(q.device):
            return _flash(q, k, v)
        if key_blocks == 1 and offset == 0 and t_q == t_k:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        if key_blocks == 1 and t_q == 1:  # one new token sees the whole cache: no mask needed
            with sdpa_kernel(GROWING_CACHE_BACKENDS):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    mask = causal_mask(t_q, t_k, offset, key_blocks, q.device, padding)
    if gqa:
        return _grouped_masked(q, k, v, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


# cuDNN's SDPA builds an execution plan for every new shape, about 4.7 ms of CPU time (H200, torch 2.11). Decoding
# over a growing cache meets a new key length at every token, so eager decoding of the 82M model took 51 ms a step
# with cuDNN against 5 ms without it; this one branch leaves it out.
GROWING_CACHE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


# Inductor picks its flex-decoding kernel for fewer than 128 queries. On an H200 (torch 2.11) the compiled no-grad
# forward of cross-layer attention at 20 tokens differed from eager by 1.5-1.6% (fp32), while compiled training steps
# equalled eager; so the main kernel is asked for at every length (long sequences get it anyway).
FLEX_KERNEL_OPTIONS = {"FORCE_USE_FLEX_ATTENTION": True}


def _flex_wanted(q: torch.Tensor, impl: str) -> bool:
    """Cross-layer attention in compiled CUDA code goes through FlexAttention: SDPA with a boolean mask computes
    every score of [t, key_blocks * t] on its slower masked kernel (the 82M model trained 1.6x slower than vanilla
    with it on an H100). Eager code keeps SDPA, where FlexAttention would run unfused (and has no CPU backward)."""
    return flex_attention is not None and impl == "sdpa" and q.is_cuda and torch.compiler.is_compiling()


def _grouped_masked(q, k, v, mask):
    """Masked attention with fewer KV heads than query heads, without repeating K and V. On CUDA that is SDPA's own
    grouped path: the static decoding step of the 82M model with 4 KV heads at 32k took 9.5 ms a step with it against
    17.8 ms with the stacking below (H200, torch 2.11, 2026-11-26), which on the CPU is 1.7x faster than SDPA's:
    the query heads of one KV head stacked along the query axis (query head h uses KV head h // groups)."""
    if q.is_cuda:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    b, h, t, d = q.shape
    groups = h // k.shape[1]
    out = F.scaled_dot_product_attention(q.reshape(b, k.shape[1], groups * t, d), k, v,
                                         attn_mask=mask.repeat(*([1] * (mask.dim() - 2)), groups, 1))
    return out.reshape(b, h, t, d)


def _explicit(q, k, v, mask, on_probs):
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)  # A_n
    if on_probs is not None:
        on_probs(probs)
    return probs @ v


def _flash(q, k, v):
    global _flash_attn_func
    if _flash_attn_func is None:
        from flash_attn import flash_attn_func  # optional extra: imported only on CUDA when installed

        _flash_attn_func = flash_attn_func
    # flash-attn aligns the causal mask bottom-right, which is exactly the KV-cache offset semantics.
    out = _flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    return out.transpose(1, 2)
