"""One decode step recorded as a CUDA graph and replayed for every new token.

Decoding a small model eagerly launches hundreds of tiny kernels per token, and at small batch sizes the GPU
spends most of the step waiting for the host to launch them. Over a static cache (`KVCache.make_static`: the
position is a device tensor, writes go through an index, attention spans the whole buffer under a mask) every
step launches the same kernels on the same memory, so the step is recorded once and replayed: the token goes
into a fixed input buffer, the replay writes the cache at the device-side position, advances it and leaves the
logits in a fixed output buffer.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .cache import KVCache


class GraphedDecodeStep:
    """`step(tokens [B, 1]) -> logits [B, vocab]` for the next position of `cache`, by CUDA-graph replay.

    The logits are the graph's output buffer: read them before the next call. `compile=True` records the
    torch.compile'd model instead of the eager one (fused kernels; compiles once per batch and cache size).
    """

    def __init__(self, model: nn.Module, cache: KVCache, batch: int, compile: bool = False, warmup: int = 2):
        device = next(model.parameters()).device
        if device.type != "cuda":
            raise ValueError(f"GraphedDecodeStep needs a CUDA model; this one is on {device}")
        cache.make_static()
        # The graph reads and writes these tensors by address, so the step owns them: a cache the caller drops
        # would hand its memory back to the allocator, and a replay would then index with whatever landed there.
        self.model, self.cache = model, cache
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=device)
        forward = torch.compile(model, dynamic=False) if compile else model
        start = cache.pos.clone()
        # Warm-up (and compilation) off the capture: it writes position `start`, which the real step rewrites.
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(warmup):
                forward(self.token, cache=cache)
                cache.pos.copy_(start)
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.no_grad():
            self.logits = forward(self.token, cache=cache)[:, -1]

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.token.copy_(tokens)
        self.graph.replay()
        return self.logits
