"""Per-token log-probs, entropies and critic values of multi-turn sequences, packed or padded.

Both layouts give the same numbers; they differ in cost:

* **packed** (padding-free): sequences are put end to end into rows as long as the longest
  sequence (first fit, longest first), with ``position_ids`` restarting at 0 per sequence and no
  attention mask, from which transformers builds a block-diagonal causal mask. Short sequences
  fill the room long ones leave, so few padding tokens are computed, while a row's attention
  still costs no more than one long sequence's.
* **padded**: one sequence per row, right-padded to the longest of its forward, with an
  attention mask. This is the plain baseline ``bench/train_step.py`` measures against.

Packing needs transformers >= 4.53.1 and torch >= 2.6 (:func:`agentgym_core.rl.packing_support.packing_support_problem`): older
transformers build a plain causal mask from ``position_ids`` for the eager and SDPA attention used
here, and with torch < 2.6 transformers drops the packed mask, so tokens would silently attend to
the sequences packed before them. The config refuses ``algorithm.packing: true`` there.

Rows go through the model in forwards of at most ``max_tokens`` (rows x width) tokens. A model
given a checkpointing threshold (:mod:`agentgym_core.training.activation_checkpointing`) keeps the
activations of the forwards at or under it.

In both, the LM head only runs on positions whose *next* token the policy sampled
(``logits_to_keep``), because the (tokens x vocabulary) logits dominate memory otherwise.

Convention (as in the trajectory record): ``logprobs[i, t]`` is log p(token t | tokens < t) and
``values[i, t]`` is the critic's V of the state before token t; both are 0 where the mask is 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgym_core.rl.critic import SeparateCritic, ValueHead
from agentgym_core.rl.losses import entropy_from_logits
from agentgym_core.training.activation_checkpointing import checkpointing_for_forward

__all__ = [
    "TokenStats",
    "bf16_autocast",
    "count_forwards",
    "forward_tokens",
    "mixed_precision",
    "pack_bins",
    "token_logprobs",
]


def mixed_precision(mode: str, model: torch.nn.Module, cache: bool = True) -> contextlib.AbstractContextManager[Any]:
    """The autocast context of ``model.mixed_precision`` (``no``, ``bf16`` or ``auto``) on the model's device.

    Weights, gradients and optimizer state keep their dtype; matmuls run in bfloat16. ``auto``
    picks bf16 on CUDA devices that support it and on CPUs with native bf16 instructions
    (AVX512-BF16 or AMX), where the update runs faster than in float32 (bench/train_step.py measures it).
    ``cache``: keep each weight's bf16 cast for the whole context (a bf16 copy of the trained
    weights, half their float32 size) instead of casting it again at every use.
    """
    device = next(model.parameters()).device
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16_autocast(mode, device), cache_enabled=cache)


def bf16_autocast(mode: str, device: torch.device) -> bool:
    """Whether ``model.mixed_precision`` (``no``, ``bf16`` or ``auto``) runs matmuls in bfloat16 on ``device``."""
    if mode == "auto":
        if device.type == "cuda":
            return torch.cuda.is_bf16_supported()
        return device.type == "cpu" and torch.cpu._is_avx512_bf16_supported()
    if mode in ("no", "bf16"):
        return mode == "bf16"
    raise ValueError(f"model.mixed_precision must be no, bf16 or auto; got {mode!r}")


@dataclass
class TokenStats:
    """Per-token quantities laid out as (B, T) like the batch's masks."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None
    values: torch.Tensor | None


