"""release_memory: what a finished phase freed leaves the process's resident memory."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def _rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_memory_freed_inside_the_heap_goes_back_to_the_os():
    from agentgym_core.memory import release_memory

    release_memory()
    big = torch.ones(30 * 2**20, dtype=torch.uint8)  # freeing an mmapped 30 MB block raises glibc's mmap
    del big  # threshold to 30 MB: the 8 MB blocks below then come from the heap, as a rollout's do
    blocks = [torch.ones(8 * 2**20, dtype=torch.uint8) for _ in range(40)]
    keep = torch.ones(8 * 2**20, dtype=torch.uint8)  # above them: the heap's top cannot shrink on its own
    before = _rss_mb()
    del blocks
    kept = _rss_mb()
    assert kept > before - 100, "glibc returned the blocks by itself: nothing for release_memory to do"
    assert release_memory() is True
    assert _rss_mb() < kept - 250  # of 320 MB freed
    assert int(keep.sum()) == keep.numel()  # the live block is intact
