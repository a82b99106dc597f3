"""The running decode batch: rows join between decode steps and leave as soon as they finish.

:class:`DecodeBatch` holds one batched KV cache. ``add`` queues a prompt; ``step`` first reads
(prefills) every queued prompt and merges those rows into the batch, then
samples one token for every row, lets finished rows go (end-of-turn token, stop string, token cap),
and feeds the remaining rows' tokens through the model. So a trajectory whose environment answers
while others are still decoding joins at the next step instead of waiting for the whole batch
(continuous batching at the step level), and the batch stays full.

Rows joining at the same step are read in padded forward passes (``prefill='batched'``) of at most
``prefill_chunk_tokens`` padded columns each, or one forward pass each (``'per_row'``, the CPU
default: there a forward pass costs what its tokens cost, padding included), then laid side by side.
The bound matters after the session cache has dropped rows (or at the first turn of long prompts):
every such row is then read in full, and one pass over all of them holds the activations of every
row at once, and lays out the cached prefixes as a second copy beside the sessions' own.

Row layout inside the batch: ``[pad | cached prefix | pad | new suffix | decoded tokens]``, every
pad column masked out; positions are explicit per row, and cached keys carry their rotary
positions, so each row computes what a forward pass over its own history computes. Merging two
batches left-pads the narrower one; columns that no row needs any more are trimmed when rows leave.
The cache layers are :class:`~agentgym_backend_transformers.kv_cache.GrowingLayer`s (full-attention
models), all in place: a decode step writes its column into spare ones, joining rows are written
below the others, a leaving row is replaced by one from the end (so rows change places), and the
buffers outlive an empty batch for the next turn's rows.

Seeded sampling draws each row from its own random stream, seeded by (the batch seed, the row's
key, how many times that key was added: :func:`agentgym_core.rollout.backend.row_seed`), so a
trajectory's samples do not depend on which other rows happened to share its decode steps: the
same seed replays the same trajectories whatever the environments' timing (keys that are ints or
tuples of ints hash the same in every process). The stream is counter-based (:func:`draw_tokens`:
a hash of the row's seed and the token's position, inverted through the row's CDF), so a decode
step draws every row at once, on the device, instead of one ``torch.multinomial`` per row; the
draws are not torch's Philox stream, so a seed samples other tokens than before this change did.

Sessions: a row added with a session key starts from the KV cache kept for that key (only the part
of the prompt after the cached tokens is prefilled) and, when it finishes, keeps its own keys and
values under that key for the next turn (:mod:`agentgym_backend_transformers.sessions`).

Constrained actions (``SamplingParams.constrain_actions``): a row added with ``actions=`` samples its
action from that list alone once its text ends with ``Action:``
(:class:`agentgym_core.rollout.action_choices.ActionConstraint`; with ``guarantee_action`` it may not end
before then, and near the end of its budget the marker is written for it); the other tokens of its row are masked before the draw
(greedy or sampled), and its recorded log-probs stay the unmasked ones.

Shared prompt prefixes: rows that start a conversation (no session cache yet) usually share a
long prefix -- the environment's instruction, or the whole first prompt within a GRPO group.
Their common prefix is read once, kept for the life of the batch (one engine run: the weights
cannot change under it) and laid into each such row like a session cache; a row that arrives
later starts from the longest kept prefix it shares. ``backend.share_prefixes = False`` turns it
off (every prompt is read in full, as a loop that re-renders each prompt does).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from agentgym_backend_transformers.kv_cache import fill_holes, growing_cache
from agentgym_backend_transformers.sessions import SessionKV
from agentgym_core.rollout.action_choices import ActionConstraint
from agentgym_core.rollout.backend import RowSeeds, Sample, SamplingParams

if TYPE_CHECKING:
    from agentgym_backend_transformers.backend import TransformersBackend

__all__ = ["DecodeBatch", "draw_tokens", "filter_logits", "prefill_groups", "seeded_uniform"]

MIN_SHARED_PREFIX = 16  # tokens: a shorter common prefix is not worth its own forward pass
MAX_KEPT_PREFIXES = 8  # prompt prefixes a batch keeps (least recently used go first)


def cache_argument(model: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``model(...)``: transformers renamed ``past_key_values`` to ``cache`` (the old
    name still works but warns as deprecated on every call, into the progress line); older versions
    know only ``past_key_values``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT wrapper passes it on
    return {_cache_keyword(type(base)): cache}


@functools.cache
def _cache_keyword(model_class: type) -> str:
    try:
        parameters = inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask logits outside top-k / the top-p nucleus with -inf. logits: (B, V)."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the mass before it already reaches top_p; the top token always stays.
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash, elementwise on int64 values in [0, 2**32): every product stays below
    2**63 (31-bit odd multipliers), so it computes the same bits on every device."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x6C8E9CF5) & _MASK32
    return x ^ (x >> 16)


def seeded_uniform(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """One uniform number in [0, 1) per row, a pure function of (seed, counter): (B,) int64 -> (B,) float32.

    A counter-based stream: row b's draw depends on nothing but its own seed and counter, so a
    whole batch draws in one call on its device and every row gets what it would alone.
    """
    lo, hi = seeds & _MASK32, (seeds >> 32) & 0x7FFFFFFF
    h = _mix32(_mix32(_mix32(counters & _MASK32) ^ lo) ^ hi)
    h = _mix32(h ^ 0x5BD1E995)
    return (h >> 8).to(torch.float32) / float(1 << 24)  # 24 bits: float32's resolution


_REDRAW_STREAM = 0x2545F4914F6CDD1D
"""XOR'd into a row's seed for its second stream (a redraw without banned tokens, ``DecodeBatch._redraw_banned``)."""


def draw_tokens(probs: torch.Tensor, seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """Sample one token per row of ``probs`` (B, V) by inverting its CDF at :func:`seeded_uniform`.

    One batched draw per decode step (no per-row generator, no per-row kernel launch). Tokens of
    probability 0 are never drawn: the first index whose cumulative mass exceeds the target is taken.
    """
    cdf = probs.float().cumsum(-1)  # (B, V)
    target = seeded_uniform(seeds, counters) * cdf[:, -1]  # (B,)
    return torch.searchsorted(cdf, target[:, None], right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)


@dataclass
class _Row:
    """One reply being sampled."""

    key: Hashable  # the caller's handle for the result
    prompt: list[int]
    cap: int
    session: Hashable | None
    seed: int | None = None  # this row's stream (None: torch's global one); see draw_tokens
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reason: str = "length"
    constraint: ActionConstraint | None = None  # the reply's action from these choices (constrain_actions)


class DecodeBatch:
    """A batch of replies being sampled with one KV cache (see the module docstring).

    Args:
        backend: the transformers backend (model, tokenizer side, session store).
        params: sampling settings shared by every row.
        max_rows: most rows decoding at once; further prompts wait in the queue.
    """

    def __init__(self, backend: TransformersBackend, params: SamplingParams, *, max_rows: int) -> None:
        self.backend = backend
        self.params = params
        self.max_rows = max_rows
        self._row_seeds = RowSeeds(params.seed)  # each row's stream: (seed, key, how many prompts the key added)
        self.queue: list[_Row] = []
        self.rows: list[_Row] = []  # batch row b -> its reply
        self._cache: Any = None  # a DynamicCache over self.rows (GrowingLayers when _plain)
        self._attention: torch.Tensor | None = None  # (B, C) 1 on real columns
        self._next_position: torch.Tensor | None = None  # (B,)
        self._seeds: torch.Tensor | None = None  # (B,) each row's seed, on the device (0 when unseeded)
        self._logits: torch.Tensor | None = None  # (B, V) logits of each row's next token
        self._plain: bool | None = None  # full-attention cache layers only: rows may merge and be trimmed
        self._prefixes: list[SessionKV] = []  # prompt prefixes read for this batch, most recently used last

    @property
    def active(self) -> int:
        """Rows decoding or queued."""
        return len(self.rows) + len(self.queue)

    def add(self, key: Hashable, prompt: Sequence[int], *, max_new_tokens: int, session: Hashable | None = None,
            actions: Sequence[str] | None = None) -> None:
        """Queue ``prompt``; its reply comes out of a later ``step`` under ``key``. With
        ``params.constrain_actions``, ``actions`` are the reply's choices (None or empty: unconstrained)."""
        if not prompt:
            raise ValueError("add: empty prompt; a reply needs at least one prompt token")
        if actions and not self.params.constrain_actions:
            raise ValueError("add: actions= given to a batch whose sampling does not constrain actions; open it with "
                             "SamplingParams(constrain_actions=True)")
        cap = max(1, min(self.params.max_new_tokens, int(max_new_tokens)))
        constraint = None
        if actions:
            backend = self.backend
            constraint = ActionConstraint(actions, backend.encode, backend.decode, backend.eos_token_ids,
                                          context=prompt[-8:], max_tokens=cap,
                                          guarantee=self.params.guarantee_action)
        if session is not None and any(r.session == session for r in (*self.rows, *self.queue)):
            raise ValueError(f"add: session {session!r} is already in this batch; use one key per trajectory")
        seed = self._row_seeds.next(key)
        self.queue.append(_Row(key=key, prompt=list(prompt), cap=cap, session=session,
                               seed=seed if self.params.temperature > 0 else None, constraint=constraint))

    @torch.inference_mode()
    def step(self) -> list[tuple[Hashable, Sample]]:
        """Admit queued prompts, sample one token per row; returns the replies that finished."""
        with self.backend.sampling_kernels():
            return self._step()

    def _step(self) -> list[tuple[Hashable, Sample]]:
        # Models with other cache layers (sliding windows) cannot merge batches: admit into an empty one.
        if self.queue and len(self.rows) < self.max_rows and (self._plain is not False or not self.rows):
            joining, self.queue = self.queue[: self.max_rows - len(self.rows)], self.queue[self.max_rows - len(self.rows):]
            self._admit(joining)
        if not self.rows:
            return []
        assert self._logits is not None and self._attention is not None and self._next_position is not None
        params, backend = self.params, self.backend
        scaled = self._logits.float() / params.logprob_temperature
        log_p = torch.log_softmax(scaled, dim=-1)  # (B, V): recorded unmasked, as the learner recomputes them
        drawn = self._mask_choices(scaled) if params.constrain_actions else scaled
        chosen = self._draw(drawn, self._seeds, self._next_position)  # (B,)
        chosen_lp = log_p.gather(-1, chosen[:, None]).squeeze(-1)
        keep: list[int] = []
        done: list[tuple[Hashable, Sample]] = []
        # One copy to the host per decode step: ids and log-probs together (ids are exact in float64).
        tokens, lps = torch.stack([chosen.double(), chosen_lp.double()]).tolist()
        if params.constrain_actions:  # read from the host copy: no second copy unless a row must draw again
            chosen, tokens, lps = self._redraw_banned(chosen, drawn, log_p, tokens, lps)
        for b, (token, lp) in enumerate(zip(tokens, lps, strict=True)):
            token = int(token)
            row = self.rows[b]
            row.tokens.append(token)
            row.logprobs.append(lp)
            if row.constraint is not None:
                row.constraint.feed(token)
            if token in backend.eos_token_ids:
                row.reason = "eos"
            elif params.stop and any(s in backend.decode(row.tokens[-64:]) for s in params.stop):
                row.reason = "stop_string"
            elif len(row.tokens) < row.cap:
                keep.append(b)
                continue
            if row.session is not None:  # keep what its model read: prompt + reply minus its unread last token
                self._save_session(b, row.session, [*row.prompt, *row.tokens[:-1]])
            done.append((row.key, Sample(token_ids=row.tokens, logprobs=row.logprobs, finish_reason=row.reason)))  # type: ignore[arg-type]
        if len(keep) < len(self.rows):
            order = self._select(keep)
            chosen = chosen[torch.tensor(order, dtype=torch.long, device=chosen.device)] if order else chosen[:0]
        if self.rows:  # feed the sampled tokens of the rows that go on
            self._attention = torch.cat([self._attention, self._attention.new_ones((len(self.rows), 1))], dim=-1)
            self._logits = backend.model(
                input_ids=chosen[:, None], attention_mask=self._attention, position_ids=self._next_position[:, None],
                **cache_argument(backend.model, self._cache), use_cache=True,
            ).logits[:, -1, :]
            self._next_position = self._next_position + 1
        return done

    def close(self) -> None:
        """Drop the batch (rows still decoding are abandoned, their sessions not kept)."""
        self.queue, self.rows = [], []
        self._cache = self._attention = self._next_position = self._logits = self._seeds = None

    # -- internals -------------------------------------------------------------------------------
    def _draw(self, logits: torch.Tensor, seeds: torch.Tensor | None, positions: torch.Tensor | None) -> torch.Tensor:
        """One token per row of ``logits`` (B, V): greedy, or sampled (each row from its own ``seeds`` stream at
        its ``positions``, or from torch's global generator when the rows are unseeded)."""
        params = self.params
        if params.temperature == 0:
            return logits.argmax(-1)
        probs = filter_logits(logits, params.top_k, params.top_p).softmax(-1)  # (B, V)
        if self.rows[0].seed is None:
            return torch.multinomial(probs, 1).squeeze(-1)  # (B,)
        assert seeds is not None and positions is not None  # one batched draw over the rows' streams
        return draw_tokens(probs, seeds, positions)

    def _mask_choices(self, scaled: torch.Tensor) -> torch.Tensor:
        """``scaled`` (B, V) with every token outside a constrained row's ``allowed()`` ids set to -inf."""
        limits = [(b, row.constraint.allowed()) for b, row in enumerate(self.rows) if row.constraint is not None]
        limits = [(b, ids) for b, ids in limits if ids is not None]
        if not limits:
            return scaled
        keep = torch.zeros(scaled.shape, dtype=torch.bool, device=scaled.device)  # (B, V)
        free = torch.ones(scaled.shape[0], dtype=torch.bool, device=scaled.device)  # (B,) rows not constrained
        for b, ids in limits:
            keep[b, torch.tensor(ids, dtype=torch.long, device=scaled.device)] = True
            free[b] = False
        return scaled.masked_fill(~(keep | free[:, None]), float("-inf"))

    def _redraw_banned(self, chosen: torch.Tensor, drawn: torch.Tensor, log_p: torch.Tensor, tokens: list[float],
                       lps: list[float]) -> tuple[torch.Tensor, list[float], list[float]]:
        """``chosen`` (B,) and its host copies ``tokens`` and ``lps``, with each row that drew one of its ``banned()``
        tokens (the end of a reply that has not named its action) drawn again without them, from a second
        stream of its seed.

        A rejection step: the redrawn token is distributed as the masked softmax, and a row that drew anything
        else keeps exactly the token it would draw unconstrained (masking before the draw would shift every
        later token of the inverse-CDF draw)."""
        redo = [(b, banned) for b, row in enumerate(self.rows)
                if row.constraint is not None and (banned := row.constraint.banned()) and int(tokens[b]) in banned]
        if not redo:
            return chosen, tokens, lps
        rows = torch.tensor([b for b, _ in redo], dtype=torch.long, device=drawn.device)
        logits = drawn[rows].clone()  # (R, V)
        for i, (_, banned) in enumerate(redo):
            logits[i, torch.tensor(banned, dtype=torch.long, device=drawn.device)] = float("-inf")
        seeds = None if self._seeds is None else self._seeds[rows] ^ _REDRAW_STREAM
        assert self._next_position is not None
        again = self._draw(logits, seeds, self._next_position[rows])  # (R,)
        chosen = chosen.clone()
        chosen[rows] = again
        again_ids, again_lps = torch.stack([again.double(), log_p[rows, again].double()]).tolist()
        tokens, lps = list(tokens), list(lps)
        for (b, _), token, lp in zip(redo, again_ids, again_lps, strict=True):
            tokens[b], lps[b] = token, lp
        return chosen, tokens, lps

    def _admit(self, joining: list[_Row]) -> None:
        """Prefill the joining rows (after their cached prefixes) and merge them into the running batch."""
        from transformers import DynamicCache

        backend = self.backend
        if self._plain is None:  # a property of the model's cache layers: decided once per batch
            self._plain = backend.reuses_sessions(DynamicCache(config=backend.model.config))
        store = backend.sessions if self._plain else None
        cached: list[SessionKV | None] = [
            None if store is None or row.session is None else store.take(row.session) for row in joining
        ]
        if store is not None:
            store.stats.hits += sum(kv is not None for kv in cached)
            store.stats.misses += sum(kv is None and r.session is not None for kv, r in zip(cached, joining, strict=True))
        reuse = [0 if kv is None else kv.usable_length(row.prompt) for kv, row in zip(cached, joining, strict=True)]
        keep_prompts: list[int] = []
        if self._plain and getattr(backend, "share_prefixes", False):
            keep_prompts = self._share_prefixes(joining, cached, reuse)
        stats = backend.sessions.stats
        stats.reused_tokens += sum(reuse)
        stats.prefilled_tokens += sum(len(row.prompt) for row in joining) - sum(reuse)
        placed = self._plain and len(joining) > 1 and self._prefill_per_row()
        # Padded passes read at most prefill_chunk_tokens columns each (per row: one pass already); caches
        # of other layer kinds (sliding windows) are read in one pass, as their batches are not merged.
        chunk = getattr(backend, "prefill_chunk_tokens", None) if self._plain else None
        groups = [list(range(len(joining)))] if placed else prefill_groups(
            [len(row.prompt) for row in joining], reuse, chunk)
        for group in groups:
            rows = [joining[b] for b in group]
            args = (rows, [cached[b] for b in group], [reuse[b] for b in group])
            # placed: straight into the batch's own buffers
            cache, attention, logits = self._prefill_rows(*args) if placed else self._prefill_batched(*args)
            for j, b in enumerate(group):
                if b in keep_prompts:  # rows no kept prefix covered: later arrivals may share their prompt
                    self._keep_prefix(SessionKV(token_ids=list(rows[j].prompt), layers=_row_kv(cache, attention, j)))
            after = torch.tensor([len(row.prompt) for row in rows], dtype=torch.long, device=attention.device)
            self._merge(rows, cache, attention, after, logits, placed=placed)
            del cache, attention, logits, args
            for b in group:  # a session's cache is in the batch now: let its own copy go
                cached[b] = None

    def _prefill_per_row(self) -> bool:
        mode = getattr(self.backend, "prefill", "auto")
        return mode == "per_row" or (mode == "auto" and self.backend.device.type == "cpu")

    def _prefill_batched(
        self, joining: list[_Row], cached: list[SessionKV | None], reuse: list[int]
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """One forward pass over ``[pad | cached prefix | pad | suffix]`` rows; returns (cache, attention, logits)."""
        from transformers import DynamicCache

        backend = self.backend
        device = backend.device
        cache = growing_cache(backend.model.config, dtype=backend.kv_dtype) if self._plain \
            else DynamicCache(config=backend.model.config)
        batch, width_c = len(joining), max(reuse)
        width_s = max(len(row.prompt) - c for row, c in zip(joining, reuse, strict=True))
        attention = torch.zeros((batch, width_c + width_s), dtype=torch.long, device=device)
        input_ids = torch.full((batch, width_s), backend.pad_token_id, dtype=torch.long, device=device)
        positions = torch.zeros((batch, width_s), dtype=torch.long, device=device)
        for b, (row, c) in enumerate(zip(joining, reuse, strict=True)):
            s = len(row.prompt) - c
            attention[b, width_c - c:width_c] = 1
            attention[b, width_c + width_s - s:] = 1
            input_ids[b, width_s - s:] = torch.tensor(row.prompt[c:], dtype=torch.long)
            positions[b, width_s - s:] = torch.arange(c, c + s)
        if width_c:  # lay the cached prefixes into the new cache, right-aligned at column width_c
            for index in range(len(cache.layers)):
                k0, v0 = next(kv.layers[index] for kv, c in zip(cached, reuse, strict=True) if c)
                keys = k0.new_zeros((batch, k0.shape[0], width_c, k0.shape[-1]))
                values = v0.new_zeros((batch, v0.shape[0], width_c, v0.shape[-1]))
                for b, (kv, c) in enumerate(zip(cached, reuse, strict=True)):
                    if c:
                        keys[b, :, width_c - c:] = kv.layers[index][0][:, :c]
                        values[b, :, width_c - c:] = kv.layers[index][1][:, :c]
                cache.update(keys, values, index)
        logits = backend.model(
            input_ids=input_ids, attention_mask=attention, position_ids=positions,
            **cache_argument(backend.model, cache), use_cache=True, logits_to_keep=1,
        ).logits[:, -1, :]  # (b, V)
        return cache, attention, logits

    def _prefill_rows(
        self, joining: list[_Row], cached: list[SessionKV | None], reuse: list[int]
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Each row in its own forward pass, then laid side by side, right-aligned: ``[pad | prompt]``,
        written straight into new rows of the batch's buffers (returned as a cache of views for the
        caller to read; ``_merge(placed=True)`` then adds only the rows' bookkeeping).

        On a CPU a forward pass costs what its tokens cost, padding included; rows joining together
        differ in suffix and cached length (one 45-token observation beside a 137-token one), so
        reading them one at a time computes only real tokens. ``bench/prefill.py`` (SmolLM2-135M,
        8 rows, 735-1445 cached and 45-137 new tokens, 1 thread): 14.9 s one by one vs 17.3 s padded.
        """
        from transformers import DynamicCache

        backend = self.backend
        model, device = backend.model, backend.device
        width = max(len(row.prompt) for row in joining)
        attention = torch.zeros((len(joining), width), dtype=torch.long, device=device)
        logits: list[torch.Tensor] = []
        cache = DynamicCache(config=model.config)  # views of the joining rows inside the batch's buffers
        batch_layers = self._batch_cache().layers
        for b, (row, kv, c) in enumerate(zip(joining, cached, reuse, strict=True)):
            own = growing_cache(model.config, dtype=backend.kv_dtype)  # suffix appended, prefix not copied
            if c:
                assert kv is not None
                for index, (k, v) in enumerate(kv.layers):
                    own.update(k[None, :, :c], v[None, :, :c], index)
            n = len(row.prompt)
            logits.append(model(
                input_ids=torch.tensor([row.prompt[c:]], dtype=torch.long, device=device),
                position_ids=torch.arange(c, n, device=device)[None], **cache_argument(model, own), use_cache=True,
                logits_to_keep=1,
            ).logits[:, -1, :])  # (1, V)
            attention[b, width - n:] = 1
            for index, (layer, view) in enumerate(zip(own.layers, cache.layers, strict=True)):
                if b == 0:
                    view.keys, view.values = batch_layers[index].open_rows(layer.keys, len(joining), width)
                    view.is_initialized = True
                view.keys[b, :, width - n:] = layer.keys[0]
                view.values[b, :, width - n:] = layer.values[0]
        return cache, attention, torch.cat(logits)

    def _share_prefixes(self, joining: list[_Row], cached: list[SessionKV | None], reuse: list[int]) -> list[int]:
        """Give rows without a usable session cache a shared prompt prefix (in place); returns the rows
        still uncovered, whose prompts are kept once prefilled (see the module docstring)."""
        fresh = [b for b, c in enumerate(reuse) if c < MIN_SHARED_PREFIX]
        uncovered: list[int] = []
        for b in fresh:
            best, length = None, 0
            for kv in self._prefixes:
                n = kv.usable_length(joining[b].prompt)
                if n > length:
                    best, length = kv, n
            if best is not None and length >= MIN_SHARED_PREFIX:
                cached[b], reuse[b] = best, length
                self.backend.sessions.stats.shared_prefix_tokens += length
                self._prefixes.remove(best)
                self._prefixes.append(best)
            else:
                uncovered.append(b)
        if len(uncovered) >= 2:  # rows arriving together: read their common prefix once
            common = _common_prefix([joining[b].prompt[:-1] for b in uncovered])
            if len(common) >= MIN_SHARED_PREFIX:
                kv = self._read_prefix(common)
                for b in uncovered:
                    cached[b], reuse[b] = kv, len(common)
                self.backend.sessions.stats.shared_prefix_tokens += len(common) * len(uncovered)
                return []
        return uncovered

    def _read_prefix(self, tokens: list[int]) -> SessionKV:
        """Prefill ``tokens`` alone (positions 0..n-1) and keep their keys and values."""
        from transformers import DynamicCache

        backend = self.backend
        cache = DynamicCache(config=backend.model.config)
        ids = torch.tensor([tokens], dtype=torch.long, device=backend.device)
        backend.model(input_ids=ids, position_ids=torch.arange(len(tokens), device=backend.device)[None],
                      **cache_argument(backend.model, cache), use_cache=True, logits_to_keep=1)
        backend.sessions.stats.prefilled_tokens += len(tokens)
        dtype = backend.kv_dtype or cache.layers[0].keys.dtype  # kept in the batch's storage dtype
        kv = SessionKV(token_ids=list(tokens),
                       layers=[(layer.keys[0].to(dtype), layer.values[0].to(dtype)) for layer in cache.layers])
        self._keep_prefix(kv)
        return kv

    def _keep_prefix(self, kv: SessionKV) -> None:
        self._prefixes.append(kv)
        del self._prefixes[:-MAX_KEPT_PREFIXES]

    def _merge(self, joining: list[_Row], cache: Any, attention: torch.Tensor, nxt: torch.Tensor,
               logits: torch.Tensor, *, placed: bool = False) -> None:
        """Add the joining rows to the batch (``placed``: their keys and values are already in its buffers)."""
        if self._plain and not self.rows:  # the batch's own cache (kept while the batch is empty)
            self._batch_cache()
            self._attention, self._next_position, self._logits = attention[:0, :0], nxt[:0], logits[:0]
            self._seeds = nxt[:0]
        seeds = torch.tensor([row.seed or 0 for row in joining], dtype=torch.long, device=nxt.device)  # (b,)
        if not self.rows and not self._plain:
            self.rows, self._cache, self._attention, self._next_position, self._logits = (
                joining, cache, attention, nxt, logits)
            self._seeds = seeds
            return
        assert self._attention is not None and self._next_position is not None and self._logits is not None
        old_w, new_w = self._attention.shape[1], attention.shape[1]
        width = max(old_w, new_w)
        if self._plain and not placed:  # GrowingLayers: the new rows are written below the others, in place
            for mine, theirs in zip(self._cache.layers, cache.layers, strict=True):
                mine.append_rows(theirs.keys, theirs.values)
        elif not self._plain:
            for mine, theirs in zip(self._cache.layers, cache.layers, strict=True):
                mine.keys = torch.cat([_left_pad(mine.keys, width), _left_pad(theirs.keys, width)], dim=0)
                mine.values = torch.cat([_left_pad(mine.values, width), _left_pad(theirs.values, width)], dim=0)
        self._attention = torch.cat([_left_pad(self._attention, width), _left_pad(attention, width)], dim=0)
        self._next_position = torch.cat([self._next_position, nxt])
        self._seeds = torch.cat([self._seeds, seeds])
        self._logits = torch.cat([self._logits, logits])
        self.rows = [*self.rows, *joining]

    def _batch_cache(self) -> Any:
        """The batch's own in-place cache (full-attention models), created on first use."""
        if self._cache is None:
            self._cache = growing_cache(self.backend.model.config, max_rows=self.max_rows, dtype=self.backend.kv_dtype)
        return self._cache

    def _select(self, keep: list[int]) -> list[int]:
        """Keep only batch rows ``keep`` (ascending); trim leading columns no remaining row uses.
        Returns the new row order (old indices): rows from the end fill the places of rows that left."""
        assert self._attention is not None and self._next_position is not None
        if not keep:
            self.rows = []
            if self._plain:  # keep the buffers for the rows of the next turn
                for layer in self._cache.layers:
                    layer.keep_rows([], self._attention.shape[1])
            else:
                self._cache = None
            self._attention = self._next_position = self._logits = self._seeds = None
            return []
        if not self._plain:
            index = torch.tensor(keep, dtype=torch.long, device=self._attention.device)
            self.rows = [self.rows[b] for b in keep]
            self._cache.batch_select_indices(index)
            self._attention, self._next_position = self._attention[index], self._next_position[index]
            self._seeds = self._seeds[index]
            return keep
        order = fill_holes(keep)
        index = torch.tensor(order, dtype=torch.long, device=self._attention.device)
        self.rows = [self.rows[b] for b in order]
        attention = self._attention[index]
        first = int(attention.any(0).nonzero()[0])  # columns before it are padding in every row
        for layer in self._cache.layers:
            layer.keep_rows(order, first)
        self._attention = attention[:, first:]
        self._next_position = self._next_position[index]
        self._seeds = self._seeds[index]
        return order

    def _save_session(self, b: int, session: Hashable, token_ids: list[int]) -> None:
        assert self._attention is not None
        layers = _row_kv(self._cache, self._attention, b)
        if layers[0][0].shape[1] != len(token_ids):  # never keep a cache that does not match its tokens
            raise RuntimeError(f"session cache of {layers[0][0].shape[1]} columns for {len(token_ids)} tokens")
        self.backend.sessions.put(session, SessionKV(token_ids=token_ids, layers=layers))


def prefill_groups(prompt_lengths: Sequence[int], reuse: Sequence[int], chunk_tokens: int | None) -> list[list[int]]:
    """Rows joining together, in order, split into padded forward passes of at most ``chunk_tokens``
    columns (rows x (widest cached prefix + widest new suffix), as :meth:`DecodeBatch._prefill_batched`
    lays them out); a row wider than that alone goes in a pass of its own. ``None``: one pass."""
    if chunk_tokens is None:
        return [list(range(len(prompt_lengths)))]
    groups: list[list[int]] = []
    group: list[int] = []
    width_c = width_s = 0
    for b, (n, c) in enumerate(zip(prompt_lengths, reuse, strict=True)):
        wc, ws = max(width_c, c), max(width_s, n - c)
        if group and (len(group) + 1) * (wc + ws) > chunk_tokens:
            groups.append(group)
            group, wc, ws = [], c, n - c
        group.append(b)
        width_c, width_s = wc, ws
    if group:
        groups.append(group)
    return groups


def _row_kv(cache: Any, attention: torch.Tensor, b: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Row ``b``'s keys and values on its real (unmasked) columns, per layer: (heads, n, head_dim)."""
    columns = attention[b].nonzero().squeeze(-1)  # (n,)
    return [(layer.keys[b][:, columns], layer.values[b][:, columns]) for layer in cache.layers]


def _common_prefix(sequences: Sequence[Sequence[int]]) -> list[int]:
    """The longest list of tokens every sequence starts with."""
    first = sequences[0]
    n = min(len(s) for s in sequences)
    for i in range(n):
        if any(s[i] != first[i] for s in sequences[1:]):
            return list(first[:i])
    return list(first[:n])


def _left_pad(x: torch.Tensor, width: int) -> torch.Tensor:
    """Pad dim -2 (cache: (B, H, C, D)) or dim -1 (mask: (B, C)) on the left with zeros up to ``width``."""
    dim = -1 if x.dim() == 2 else -2
    missing = width - x.shape[dim]
    if missing <= 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim=dim)