def pack_bins(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices of sequences grouped into bins of at most ``max_tokens`` tokens (first fit decreasing).

    A sequence longer than ``max_tokens`` gets a bin of its own (it is never cut).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for b, free in enumerate(room):
            if lengths[i] <= free:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(max_tokens - lengths[i])
    return bins


def _plan(lengths: Sequence[int], *, packing: bool, max_tokens: int) -> tuple[list[list[int]], list[list[int]]]:
    """(rows, forwards) of :func:`forward_tokens`: the sequences of each row, and the rows of each forward."""
    # Rows: several sequences end to end (packed, rows as long as the longest sequence, so the
    # attention cost stays that of one sequence per row) or one sequence each (padded).
    width_cap = max(lengths, default=1)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rows = pack_bins(lengths, width_cap) if packing else [[i] for i in order]
    row_len = [sum(lengths[i] for i in r) for r in rows]
    forwards: list[list[int]] = []  # consecutive rows whose (rows x widest) fits max_tokens
    for r in sorted(range(len(rows)), key=lambda r: -row_len[r]):
        if forwards and (len(forwards[-1]) + 1) * row_len[forwards[-1][0]] <= max_tokens:
            forwards[-1].append(r)
        else:
            forwards.append([r])
    return rows, forwards


def count_forwards(sequences: Sequence[Sequence[int]], mask: torch.Tensor, *, packing: bool = True,
                   max_tokens: int = 4096) -> int:
    """How many model forwards :func:`forward_tokens` makes for these arguments (a forward without a
    masked token is skipped). Sharded modules need every rank to make the same number."""
    lengths = [len(s) for s in sequences]
    rows, forwards = _plan(lengths, packing=packing, max_tokens=max_tokens)
    has_target = [bool((mask[i, : lengths[i]] > 0).any()) for i in range(len(lengths))]
    return sum(any(has_target[i] for r in fwd for i in rows[r]) for fwd in forwards)


LOGIT_CHUNK = 512
"""Response positions whose float32 log-softmax and entropy are computed together (bounds peak memory)."""


class _TokenLogprobs(torch.autograd.Function):
    """log softmax(logits / T)[token] per row, keeping only the logits themselves for backward.

    ``torch.log_softmax(...).gather(...)`` keeps its float32 output (rows x vocabulary) until backward:
    0.2 GB per 1,000 trained tokens of a 49k vocabulary, 0.6 GB of a 152k one. Here backward recomputes
    the softmax from the logits (saved as given: bfloat16 under autocast, and a view of the model's
    output, so no new memory) and the log-normalizer (one float per row).
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
        scaled = torch.div(logits.float(), temperature)  # (n, V), a new tensor: the logits stay as they are
        log_normalizer = torch.logsumexp(scaled, dim=-1)  # (n,)
        out = scaled.gather(-1, tokens[:, None]).squeeze(-1) - log_normalizer  # (n,)
        ctx.save_for_backward(logits, tokens, log_normalizer)
        ctx.temperature = temperature
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        logits, tokens, log_normalizer = ctx.saved_tensors
        # d out_i / d x_ij = (1[j = token_i] - softmax_ij) / T
        probs = torch.div(logits.float(), ctx.temperature).sub_(log_normalizer[:, None]).exp_()  # (n, V)
        grad_logits = probs.mul_(-grad[:, None]).scatter_add_(-1, tokens[:, None], grad[:, None])
        return grad_logits.div_(ctx.temperature).to(logits.dtype), None, None


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature)[tokens]: (n, V), (n,) -> (n,) in float32.

    The same numbers as ``torch.log_softmax(logits.float() / temperature, -1).gather(-1, tokens[:, None])``
    without holding the float32 (n, V) result for backward (:class:`_TokenLogprobs`).
    """
    if not (logits.requires_grad and torch.is_grad_enabled()):  # no backward: nothing would be kept anyway
        scaled = torch.div(logits.float(), temperature)
        return scaled.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
    return _TokenLogprobs.apply(logits, tokens, temperature)


def forward_tokens(
    model: torch.nn.Module,
    sequences: Sequence[Sequence[int]],
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    packing: bool = True,
    max_tokens: int = 4096,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    value_head: ValueHead | SeparateCritic | None = None,
    pad_token_id: int = 0,
) -> TokenStats:
    """Forward ``sequences`` (B lists of ids) through ``model``; stats on positions where ``mask`` is 1.

    ``mask`` is (B, T) with ``T >= max(len(seq))``. Gradients flow (call under ``torch.no_grad()``
    for old/reference log-probs). ``value_head`` (see :mod:`agentgym_core.rl.critic`): a
    :class:`ValueHead` reads the policy's last hidden state (shared trunk); a :class:`SeparateCritic`
    runs its own trunk on the same rows, so value gradients never reach ``model``. With
    ``entropy_grad=False`` the entropy is a metric only: computed without a graph (no memory held for
    a backward through it).
    """
    B, T = mask.shape
    device = next(model.parameters()).device
    lengths = [len(s) for s in sequences]
    logprobs = torch.zeros(B, T, device=device)
    entropy = torch.zeros(B, T, device=device) if with_entropy else None
    values = torch.zeros(B, T, device=device) if value_head is not None else None
    rows, forwards = _plan(lengths, packing=packing, max_tokens=max_tokens)
    row_len = [sum(lengths[i] for i in r) for r in rows]

    for fwd in forwards:
        width = max(row_len[r] for r in fwd)
        ids = torch.full((len(fwd), width), pad_token_id, device=device)
        pos = torch.zeros(len(fwd), width, dtype=torch.long, device=device)
        attn = torch.zeros(len(fwd), width, dtype=torch.long, device=device)
        where: list[tuple[int, torch.Tensor, int, int]] = []  # (row, columns of trained tokens, seq, offset)
        for k, r in enumerate(fwd):
            offset = 0
            for i in rows[r]:
                n = lengths[i]
                ids[k, offset: offset + n] = torch.tensor(sequences[i], device=device)
                pos[k, offset: offset + n] = torch.arange(n, device=device)
                attn[k, offset: offset + n] = 1
                cols = torch.nonzero(mask[i, :n] > 0).flatten().to(device) + offset
                where.append((k, cols, i, offset))
                offset += n
            # Packed rows: the padding tail restarts its positions, so it is a block of its own.
            pos[k, offset:] = torch.arange(width - offset, device=device)
        kwargs = {"position_ids": pos} if packing else {"attention_mask": attn, "position_ids": pos}
        targets_cols = [cols for _, cols, _, _ in where]
        # Logits at column c-1 predict the token at column c; keep only those columns.
        keep = torch.unique(torch.cat(targets_cols) - 1) if targets_cols else torch.zeros(0, dtype=torch.long)
        if keep.numel() == 0:
            continue
        # use_cache=False: with a cache transformers skips packed-sequence detection (attention would leak).
        shared_trunk = isinstance(value_head, ValueHead)
        with checkpointing_for_forward(model, ids.numel()):
            out = model(input_ids=ids, logits_to_keep=keep, output_hidden_states=shared_trunk, use_cache=False,
                        **kwargs)
        value_hidden = None  # (rows, width, H): the hidden states the value head reads
        if value_head is not None:
            value_hidden = out.hidden_states[-1] if shared_trunk else value_head.last_hidden(ids, **kwargs)
        logits = out.logits  # (rows, K, V) in the model's dtype; made float one chunk at a time below
        slot = torch.full((int(keep.max()) + 1,), -1, dtype=torch.long, device=device)
        slot[keep] = torch.arange(keep.numel(), device=device)  # column -> index into K
        for row, cols, i, offset in where:
            if cols.numel() == 0:
                continue
            k = slot[cols - 1]  # (n,)
            tok = ids[row, cols]  # (n,)
            local = cols - offset  # positions within sequence i
            # A sequence's kept positions are one run of K (keep is sorted, sequences don't overlap), so
            # its logits are a view of the forward's, not a copy; the index is the fallback.
            first = int(k[0])
            run = bool(torch.equal(k, torch.arange(first, first + k.numel(), device=k.device)))
            seq_logits = logits[row, first: first + k.numel()] if run else logits[row, k]  # (n, V)
            # Float logits exist for LOGIT_CHUNK positions at a time (a 152k vocabulary makes each
            # position 0.6 MB in float32), never for the whole forward, and none is kept for backward.
            for c in range(0, k.numel(), LOGIT_CHUNK):
                part = slice(c, c + LOGIT_CHUNK)
                logprobs[i, local[part]] = token_logprobs(seq_logits[part], tok[part], temperature)
                if entropy is not None:
                    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                        entropy[i, local[part]] = entropy_from_logits(seq_logits[part], temperature)
            if values is not None:
                assert value_head is not None and value_hidden is not None  # values are made only with a value head
                hidden = value_hidden[row, cols - 1]  # (n, H): state before token t
                values[i, local] = value_head(hidden)
    return TokenStats(logprobs=logprobs, entropy=entropy, values=values)
