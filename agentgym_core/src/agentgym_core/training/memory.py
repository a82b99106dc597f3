"""Handing memory a finished phase freed back to the operating system.

A run's phases allocate very differently: a rollout KV-cache buffers of tens of MB per layer, an
update gradients, optimizer moments and activations. glibc serves blocks under
its (adaptive, up to 32 MB) mmap threshold from its heaps and keeps what is freed there for reuse,
so after a rollout the process can stay hundreds of MB above what it uses, and an update whose
large blocks are mmapped afresh adds its peak on top. :func:`release_memory` collects garbage
cycles (an optimizer and its LR schedule, for one, only go in a full collection) and then asks
glibc to return every free page (``malloc_trim(0)``); the trainer calls it between phases.
:class:`HeapTrimmer` also trims while a phase runs, once a second from a background thread
(``runtime.heap_trim_interval_s``), so memory freed within a long phase does not stay resident.

:class:`PhasePeak` measures a phase's own peak resident memory: Linux keeps the process's high-water
mark (``VmHWM``) and resets it to the current RSS on a write of ``5`` to ``/proc/self/clear_refs``, so
each phase's peak is read without a sampling thread.

On a CUDA device the same phases also measure the GPU: the most memory PyTorch's caching allocator
held (reserved) during the phase, the GPU's counterpart of RSS, from ``torch.cuda.max_memory_reserved``
after ``reset_peak_memory_stats``; :func:`release_memory` also hands its cached free blocks back.
:func:`prefer_expandable_cuda_segments` makes that allocator grow segments in place instead of caching
blocks of many sizes: a rollout's KV caches change size every turn, and with fixed-size blocks the
reserved memory was 2.5-3x what the tensors took (README, "GPU and several processes").
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import os
import platform
import resource
import sys
import threading
from pathlib import Path

__all__ = [
    "CUDA_ALLOCATOR_VARIABLES",
    "HeapTrimmer",
    "IDEEP_CACHE_VARIABLE",
    "ONEDNN_CACHE_VARIABLE",
    "PhasePeak",
    "limit_onednn_primitive_cache",
    "peak_rss_bytes",
    "prefer_expandable_cuda_segments",
    "release_memory",
    "reset_peak_rss",
    "trim_heap",
]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


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


def _cuda_in_use():
    """``torch.cuda`` when this process has initialised CUDA, else None (never imports torch or starts CUDA)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return torch.cuda


CUDA_ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
"""Environment variables that configure PyTorch's CUDA caching allocator (the second is the newer name)."""


def prefer_expandable_cuda_segments(backend_allows: bool) -> bool:
    """Turn on ``expandable_segments`` in PyTorch's CUDA caching allocator for this process and the
    processes it starts, unless the user configured the allocator; returns whether it did.

    A rollout's growing KV caches otherwise leave the allocator holding about twice what its tensors
    use at their peak (measured by ``bench/gpu_rl_step.py``, in bench/README.md). Left alone where a variable of
    :data:`CUDA_ALLOCATOR_VARIABLES` is set (even empty: ``PYTORCH_CUDA_ALLOC_CONF=`` keeps PyTorch's
    default), where the rollout backend declares it cannot work with them (``backend_allows`` False: vLLM's
    sleep mode keeps a memory pool that refuses them), and once this process has initialised CUDA (too late to
    change its allocator).
    """
    if not backend_allows or any(name in os.environ for name in CUDA_ALLOCATOR_VARIABLES):
        return False
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return False
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"  # read when CUDA starts; children inherit it
    if torch is not None and torch.cuda.is_available():
        # In case this torch read the variable when it was imported. The accelerator-wide setter first:
        # recent torch releases still have the CUDA one but warn that it is deprecated.
        set_settings = (getattr(torch._C, "_accelerator_setAllocatorSettings", None)
                        or getattr(torch.cuda.memory, "_set_allocator_settings", None))
        if set_settings is not None:
            set_settings("expandable_segments:True")
    return True


ONEDNN_CACHE_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
"""oneDNN's setting for how many compiled kernels (primitives) it keeps, 1,024 by default."""

IDEEP_CACHE_VARIABLE = "LRU_CACHE_CAPACITY"
"""PyTorch's own cache of oneDNN primitives (in ideep, its oneDNN layer), 1,024 by default."""


def limit_onednn_primitive_cache(capacity: int) -> bool:
    """Keep at most ``capacity`` oneDNN primitives in this process (and those it starts), in oneDNN's cache
    and in PyTorch's own (:data:`ONEDNN_CACHE_VARIABLE`, :data:`IDEEP_CACHE_VARIABLE`), each unless the
    user set it; returns whether it set either.

    PyTorch runs CPU matmuls in bf16 through oneDNN, which compiles a kernel for every shape it meets.
    Two caches keep the last 1,024 of them with their buffers: oneDNN's, and PyTorch's in front of it
    (its primitives and their scratch memory, about 9 MB per forward shape of SmolLM2-135M). Training
    forwards change shape with every micro-batch's length, so nearly every entry is used once and the
    caches only grow: 0.07 GB of resident memory per SFT step of the main job with only oneDNN's
    capped, none with both (``bench/memory_creep.py``). A small oneDNN cache keeps the speed (one
    forward's layers share a handful of shapes; ``bench/sft_memory.py`` measures it, in bench/README.md);
    PyTorch's cap has no same-run timing yet (the main job took 23:31 with it). Both are read when first used,
    so call this before the process's first bf16 matmul on the CPU.
    """
    if capacity < 1:
        raise ValueError(f"a oneDNN primitive cache of {capacity} entries: use at least 1 (0 would recompile "
                         "every kernel at every use)")
    changed = False
    for variable in (ONEDNN_CACHE_VARIABLE, IDEEP_CACHE_VARIABLE):
        if variable not in os.environ:
            os.environ[variable] = str(capacity)
            changed = True
    return changed


