"""The rollout role: a backend, one rollout engine per environment, and the environments' clients.

A :class:`RolloutWorker` turns a training step into trajectories (``group_size`` samples of each of
the step's tasks, the horizon from the round scheduler), evaluates the current policy on held-out
tasks, and takes new weights after each update. It owns no optimizer and no learner state, so the
loop can place it apart from the learner ranks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agentgym_core.rl.batch import allocate_tasks, step_seed, tasks_for_step
from agentgym_core.rl.config import TrainConfig
from agentgym_core.rl.setup import EnvHandle, evaluate
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.rollout.engine import EngineConfig, EpisodeSpec, RolloutEngine, RolloutStats
from agentgym_core.rollout.trajectory import Trajectory

__all__ = ["RolloutResult", "RolloutWorker", "shard_bounds"]


@dataclass
class RolloutResult:
    """One step's trajectories and where the time went."""

    trajectories: list[Trajectory]
    seconds: float  # wall time of the whole rollout
    generation_seconds: float  # wall time inside generation calls
    generation_calls: int


class RolloutWorker:
    """Samples a step's trajectories, evaluates, and takes weights; see the module docstring."""

    def __init__(self, config: TrainConfig, envs: list[EnvHandle], backend: Any, *, scheduler: Any,
                 receives_weights: bool, shard: tuple[int, int] = (0, 1)) -> None:
        self.config, self.envs, self.backend = config, envs, backend
        self.receives_weights = receives_weights
        self.shard = shard  # (i, M): this worker rolls out the i-th of M contiguous slices of each env's episodes
        rollout = config.rollout
        self.engines = {
            env.name: RolloutEngine(
                backend, env.make_env, num_envs=env.config.max_concurrency, scheduler=scheduler, env_name=env.name,
                config=EngineConfig(max_total_tokens=rollout.max_total_tokens, step_timeout_s=rollout.env_timeout_s,
                                    sampling=SamplingParams(temperature=rollout.temperature, top_p=rollout.top_p,
                                                            max_new_tokens=rollout.max_new_tokens)))
            for env in envs
        }
        self.task_counts = allocate_tasks(rollout.tasks_per_step, [e.config.weight for e in envs])

    def collect(self, step: int) -> RolloutResult:
        """``group_size`` samples of each of step ``step``'s tasks, per environment.

        The tasks and the sampling seed are pure functions of (seed, step), so a resumed run
        samples exactly what an uninterrupted one did.
        """
        seed, group = self.config.trainer.seed, self.config.rollout.group_size
        trajectories: list[Trajectory] = []
        start = time.perf_counter()
        for env, n in zip(self.envs, self.task_counts, strict=True):
            tasks = tasks_for_step(env.train_tasks, n, step, seed, env.name)
            episodes = [EpisodeSpec(task_id=t, seed=None, sample_index=k, category=env.categories.get(t))
                        for t in tasks for k in range(group)]
            engine = self.engines[env.name]
            engine.config.sampling.seed = step_seed(seed, "sampling", env.name, step)
            # Per-step stats; the engine also offsets its seed by its call count, which must
            # restart each step for a resumed run to sample what an uninterrupted one did.
            engine.stats = RolloutStats()
            lo, hi = shard_bounds(len(episodes), *self.shard)
            trajectories += engine.run(episodes[lo:hi], step=step, first_index=lo)
        stats = [e.stats for e in self.engines.values()]
        return RolloutResult(trajectories, time.perf_counter() - start, sum(s.gen_seconds for s in stats),
                             sum(s.generation_calls for s in stats))

    def evaluate(self, horizon: int, step: int) -> dict[str, Any]:
        """Held-out evaluation of the current policy (see :func:`agentgym_core.rl.setup.evaluate`)."""
        return evaluate(self.backend, self.envs, self.config, horizon, step=step)

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        """New policy weights after an update (nothing to do when the backend samples the trainer's module)."""
        if self.receives_weights:
            self.backend.load_weights(state_dict)

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()


def shard_bounds(n: int, index: int, count: int) -> tuple[int, int]:
    """``[lo, hi)`` of the ``index``-th of ``count`` contiguous slices of ``n`` items (sizes differ by <= 1)."""
    return index * n // count, (index + 1) * n // count
