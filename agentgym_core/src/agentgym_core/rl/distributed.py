"""Learner ranks: torch.distributed set-up, and the few collectives the learner needs.

A run has ``trainer.learners`` learner ranks. Rank 0 is the driver: it writes logs and checkpoints;
every rank plays its share of the held-out evaluations. Every rank holds one FSDP2 shard of the policy (``fully_shard``) and updates it on its
share of each mini-batch's rows, so N ranks compute what one process computes (see
:mod:`agentgym_core.rl.learner`); every rank also samples its share of each step's episodes and
scores its share of the rows (:mod:`agentgym_core.rl.colocated`).

Two kinds of groups, by NCCL's rules. The **device group** (the default group: NCCL on CUDA, gloo
on the CPU) carries only what torch's sharding code sends, tensors on the learner's device. The
**host groups** (gloo, CPU tensors) carry everything agentgym's own code sends: pickled
trajectories, summed statistics, barriers. A rank waits for another (rolling out, evaluating,
writing a checkpoint) only on a host group, so NCCL's watchdog never counts that time; every group
fails a collective that waits longer than ``trainer.collective_timeout_s``. The CPU tests check
these rules with :mod:`agentgym_core.testing.strict_collectives`.

Ranks come from ``torchrun --nproc-per-node N -m agentgym_core train RECIPE`` (the launcher's
``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` variables) or from ``agentgym train RECIPE
trainer.learners=N``, which spawns the N processes itself on this machine (loopback rendezvous).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = [
    "DEFAULT_COLLECTIVE_TIMEOUT_S",
    "DistContext",
    "RankFailedError",
    "all_reduce_stats",
    "barrier",
    "broadcast_object",
    "gather_object",
    "host_rendezvous",
    "init_from_environment",
    "pin_one_gpu",
    "rank_environment",
    "shard_rows",
    "spawn",
    "visible_gpus",
]

T = TypeVar("T")

DEFAULT_COLLECTIVE_TIMEOUT_S = 1800.0
"""How long a rank waits in one collective before the run fails (``trainer.collective_timeout_s``)."""


@dataclass(frozen=True)
class DistContext:
    """Where this process stands among the learner ranks."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    # gloo groups for host-side traffic: the loop's (statistics, objects, barriers) and the rollout
    # side's (each step's trajectories; its own, as asynchronous rollouts gather in a thread).
    host_group: Any = field(default=None, compare=False, repr=False)
    rollout_group: Any = field(default=None, compare=False, repr=False)

    @property
    def is_main(self) -> bool:
        """Rank 0: the driver that logs and checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def host_rendezvous(address: str = "127.0.0.1") -> Any:
    """A rendezvous store (``torch.distributed.TCPStore``) this process hosts, on a port the OS gives it now.

    The ranks join it as clients (:func:`rank_environment`), as torchrun's ranks join their agent's store,
    so no rank binds the port itself: choosing a free port, closing it and binding it again in another
    process lets anything else on the machine take it in between (``EADDRINUSE``). Keep the returned
    store alive until every rank has joined; its ``port`` is the one to hand them.
    """
    return dist.TCPStore(address, 0, is_master=True, wait_for_workers=False)


def rank_environment(rank: int, world_size: int, master_addr: str, master_port: int,
                     local_rank: int | None = None) -> dict[str, str]:
    """The variables :func:`init_from_environment` reads, for a rank joining a :func:`host_rendezvous` store.

    ``TORCHELASTIC_USE_AGENT_STORE`` makes torch's ``env://`` rendezvous connect every rank, rank 0
    too, as a client of the store at ``master_addr:master_port`` (older torch also reads the restart count).
    """
    return dict(RANK=str(rank), LOCAL_RANK=str(rank if local_rank is None else local_rank),
                WORLD_SIZE=str(world_size), MASTER_ADDR=master_addr, MASTER_PORT=str(master_port),
                TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")


def init_from_environment(device: str | torch.device = "cpu",
                          timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S) -> DistContext:
    """Join the process group the launcher described (``RANK``/``WORLD_SIZE``); single process otherwise.

    The device group's backend: NCCL when ``device`` is CUDA, gloo otherwise; on CUDA each rank
    takes ``cuda:LOCAL_RANK``. Two gloo host groups are opened beside it (see the module
    docstring). Every group fails a collective after ``timeout_s`` seconds of waiting.
    ``AGENTGYM_STRICT_COLLECTIVES`` turns on the CPU tests' strict collectives first.
    """
    from agentgym_core.testing.strict_collectives import install_from_environment

    device = torch.device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext(device=device)
    install_from_environment()
    rank = int(os.environ["RANK"])
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=timeout_s)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world,
                                timeout=timeout)
    host_group = dist.new_group(backend="gloo", timeout=timeout)
    rollout_group = dist.new_group(backend="gloo", timeout=timeout)
    return DistContext(rank=rank, world_size=world, device=device, host_group=host_group,
                       rollout_group=rollout_group)


def visible_gpus(cuda_visible_devices: str | None, device_count: int) -> list[str]:
    """The GPUs this process may hand to its ranks, as ``CUDA_VISIBLE_DEVICES`` entries."""
    if cuda_visible_devices is None:
        return [str(i) for i in range(device_count)]
    return [g.strip() for g in cuda_visible_devices.split(",") if g.strip()][:device_count]


def pin_one_gpu(gpus: list[str], rank: int) -> None:
    """Let this spawned rank see only ``gpus[rank]``, as ``cuda:0`` (call before anything starts CUDA).

    The learner then takes it (``LOCAL_RANK`` 0), and so does an engine that picks its GPU itself
    (an in-process vLLM takes the first visible one): each rank's rollout engine sits on its own GPU.
    """
    os.environ.update(CUDA_VISIBLE_DEVICES=gpus[rank], LOCAL_RANK="0")


def _spawned(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    os.environ.update(rank_environment(rank, world, "127.0.0.1", port))
    try:
        fn(*args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class RankFailedError(RuntimeError):
    """A rank :func:`spawn` started failed; the message is one line: which rank, its exit code, its error."""


def spawn(fn: Callable[..., Any], world_size: int, *args: Any) -> None:
    """Run ``fn(*args)`` in ``world_size`` fresh processes on this machine, ranks 0..N-1.

    A rank that raises or dies makes the whole call raise :class:`RankFailedError` once, in one line with the
    rank's exit code and the last line of its error (torch.multiprocessing ends the other ranks).
    """
    import torch.multiprocessing as mp

    store = host_rendezvous()  # held here until every rank has finished
    try:
        mp.start_processes(_spawned, args=(world_size, store.port, fn, args), nprocs=world_size,
                           start_method="spawn", join=True)
    except mp.ProcessRaisedException as exc:  # its process exits with 1 after reporting the exception
        last = next((line.strip() for line in reversed(str(exc).splitlines()) if line.strip()), "an error")
        raise RankFailedError(f"learner rank {exc.error_index} of {world_size} (pid {exc.error_pid}) exited with "
                              f"code 1: {last}") from None
    except mp.ProcessExitedException as exc:
        signal = f" ({exc.signal_name})" if exc.signal_name else ""
        raise RankFailedError(f"learner rank {exc.error_index} of {world_size} (pid {exc.error_pid}) exited with "
                              f"code {exc.exit_code}{signal} before finishing") from None


def shard_rows(rows: Sequence[int], ctx: DistContext) -> list[int]:
    """This rank's rows of a mini-batch: every ``world_size``-th, starting at ``rank``."""
    return list(rows[ctx.rank :: ctx.world_size])