def release_memory() -> bool:
    """Free unreachable reference cycles, then return the C heap's free pages to the OS (and, where CUDA
    is in use, the caching allocator's free blocks to the GPU).

    Returns whether the heap was trimmed (False where the C library is not glibc: garbage is still
    collected). Costs a full garbage collection, tens of milliseconds in a training process.
    """
    gc.collect()
    cuda = _cuda_in_use()
    if cuda is not None:
        cuda.empty_cache()
    return trim_heap()


def trim_heap() -> bool:
    """Return the C heap's free pages to the OS (glibc's ``malloc_trim(0)``, no garbage collection):
    a few milliseconds. False where the C library is not glibc."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class HeapTrimmer:
    """Trims the C heap (:func:`trim_heap`) every ``interval_s`` seconds from a background thread while
    active: ``with HeapTrimmer(1.0): ...``.

    Within a phase, memory freed in the heap's middle (a micro-batch's activations, a KV-cache buffer
    outgrown) stays resident until something reuses it, and different sizes seldom fit, so a long
    phase's RSS climbs above what it holds. Trimming once a second returns those pages while the
    phase runs; memory reused after a trim is faulted in again (zeroed pages), which is the cost.
    ``interval_s`` None or 0, or a C library other than glibc: does nothing. Contexts may nest (the
    fine-tuning loop inside an RL recipe's warm start): one thread serves them all, at the interval of
    the first.
    """

    _lock = threading.Lock()
    _users = 0
    _stop: threading.Event | None = None
    _thread: threading.Thread | None = None

    def __init__(self, interval_s: float | None) -> None:
        self.interval_s = interval_s
        self._entered = 0  # this object's entries still open (it may be entered again while open)

    def __enter__(self) -> HeapTrimmer:
        if not self.interval_s or _malloc_trim() is None:
            return self
        cls = type(self)
        with cls._lock:
            cls._users += 1
            self._entered += 1
            if cls._thread is None:
                stop = threading.Event()
                interval = float(self.interval_s)

                def run() -> None:
                    while not stop.wait(interval):
                        with contextlib.suppress(Exception):  # an optimisation: never let it end the thread
                            trim_heap()

                cls._stop, cls._thread = stop, threading.Thread(target=run, name="agentgym-heap-trim", daemon=True)
                cls._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._entered:
            return
        cls = type(self)
        with cls._lock:
            self._entered -= 1
            cls._users -= 1
            if cls._users == 0 and cls._thread is not None and cls._stop is not None:
                cls._stop.set()
                cls._thread.join()
                cls._stop = cls._thread = None

    @classmethod
    def running(cls) -> bool:
        """Whether a trimming thread is running now."""
        return cls._thread is not None


def reset_peak_rss() -> bool:
    """Start a new high-water mark at the current RSS; False where the OS cannot (then peaks are since start)."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_rss_bytes() -> int:
    """The process's peak resident memory since start or since the last :func:`reset_peak_rss`, in bytes."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # "VmHWM:   123456 kB"
    except OSError:
        pass
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # since start only
    return int(maxrss) if sys.platform == "darwin" else int(maxrss) * 1024  # macOS: bytes; Linux: kB


class PhasePeak:
    """Peak RSS of a block of code: ``with PhasePeak() as peak: ...`` (or ``start()`` .. ``stop()``), then ``peak.gb``.

    Resets the high-water mark on entry, so phases measure apart; where the OS cannot reset it
    (not Linux), ``gb`` is the peak since the process started, an upper bound. Where the process uses
    CUDA, ``gpu_gb`` is the phase's peak of GPU memory reserved by PyTorch on the current device
    and ``gpu_allocated_gb`` the peak its tensors took (None without CUDA); a wide gap between the
    two is the caching allocator's fragmentation.
    """

    def __init__(self) -> None:
        self.bytes = 0
        self.gpu_bytes: int | None = None
        self.gpu_allocated_bytes: int | None = None

    def start(self) -> PhasePeak:
        reset_peak_rss()
        cuda = _cuda_in_use()
        if cuda is not None:
            cuda.reset_peak_memory_stats()
        return self

    def stop(self) -> None:
        self.bytes = peak_rss_bytes()
        cuda = _cuda_in_use()
        self.gpu_bytes = None if cuda is None else int(cuda.max_memory_reserved())
        self.gpu_allocated_bytes = None if cuda is None else int(cuda.max_memory_allocated())

    def __enter__(self) -> PhasePeak:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def gb(self) -> float:
        return self.bytes / 1e9

    @property
    def gpu_gb(self) -> float | None:
        return None if self.gpu_bytes is None else self.gpu_bytes / 1e9

    @property
    def gpu_allocated_gb(self) -> float | None:
        return None if self.gpu_allocated_bytes is None else self.gpu_allocated_bytes / 1e9

    def as_metrics(self, suffix: str = "") -> dict[str, float]:
        """``{"peak_rss{suffix}_gb": ...}``, with ``"peak_gpu{suffix}_gb"`` (reserved) and
        ``"peak_gpu_allocated{suffix}_gb"`` where CUDA is in use."""
        found = {f"peak_rss{suffix}_gb": self.gb}
        if self.gpu_bytes is not None:  # set together with gpu_allocated_bytes
            found[f"peak_gpu{suffix}_gb"] = self.gpu_bytes / 1e9
            found[f"peak_gpu_allocated{suffix}_gb"] = (self.gpu_allocated_bytes or 0) / 1e9
        return found
