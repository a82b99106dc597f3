"""Weights from the learner to the rollout backend, in the backend's dtype.

After every update the rollout side needs the new policy weights. What moves is what the engine
holds, not what the optimizer holds: float32 masters are cast to the engine's dtype (bfloat16 for
vLLM and for sampling on a GPU) before they leave the learner, which halves every byte that
follows (the all-gather of a sharded model, the copy into the engine, Ray's object store).

On several ranks each tensor is gathered on its own, on the device its shard lives on (the GPU
under NCCL), after the cast: no rank ever holds the float32 model whole, nor a copy of it in host
memory. The gathered tensors stay on that device, so a rollout engine on the same rank loads them
without a trip through the host (the transformers backend copies device to device; vLLM in engine
mode, in this process, takes them as they are). A caller that ships the weights elsewhere (a Ray
actor) moves them to the CPU itself.

A :class:`WeightSnapshot` holds tensors nothing else refers to: the learner keeps updating its own
parameters, so :class:`~agentgym_core.rl.async_rollouts.AsyncRollouts` need not copy it once more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from agentgym_core.rl.config import TrainConfig

__all__ = ["WeightSnapshot", "engine_dtype", "gather_weights", "weight_bytes", "weight_sync_metrics"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class WeightSnapshot(dict[str, Any]):
    """Full policy weights by Hugging Face name, in tensors no module shares (safe to keep as they are)."""


def engine_dtype(config: TrainConfig, device: torch.device) -> torch.dtype | None:
    """The dtype the rollout backend keeps its weights in, so the learner sends exactly that.

    ``rollout.backend_options.dtype`` when the recipe names one; otherwise bfloat16 on a GPU (where
    both vLLM and the transformers backend sample in it) and None elsewhere: the learner's own dtype.
    Every rank computes the same answer from the config alone, so their collectives agree.
    """
    named = config.rollout.backend_options.get("dtype", "auto")
    if named in _DTYPES:
        return _DTYPES[named]
    return torch.bfloat16 if device.type == "cuda" else None


def gather_weights(
    model: torch.nn.Module, *, dtype: torch.dtype | None, tied_output: str | None = None,
    include: Callable[[str], bool] | None = None,
) -> Mapping[str, torch.Tensor]:
    """The full weights of ``model`` in ``dtype`` (floating tensors only; None keeps each tensor's own).

    A sharded (FSDP2) model is gathered one tensor at a time on its shards' device, cast before the
    all-gather (collective: every rank calls it, in the same order). ``tied_output``: the name of an
    output layer tied to the input embeddings, left out as ``save_pretrained`` leaves it out.
    ``include``: keep only the names it accepts (LoRA adapters: the rollout side has the base weights).
    Returns a :class:`WeightSnapshot` when the tensors are new, else the module's own state dict.
    """
    from torch.distributed.tensor import DTensor

    state = model.state_dict()
    if tied_output is not None:
        state.pop(tied_output, None)
    if include is not None:
        state = {name: tensor for name, tensor in state.items() if include(name)}
    sharded = any(isinstance(t, DTensor) for t in state.values())
    if not sharded and (
        dtype is None or all(t.dtype == dtype or not t.is_floating_point() for t in state.values())
    ):
        return state  # the module's own tensors: a caller that keeps them must copy
    out = WeightSnapshot()
    for name, tensor in state.items():
        tensor = tensor.detach()
        if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
            tensor = tensor.to(dtype)  # on a DTensor: each rank casts its own shard, then the smaller gather
        elif not isinstance(tensor, DTensor):
            tensor = tensor.clone()
        out[name] = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
    return out


def weight_bytes(weights: Any) -> int | None:
    """Bytes of the tensors in a state dict (None for what is not one, such as a Ray object reference)."""
    if not isinstance(weights, Mapping):
        return None
    return sum(t.numel() * t.element_size() for t in weights.values() if isinstance(t, torch.Tensor))


def weight_sync_metrics(learner: Any, seconds: float) -> dict[str, float]:
    """``weight_sync_bytes`` (what the learner sent, in the engine's dtype) and ``weight_sync_seconds``
    (gather, cast and load) of one sync, for the step's metrics."""
    sent = getattr(learner, "weight_sync_bytes", None)
    return {
        "weight_sync_seconds": seconds,
        **({"weight_sync_bytes": float(sent)} if sent is not None else {}),
    }
