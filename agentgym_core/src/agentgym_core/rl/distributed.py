"""Learner ranks: torch.distributed set-up, and the few collectives the learner needs.

A run has ``trainer.learners`` learner ranks. Rank 0 is the driver: it runs the rollouts, writes
logs and checkpoints. Every rank holds one FSDP2 shard of the policy (``fully_shard``; gloo on CPU,
NCCL on CUDA) and updates it on its share of each mini-batch's rows, so N ranks compute what one
process computes (see :mod:`agentgym_core.rl.learner`).

Ranks come from ``torchrun --nproc-per-node N -m agentgym_core train RECIPE`` (the launcher's
``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` variables) or from ``agentgym train RECIPE
trainer.learners=N``, which spawns the N processes itself on this machine (loopback rendezvous).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = [
    "DistContext",
    "all_reduce_stats",
    "broadcast_object",
    "free_port",
    "init_from_environment",
    "shard_rows",
    "spawn",
]

T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands among the learner ranks."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """Rank 0: the driver that rolls out, logs and checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def free_port() -> int:
    """A TCP port free on loopback now (for the rendezvous of spawned ranks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_from_environment(device: str | torch.device = "cpu") -> DistContext:
    """Join the process group the launcher described (``RANK``/``WORLD_SIZE``); single process otherwise.

    Backend: NCCL when ``device`` is CUDA, gloo otherwise. On CUDA each rank takes
    ``cuda:LOCAL_RANK``.
    """
    device = torch.device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext(device=device)
    rank = int(os.environ["RANK"])
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world)
    return DistContext(rank=rank, world_size=world, device=device)


def _spawned(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        fn(*args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(fn: Callable[..., Any], world_size: int, *args: Any) -> None:
    """Run ``fn(*args)`` in ``world_size`` fresh processes on this machine, ranks 0..N-1.

    A rank that raises makes the whole call raise (torch.multiprocessing reports its traceback).
    """
    import torch.multiprocessing as mp

    mp.start_processes(_spawned, args=(world_size, free_port(), fn, args), nprocs=world_size,
                       start_method="spawn", join=True)


def shard_rows(rows: Sequence[int], ctx: DistContext) -> list[int]:
    """This rank's rows of a mini-batch: every ``world_size``-th, starting at ``rank``."""
    return list(rows[ctx.rank :: ctx.world_size])


def broadcast_object(obj: T | None, ctx: DistContext) -> T:
    """Rank 0's ``obj`` on every rank (pickled; for trajectories and metrics, not tensors of weights)."""
    if not ctx.distributed:
        return obj  # type: ignore[return-value]
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def gather_object(obj: T, ctx: DistContext) -> list[T]:
    """Every rank's ``obj``, in rank order, on every rank (pickled; small objects only)."""
    if not ctx.distributed:
        return [obj]
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def all_reduce_stats(stats: dict[str, float], ctx: DistContext) -> dict[str, float]:
    """Sum each named number over ranks (a rank without a key counts 0 for it)."""
    if not ctx.distributed:
        return dict(stats)
    keys = sorted(set().union(*broadcast_gather_keys(stats, ctx)))
    values = torch.tensor([float(stats.get(k, 0.0)) for k in keys], dtype=torch.float64)
    dist.all_reduce(values)
    return dict(zip(keys, values.tolist(), strict=True))


def broadcast_gather_keys(stats: dict[str, float], ctx: DistContext) -> list[set[str]]:
    """Every rank's key set (so all ranks reduce the same vector)."""
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, set(stats))
    return gathered
