"""Rollouts on every learner rank (the local launcher with ``trainer.learners = N > 1``).

Each learner rank owns a rollout worker next to its shard of the learner, on the same device (the
pattern verl calls a hybrid engine), and samples its share of every step's episodes: the i-th of N
contiguous slices, each episode seeded by its index in the whole step, so N ranks sample what one
process samples. :class:`RankRollouts` wraps that worker with the calls the training loop makes;
its ``collect`` returns the whole step on every rank, so every rank scores and updates on the same
batch without a rank that rolls out alone while the others wait.

What the rank's worker samples from depends on the backend:

* a backend that samples a module (transformers) gets :func:`rollout_copy`, an unsharded copy of
  the initial weights (bfloat16 where the run's matmuls are bfloat16 on CUDA), since the learner's
  module holds only this rank's FSDP2 shard; it takes the full weights after every update;
* a backend with its own weights (vLLM) loads ``model.path`` itself on this rank and takes the
  weights the same way; colocated vLLM sleeps during the update
  (``rollout.backend_options.gpu_sharing: colocate``). No copy of the module is made for it.

Waiting happens on host groups only (:mod:`agentgym_core.rl.distributed`): the trajectories and
rank 0's round-schedule and curriculum state travel over ``ctx.rollout_group`` (gloo), which
asynchronous rollouts use from their sampling thread.

Held-out evaluations are spread the same way: each rank's engine plays every N-th episode of the
panel (rank i: episodes i, i+N, ...), and the shares, gathered over ``ctx.rollout_group``, make the
record one engine would make, in the panel's order, on every rank.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch

from agentgym_core.rl.config import TrainConfig
from agentgym_core.rl.curriculum import TaskCurriculum
from agentgym_core.rl.distributed import DistContext, broadcast_object, gather_object
from agentgym_core.rl.envs import evaluation_record
from agentgym_core.rl.forward import bf16_autocast
from agentgym_core.rl.rollout_worker import RolloutResult, RolloutWorker, merge_slices

__all__ = ["RankRollouts", "rollout_copy"]


def rollout_copy(model: torch.nn.Module, config: TrainConfig, device: torch.device) -> torch.nn.Module:
    """An unsharded copy of ``model`` for sampling, made before the learner shards it or makes float32
    masters: in bfloat16 where the learner's matmuls run in bfloat16 on CUDA, else in the loaded dtype."""
    rollout_model = copy.deepcopy(model).eval().requires_grad_(False)
    if device.type == "cuda" and bf16_autocast(config.model.mixed_precision, device):
        rollout_model.to(torch.bfloat16)
    return rollout_model


class RankRollouts:
    """This rank's rollout worker, sampling its slice of each step; ``collect`` returns the whole step on
    every rank (see the module docstring)."""

    def __init__(
        self,
        worker: RolloutWorker,
        ctx: DistContext,
        *,
        scheduler: Any,
        curriculum: TaskCurriculum | None,
        env_order: list[str],
    ) -> None:
        self.worker, self.ctx, self.scheduler, self.curriculum = worker, ctx, scheduler, curriculum
        self.env_order = env_order

    @property
    def receives_weights(self) -> bool:
        """Whether this rank's engine takes weights after every update (the same on every rank)."""
        return self.worker.receives_weights

    @property
    def sampling_setup(self) -> dict[str, str]:
        """What this rank's backend samples on (the same on every rank)."""
        return self.worker.sampling_setup

    def collect(self, step: int, sampling_round: int = 0) -> RolloutResult:
        """Every rank's slice of step ``step`` (round ``sampling_round``), in the order one worker returns them."""
        start = time.perf_counter()
        # Rank 0's round schedule and curriculum counts (only rank 0 updates them from the step's
        # metrics), so every rank draws the same tasks at the same horizon.
        state = (
            self.scheduler.state_dict(),
            self.curriculum.state_dict() if self.curriculum is not None else None,
        )
        state = broadcast_object(state if self.ctx.is_main else None, self.ctx, group=self.ctx.rollout_group)
        if not self.ctx.is_main:
            self.scheduler.load_state_dict(state[0])
            if self.curriculum is not None and state[1] is not None:
                self.curriculum.load_state_dict(state[1])
        part = self.worker.collect(step, sampling_round)
        parts = gather_object(part, self.ctx, group=self.ctx.rollout_group)
        return merge_slices(parts, self.env_order, time.perf_counter() - start)

    @property
    def envs(self) -> list[Any]:
        """This rank's environment handles (the same environments and catalogs on every rank)."""
        return self.worker.envs

    def load_weights(self, weights: Any, probe: Any = None) -> None:
        """This rank's engine takes the full weights (every rank calls it with its own copy of them); ``probe``:
        the sync check of :mod:`agentgym_core.rl.guards`, run on this rank's engine."""
        self.worker.load_weights(weights, probe)

    def check_weights(self, probe: Any) -> None:
        """The sync check on this rank's engine (:meth:`RolloutWorker.check_weights`)."""
        self.worker.check_weights(probe)

    def evaluate(self, horizon: int, step: int, *, resumed: bool = False) -> dict[str, Any]:
        """Held-out evaluation on every rank's engine, each playing its share of the panel; every rank returns the
        whole record (collective: every rank calls it)."""
        start = time.perf_counter()
        mine = self.worker.evaluate_share(horizon, step, (self.ctx.rank, self.ctx.world_size), resumed)
        shares = gather_object(mine, self.ctx, group=self.ctx.rollout_group)
        return evaluation_record(shares, horizon, step, wall_seconds=time.perf_counter() - start)

    def close(self) -> None:
        """Close this rank's engine (its environment clients close with the run's exit stack)."""
        self.worker.close()
