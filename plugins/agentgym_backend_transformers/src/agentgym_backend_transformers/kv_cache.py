"""A KV-cache layer kept in preallocated buffers, so decode steps, rows joining and rows leaving
write in place instead of copying the whole cache.

transformers' ``DynamicLayer`` grows by ``torch.cat`` on every forward pass: each decode step
copies every layer's whole cache into freshly allocated memory (at 32 rows x 1,000 cached tokens
of SmolLM2-135M, ~1.5 GB per step). A running decode batch also gains and loses rows between steps
(continuous batching), and rebuilding the cache for each of those costs the same again. Fresh
allocations that large come from the kernel page by page, so all of this also makes step times
swing with the allocator's state. ``bench/decode_step.py`` measures the decode-step part.

:class:`GrowingLayer` keeps keys and values in buffers ``(row capacity, kv_heads, column capacity,
head_dim)`` and exposes the used window -- rows ``[0, rows)``, columns ``[start, end)`` -- as the
views ``keys``/``values`` the model reads. Then:

* a forward pass writes its new columns at ``end`` (``update``);
* rows joining are written below the used rows, right-aligned at ``end``; a wider newcomer moves
  ``start`` left (``append_rows``);
* rows leaving are replaced by rows from the end of the batch, one row copy per row that left, and
  leading columns no row needs are dropped by moving ``start`` right (``keep_rows``).

Only when a buffer runs out of rows or columns is it reallocated (one layer at a time, so the
old and new buffers coexist for one layer only), with spare columns on each side (at least
``HEADROOM``): a quarter of the window's width on the left, as trajectories rejoining a decode
batch come back wider by a reply and an observation every turn, and a sixteenth on the right,
where decode steps write. The buffers thus hold about 1.3x the window. Columns and rows outside a row's own content hold zeros or stale keys and values --
finite numbers the attention mask hides -- so the model computes exactly what it computes over a
``DynamicLayer`` holding the same contents (the same tokens and log-probs). Code that replaces
``keys``/``values`` with tensors of its own is noticed on the next ``update``, which adopts them.

Storage dtype. The buffers may hold keys and values in a narrower dtype than the model computes in
(``dtype=torch.bfloat16`` beside float32 weights: half the memory, which on a CPU is most of a
rollout's). New columns are rounded once when written; attention then reads the stored keys and
values as they are, with the query cast to their dtype (:func:`allow_reduced_precision_kv` lets
transformers' SDPA attention take such mixed inputs), so no step converts the whole cache back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

__all__ = ["HEADROOM", "GrowingLayer", "allow_reduced_precision_kv", "fill_holes", "growing_cache"]

HEADROOM = 128  # least spare columns on each side of a new buffer


class GrowingLayer(DynamicLayer):
    """A full-attention cache layer, ``(rows, kv_heads, columns, head_dim)``, grown in place.

    Args:
        max_rows: the most rows it will hold (the decode batch's limit), if known: a buffer gets a
            quarter more rows than it needs, up to that, so rows joining later seldom force a
            reallocation.
        dtype: the buffers' dtype (None: that of the first keys written); see the module docstring.
    """

    def __init__(self, max_rows: int | None = None, dtype: torch.dtype | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_rows = max_rows
        self.storage_dtype = dtype
        self._k: torch.Tensor | None = None  # (row capacity, kv_heads, column capacity, head_dim)
        self._v: torch.Tensor | None = None
        self._rows = self._start = self._end = 0  # the window in use: rows [0, rows), columns [start, end)

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def capacity(self) -> tuple[int, int]:
        """(rows, columns) the current buffers hold; (0, 0) before the first."""
        return (0, 0) if self._k is None else (self._k.shape[0], self._k.shape[-2])

    @property
    def width(self) -> int:
        return self._end - self._start

    # -- DynamicLayer interface ----------------------------------------------------------------
    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append columns ``(rows, kv_heads, new, head_dim)`` to every row; returns all keys and values."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._adopt_outside_contents()
        new = key_states.shape[-2]
        if self._k is None:
            self._reallocate(key_states, rows=key_states.shape[0], right=new)
            self._rows = key_states.shape[0]
        elif key_states.shape[0] != self._rows:
            raise ValueError(f"GrowingLayer.update: {key_states.shape[0]} rows of new keys for {self._rows} rows")
        elif self._end + new > self._k.shape[-2]:
            self._reallocate(key_states, rows=self._rows, right=new)
        assert self._k is not None and self._v is not None
        self._k[:self._rows, :, self._end:self._end + new] = key_states
        self._v[:self._rows, :, self._end:self._end + new] = value_states
        self._end += new
        self._publish()
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop: pass a negative number of tokens to remove")
        if tokens_to_remove and self._owns_contents():
            self._end = max(self._start, self._end + tokens_to_remove)
            self._publish()
        else:
            super().crop(tokens_to_remove)

    def reset(self) -> None:
        self._k = self._v = None
        self._rows = self._start = self._end = 0
        super().reset()

    # -- the decode batch's operations ---------------------------------------------------------
    def reserve(self, like: torch.Tensor, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Make the contents ``rows`` x ``width`` zeros (heads, head_dim and dtype of ``like``) in new
        buffers; returns (keys, values) for the caller to fill."""
        self._k = self._v = None
        self._rows = self._start = self._end = 0
        self._reallocate(like, rows=rows, width=width)
        self._rows = rows
        self._publish()
        return self.keys, self.values

    def append_rows(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Add rows ``(n, kv_heads, w, head_dim)`` below the current ones, right-aligned with them; a
        wider newcomer widens the window to the left (the caller's attention mask hides what the
        old rows did not have there)."""
        new_keys, new_values = self.open_rows(keys, keys.shape[0], keys.shape[-2])
        new_keys.copy_(keys)
        new_values.copy_(values)

    def open_rows(self, like: torch.Tensor, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``rows`` rows below the current ones and widen the window to at least ``width``;
        returns the new rows' last ``width`` columns, (rows, kv_heads, width, head_dim) views, for the
        caller to fill (they hold zeros or stale values: what the caller does not write, its
        attention mask must hide)."""
        self._adopt_outside_contents()
        if self._k is None:
            return self.reserve(like, rows, width)
        total, window = self._rows + rows, max(self.width, width)
        if total > self._k.shape[0] or self._end - window < 0:
            self._reallocate(like, rows=total, width=window)
        assert self._k is not None and self._v is not None
        first = self._rows
        self._start, self._rows = self._end - window, total
        self._publish()
        return (self._k[first:total, :, self._end - width:self._end],
                self._v[first:total, :, self._end - width:self._end])

    def keep_rows(self, order: Sequence[int], drop_columns: int = 0) -> None:
        """Keep rows ``order`` (new row j is old row ``order[j]``; make it with :func:`fill_holes` so
        only rows that moved are copied) and drop the first ``drop_columns`` columns of the window."""
        self._adopt_outside_contents()
        if self._k is None:
            raise RuntimeError("GrowingLayer.keep_rows: the layer holds nothing yet")
        for j, b in enumerate(order):
            if j != b:
                self._k[j, :, self._start:self._end] = self._k[b, :, self._start:self._end]
                self._v[j, :, self._start:self._end] = self._v[b, :, self._start:self._end]
        self._rows = len(order)
        self._start = min(self._end, self._start + drop_columns)
        self._publish()

    # -- internals -----------------------------------------------------------------------------
    def _publish(self) -> None:
        assert self._k is not None and self._v is not None
        self.keys = self._k[:self._rows, :, self._start:self._end]
        self.values = self._v[:self._rows, :, self._start:self._end]

    def _owns_contents(self) -> bool:
        """Whether ``keys``/``values`` are still this layer's window (code outside may have replaced them)."""
        if self._k is None or self._v is None or self.keys is None or self.values is None or self.keys.dim() != 4:
            return False
        mine = self._k[:self._rows, :, self._start:self._end]
        return all(
            t.data_ptr() == m.data_ptr() and t.shape == m.shape and t.stride() == m.stride()
            for t, m in ((self.keys, mine), (self.values, self._v[:self._rows, :, self._start:self._end]))
        )

    def _adopt_outside_contents(self) -> None:
        """Contents set from outside (or none yet): move them into buffers of this layer's own."""
        if self._owns_contents():
            return
        keys, values = self.keys, self.values
        self._k = self._v = None
        self._rows = self._start = self._end = 0
        if keys is not None and values is not None and keys.dim() == 4 and keys.shape[-2] > 0:
            self.reserve(keys, keys.shape[0], keys.shape[-2])
            self.keys.copy_(keys)
            self.values.copy_(values)

    def _reallocate(self, like: torch.Tensor, *, rows: int, width: int | None = None, right: int = 0) -> None:
        """New zero buffers: spare columns, the window (``width`` columns, at least the current one,
        the current rows' contents right-aligned in it), ``right`` columns more and spare ones; room
        for ``rows`` rows and some spare ones. The row count in use is the caller's to change."""
        width = self.width if width is None else max(width, self.width)
        left, right = max(HEADROOM, width // 4), right + max(HEADROOM, width // 16)
        spare_rows = 0 if self.max_rows is None else max(0, min(rows // 4, self.max_rows - rows))
        shape = (rows + spare_rows, like.shape[1], left + width + right, like.shape[-1])
        dtype = self.storage_dtype or like.dtype
        k, v = like.new_zeros(shape, dtype=dtype), like.new_zeros(shape, dtype=dtype)
        end = left + width
        if self._k is not None and self._v is not None and self.width:
            k[:self._rows, :, end - self.width:end] = self._k[:self._rows, :, self._start:self._end]
            v[:self._rows, :, end - self.width:end] = self._v[:self._rows, :, self._start:self._end]
        self._k, self._v, self._start, self._end = k, v, end - width, end
        self.dtype, self.device, self.is_initialized = dtype, like.device, True
        self._publish()


def fill_holes(keep: Sequence[int]) -> list[int]:
    """An order for :meth:`GrowingLayer.keep_rows` keeping rows ``keep`` (ascending) that moves as few
    rows as possible: a kept row already among the first ``len(keep)`` stays; rows further down
    fill the gaps. Returns old row indices, new row j first."""
    n = len(keep)
    kept = set(keep)
    movers = iter([b for b in keep if b >= n])
    return [j if j in kept else next(movers) for j in range(n)]


def growing_cache(config: Any, max_rows: int | None = None, dtype: torch.dtype | None = None) -> Any:
    """A ``DynamicCache`` for ``config`` whose layers are :class:`GrowingLayer`s (buffers in ``dtype``).

    Only for models whose cache layers are all plain full-attention ``DynamicLayer``s (a sliding
    window layer drops old columns, which a growing buffer would not)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    if not all(type(layer) is DynamicLayer for layer in cache.layers):
        raise ValueError("growing_cache: the model has non full-attention cache layers (sliding windows?)")
    cache.layers = [GrowingLayer(max_rows=max_rows, dtype=dtype) for _ in cache.layers]
    return cache


def _query_in_kv_dtype(sdpa: Any) -> Any:
    """``sdpa`` (transformers' attention function) taking keys/values in another dtype than the query:
    the query (and a float mask) are cast to the keys' dtype, the output back to the query's. Inputs
    of one dtype go through unchanged."""
    def attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, *args: Any, **kwargs: Any) -> Any:
        if query.dtype == key.dtype:
            return sdpa(module, query, key, value, attention_mask, *args, **kwargs)
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.to(key.dtype)
        output, weights = sdpa(module, query.to(key.dtype), key, value, attention_mask, *args, **kwargs)
        return output.to(query.dtype), weights

    attention.agentgym_reduced_precision_kv = True  # type: ignore[attr-defined]
    return attention


def allow_reduced_precision_kv() -> None:
    """Let transformers' ``sdpa`` attention read keys and values stored in a narrower dtype than the
    query (see the module docstring). Process-wide and idempotent; attention over inputs of one dtype,
    the only kind ``sdpa`` accepted before, computes exactly what it did."""
    from transformers import AttentionInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    current = ALL_ATTENTION_FUNCTIONS["sdpa"]
    if not getattr(current, "agentgym_reduced_precision_kv", False):
        AttentionInterface.register("sdpa", _query_in_kv_dtype(current))