def broadcast_object(obj: T | None, ctx: DistContext, *, group: Any = None) -> T:
    """Rank 0's ``obj`` on every rank, over a host group (``ctx.host_group`` unless ``group`` is given;
    pickled: trajectories, states and metrics, not tensors of weights)."""
    if not ctx.distributed:
        return obj  # type: ignore[return-value]
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=ctx.host_group if group is None else group)
    return box[0]  # type: ignore[return-value]


def gather_object(obj: T, ctx: DistContext, *, group: Any = None) -> list[T]:
    """Every rank's ``obj``, in rank order, on every rank, over a host group (pickled)."""
    if not ctx.distributed:
        return [obj]
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, obj, group=ctx.host_group if group is None else group)
    return gathered


def barrier(ctx: DistContext) -> None:
    """Wait until every rank is here, on the host group (a rank may wait here while rank 0 logs an evaluation)."""
    if ctx.distributed:
        dist.barrier(group=ctx.host_group)


def all_reduce_max(value: float, ctx: DistContext) -> float:
    """The largest of every rank's ``value`` (a maximum does not add up), on the host group."""
    if not ctx.distributed:
        return float(value)
    found = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(found, op=dist.ReduceOp.MAX, group=ctx.host_group)
    return float(found.item())


def all_reduce_stats(stats: dict[str, float], ctx: DistContext) -> dict[str, float]:
    """Sum each named number over ranks (a rank without a key counts 0 for it), on the host group."""
    if not ctx.distributed:
        return dict(stats)
    keys = sorted(set().union(*gather_object(set(stats), ctx)))  # every rank reduces the same vector
    values = torch.tensor([float(stats.get(k, 0.0)) for k in keys], dtype=torch.float64)
    dist.all_reduce(values, group=ctx.host_group)
    return dict(zip(keys, values.tolist(), strict=True))
