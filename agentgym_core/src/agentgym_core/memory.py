"""Handing memory a finished phase freed back to the operating system.

A run's phases allocate very differently: a rollout KV-cache buffers of tens of MB per layer, an
update gradients, optimizer moments and activations. glibc serves blocks under
its (adaptive, up to 32 MB) mmap threshold from its heaps and keeps what is freed there for reuse,
so after a rollout the process can stay hundreds of MB above what it uses, and an update whose
large blocks are mmapped afresh adds its peak on top. :func:`release_memory` collects garbage
cycles (an optimizer and its LR schedule, for one, only go in a full collection) and then asks
glibc to return every free page (``malloc_trim(0)``); the trainer calls it between phases.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import platform

__all__ = ["release_memory"]


@functools.cache
def _malloc_trim() -> ctypes._CFuncPtr | None:
    """glibc's ``malloc_trim``, or None on other C libraries (musl, macOS, Windows)."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_memory() -> bool:
    """Free unreachable reference cycles, then return the C heap's free pages to the OS.

    Returns whether the heap was trimmed (False where the C library is not glibc: garbage is still
    collected). Costs a full garbage collection, tens of milliseconds in a training process.
    """
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
