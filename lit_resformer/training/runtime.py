"""Process-level settings that make CPU training faster."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform


def retain_freed_memory() -> bool:
    """Make glibc malloc keep freed memory in the process instead of returning it to the OS.

    By default every large tensor (above the dynamic mmap threshold, at most 32 MiB) is a fresh mmap that the
    kernel page-faults in and zeroes on every step; raising the mmap and trim thresholds lets the next step
    reuse the pages (measured: a `tiny` fwd+bwd step 0.82x the time, see docs/BENCHMARKS.md). Process-wide;
    returns False where it does not apply (not Linux/glibc).
    """
    name = ctypes.util.find_library("c")
    if platform.system() != "Linux" or name is None:
        return False
    libc = ctypes.CDLL(name)
    m_trim_threshold, m_mmap_threshold = -1, -3  # from <malloc.h>
    return all(libc.mallopt(option, 1 << 30) == 1 for option in (m_mmap_threshold, m_trim_threshold))
