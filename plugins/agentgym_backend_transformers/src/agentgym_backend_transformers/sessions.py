"""Per-trajectory KV caches kept between turns, bounded by a memory budget.

A multi-turn trajectory's prompt at turn k is its prompt at turn k-1, plus the reply sampled
then, plus the new observation. Prefilling the whole history again every turn makes the cost of a
turn grow with the length of the episode; keeping the keys and values of what the model already
read makes it depend only on the new tokens.

The store maps a session key (any hashable the caller picks, one per trajectory) to the keys and
values of the tokens the model has read for it. It never trusts the key alone: a cache is used
only for the part of the new prompt that starts with exactly the cached tokens, so a caller that
reuses a key for another conversation just pays a full prefill. Least recently used entries are
evicted once the budget is exceeded; an evicted session is simply prefilled from scratch later.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["SessionKV", "SessionStats", "SessionStore"]


@dataclass
class SessionKV:
    """The keys and values of the tokens one trajectory's model has read so far.

    ``layers[l] = (keys, values)``, each ``(heads, len(token_ids), head_dim)``, rotary position
    already applied (so they can sit at any column of a later batch).
    """

    token_ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)

    def usable_length(self, prompt: Sequence[int]) -> int:
        """How many leading tokens of ``prompt`` this cache covers (at most ``len(prompt) - 1``:
        the last prompt token must be fed again, its logits give the first sampled token)."""
        n = min(len(self.token_ids), len(prompt) - 1)
        if n <= 0:
            return 0
        if list(prompt[:n]) == self.token_ids[:n]:
            return n
        same = 0  # the prompt diverges (a reused key, an edited history): keep the common prefix
        for a, b in zip(prompt[:n], self.token_ids, strict=False):
            if a != b:
                break
            same += 1
        return same


@dataclass
class SessionStats:
    """Counters for benchmarks and logs."""

    hits: int = 0
    misses: int = 0
    reused_tokens: int = 0  # prompt tokens read from a kept cache (sessions and shared prefixes)
    prefilled_tokens: int = 0  # prompt tokens run through the model
    shared_prefix_tokens: int = 0  # of reused_tokens: from a prompt prefix shared between trajectories
    evictions: int = 0
    released: int = 0


class SessionStore:
    """LRU store of :class:`SessionKV` under a byte budget (``budget_bytes=0`` keeps nothing)."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.stats = SessionStats()
        self._entries: OrderedDict[Hashable, SessionKV] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def take(self, key: Hashable) -> SessionKV | None:
        """Remove and return the cache of ``key`` (the caller puts back the extended one)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.nbytes
        return entry

    def put(self, key: Hashable, entry: SessionKV) -> None:
        """Store ``entry`` as the most recent, then evict the oldest entries over the budget."""
        self.release(key)
        size = entry.nbytes
        if size > self.budget_bytes:
            return
        self._entries[key] = entry
        self._bytes += size
        while self._bytes > self.budget_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.nbytes
            self.stats.evictions += 1

    def release(self, key: Hashable) -> None:
        """Forget ``key`` (no-op when absent)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.nbytes
            self.stats.released += 1

    def clear(self) -> None:
        """Forget everything (e.g. after the weights changed: old keys/values no longer hold)."""
        self._entries.clear()
        self._bytes = 0
