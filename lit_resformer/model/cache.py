"""KV cache that holds only what each layer produces, and its analytic size.

SVFormer stores K for every layer and V once (per anchor); CLA-k stores one K/V per group; SkipV1Former's layers
n >= 2 store K and only the half of their value heads they compute (the other half is read from layer 1's buffer);
a layer that reuses another layer's K or V reads the producer's buffer. Buffers are allocated once for `max_seq`
positions, so the bytes held are exactly `kv_cache_bytes(config, batch, max_seq)`.

Two ways to decode through it. By default the position is a host int: a step writes its tokens at `pos` and
attends over the `pos + T` positions written so far, so shapes grow by one every token. After `make_static()`
the position is a device tensor that the model advances in place, a step writes through an index and attends
over the whole buffer under a mask: every step then launches the same kernels on the same memory, which is what
a CUDA graph needs (`model.decoding.GraphedDecodeStep`).

Hugging Face generation drives the same cache through the exported model's adapter: it reorders and selects batch
rows (`reindex`, beam search) and grows a cache whose final length it was not told (`reserve`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .config import ModelConfig


def kv_cache_bytes(config: ModelConfig, batch: int = 1, seq: int = 1, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of K/V a decoder holds for `batch` sequences of `seq` tokens: every stored head is [seq, head_dim]."""
    heads = sum(k + v for k, v in config.cache_heads())
    element = torch.empty((), dtype=dtype).element_size()
    return heads * batch * seq * config.head_dim * element


class KVCache:
    def __init__(self, config: ModelConfig, batch: int, max_seq: int, device=None, dtype=torch.float32):
        if max_seq > config.max_seq_len:
            raise ValueError(f"cache length {max_seq} exceeds max_seq_len={config.max_seq_len}")
        heads = config.cache_heads()
        buffer = lambda h: torch.zeros(batch, h, max_seq, config.head_dim, device=device, dtype=dtype) if h else None  # noqa: E731
        self.keys = [buffer(k) for k, _ in heads]
        self.values = [buffer(v) for _, v in heads]
        self.max_seq, self.max_seq_len = max_seq, config.max_seq_len
        # Positions already written (advanced by the model after a whole forward pass): a host int, or a 0-d
        # long tensor on the buffers' device after make_static().
        self.pos: int | torch.Tensor = 0

    @property
    def static(self) -> bool:
        return isinstance(self.pos, torch.Tensor)

    def make_static(self) -> None:
        """Keep the position on the device from now on (static shapes: see the module docstring)."""
        if not self.static:
            buffer = next(t for t in (*self.keys, *self.values) if t is not None)
            self.pos = torch.tensor(self.pos, dtype=torch.long, device=buffer.device)

    def write(self, buffers: list, layer: int, new: torch.Tensor) -> torch.Tensor:
        """Store `new` [B, Hkv, T, d] at the current position; return everything cached so far (static: the
        whole buffer, positions beyond the written ones included; attention masks them)."""
        if self.static:
            buffers[layer][:, :, self.pos + torch.arange(new.shape[2], device=new.device)] = new
            return buffers[layer]
        end = self.pos + new.shape[2]
        if end > self.max_seq:
            raise ValueError(f"KV cache is full: {end} positions > max_seq={self.max_seq}")
        buffers[layer][:, :, self.pos:end] = new
        return buffers[layer][:, :, :end]

    def reindex(self, rows: torch.Tensor) -> None:
        """Keep the batch rows `rows` [B'] in that order (repeats allowed): beam search reorders its beams so."""
        self.keys = [None if t is None else t.index_select(0, rows) for t in self.keys]
        self.values = [None if t is None else t.index_select(0, rows) for t in self.values]

    def reserve(self, max_seq: int) -> None:
        """Room for `max_seq` positions, what is written kept."""
        if max_seq > self.max_seq_len:
            raise ValueError(f"cache length {max_seq} exceeds max_seq_len={self.max_seq_len}")
        if max_seq <= self.max_seq:
            return
        grow = lambda t: None if t is None else F.pad(t, (0, 0, 0, max_seq - self.max_seq))  # noqa: E731
        self.keys, self.values = [grow(t) for t in self.keys], [grow(t) for t in self.values]
        self.max_seq = max_seq

    def held_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values) if t is not None)
