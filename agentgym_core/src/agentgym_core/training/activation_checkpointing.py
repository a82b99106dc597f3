"""Activation checkpointing only for the training forwards long enough to need it.

Checkpointing (``model.gradient_checkpointing``) keeps each decoder layer's input and recomputes the
layer in the backward pass: memory for activations grows with the tokens of one forward far more
slowly, and every step pays about one more forward. It is all or nothing in transformers, but the
memory it saves is proportional to the forward's tokens: a short forward's activations fit where a
long sequence's do not. So a threshold (``model.gradient_checkpointing_above_tokens``) keeps it for
forwards of more tokens (rows x width) than that and turns it off for the others.

What the threshold saves in time and costs in memory is measured by ``bench/sft_memory.py``
(bench/README.md, "Checkpointing only long forwards").

The threshold is an attribute of the model, set where the model is loaded (as transformers keeps its
own flag on the layers), and read by :func:`~agentgym_core.rl.forward.forward_tokens` around each
forward. Turning the layers' flags off around the forward is enough: the backward pass of a forward
run without checkpointing uses what autograd saved, and never reads the flag.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["checkpoint_only_above", "checkpointing_threshold", "checkpointing_for_forward"]

_THRESHOLD = "_agentgym_checkpoint_above_tokens"


def checkpoint_only_above(model: torch.nn.Module, tokens: int | None) -> None:
    """Make ``model``'s activation checkpointing apply only to training forwards of more than ``tokens``
    tokens (rows x width); None: to every forward (transformers' behaviour)."""
    if tokens is not None and tokens < 1:
        raise ValueError(f"the checkpointing threshold must be a positive number of tokens, got {tokens}")
    setattr(model, _THRESHOLD, tokens)


def checkpointing_threshold(model: torch.nn.Module) -> int | None:
    """The threshold :func:`checkpoint_only_above` set on ``model``, or None."""
    return getattr(model, _THRESHOLD, None)


@contextlib.contextmanager
def checkpointing_for_forward(model: torch.nn.Module, tokens: int) -> Iterator[None]:
    """Around one forward of ``tokens`` tokens: checkpointing stays as it is, unless the model's threshold
    says this forward is short enough to keep its activations; then every module flagged for it is
    unflagged until the context exits."""
    threshold = checkpointing_threshold(model)
    if threshold is None or tokens > threshold:
        yield
        return
    flagged = [m for m in model.modules() if getattr(m, "gradient_checkpointing", None) is True]
    for module in flagged:
        module.gradient_checkpointing = False
    try:
        yield
    finally:
        for module in flagged:
            module.gradient_checkpointing = True
