"""Dynamic sampling: a step keeps sampling fresh tasks until enough groups carry signal.

Under group-relative estimators a group (the samples of one task) whose rewards are all equal has
zero advantage: it cost its rollouts and teaches nothing. With a small policy, most groups are
tied (all failed on hard tasks, all solved on easy ones), and a step can end with one mixed group
or none. :func:`collect_with_signal` samples rounds of the step's usual task count until
``min_mixed_groups`` groups have differing rewards or ``max_rounds`` rounds are spent;
:func:`mixed_groups_only` then keeps those groups for the update (DAPO, Yu et al. 2025).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agentgym_core.rl.config import DynamicSamplingConfig
from agentgym_core.rl.rollout_worker import RolloutResult
from agentgym_core.rollout.trajectory import Trajectory

if TYPE_CHECKING:
    from agentgym_core.rl.guards import SyncExpectation
    from agentgym_core.rl.roles import PlacedRollouts

__all__ = ["SignalSampling", "collect_with_signal", "count_mixed_groups", "mixed_groups_only"]


def _groups(trajectories: Sequence[Trajectory]) -> dict[tuple[str, int], list[Trajectory]]:
    groups: dict[tuple[str, int], list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[(t.env, t.task_id)].append(t)
    return groups


def _is_mixed(group: Sequence[Trajectory]) -> bool:
    """Samples whose scores (summed rewards, what GRPO compares) are not all equal; failed ones excluded."""
    scores = {t.outcome_reward for t in group if not t.failed}
    return len(scores) > 1


def count_mixed_groups(trajectories: Sequence[Trajectory]) -> tuple[int, int]:
    """(groups with differing rewards, all groups) among ``trajectories``."""
    groups = _groups(trajectories)
    return sum(_is_mixed(g) for g in groups.values()), len(groups)


def mixed_groups_only(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """The trajectories of groups with differing rewards, in their order."""
    mixed = {key for key, g in _groups(trajectories).items() if _is_mixed(g)}
    return [t for t in trajectories if (t.env, t.task_id) in mixed]


def collect_with_signal(collect: Callable[[int], RolloutResult], config: DynamicSamplingConfig) -> RolloutResult:
    """Call ``collect(round)`` for rounds 0, 1, ... until ``config.min_mixed_groups`` groups are mixed.

    Returns every trajectory sampled (logs and success rates see them all) with the rounds' times
    summed, and in ``metrics``: the rounds' own metrics (re-runs and restarts summed),
    ``sampling_rounds``, ``mixed_groups`` and ``sampled_groups``. A task
    drawn again in a later round joins its earlier samples' group (the same task id), which only
    makes the group larger. Off (``min_mixed_groups == 0``): one round, as without this module.
    """
    results = [collect(0)]
    trajectories = list(results[0].trajectories)
    mixed, total = count_mixed_groups(trajectories)
    while mixed < config.min_mixed_groups and len(results) < config.max_rounds:
        results.append(collect(len(results)))
        trajectories += results[-1].trajectories
        mixed, total = count_mixed_groups(trajectories)
    return RolloutResult(
        trajectories=trajectories,
        seconds=sum(r.seconds for r in results),
        generation_seconds=sum(r.generation_seconds for r in results),
        generation_calls=sum(r.generation_calls for r in results),
        metrics={**_merge_metrics([r.metrics for r in results]), "sampling_rounds": float(len(results)),
                 "mixed_groups": float(mixed), "sampled_groups": float(total)},
    )


_SUMMED = ("reruns", "failed_after_reruns", "rollout_worker_restarts")


def _merge_metrics(rounds: list[dict[str, float]]) -> dict[str, float]:
    """The rounds' own metrics as one step's: counts of re-runs and worker restarts summed, the rest as the
    last round left them."""
    merged: dict[str, float] = {}
    for metrics in rounds:
        for key, value in metrics.items():
            merged[key] = merged.get(key, 0.0) + value if key in _SUMMED else value
    return merged


class SignalSampling:
    """A rollout worker whose ``collect(step)`` samples rounds until enough groups are mixed.

    Wraps anything with ``collect(step, sampling_round)`` (the local worker, the Ray rollout group)
    and passes every other call through, so asynchronous rollouts can wrap it in turn: the extra
    rounds then run in the sampling thread, ahead of the learner like the rest.
    """

    def __init__(self, worker: PlacedRollouts, config: DynamicSamplingConfig) -> None:
        self.worker, self.config = worker, config

    @property
    def receives_weights(self) -> bool:
        return self.worker.receives_weights

    def collect(self, step: int) -> RolloutResult:
        return collect_with_signal(lambda sampling_round: self.worker.collect(step, sampling_round), self.config)

    def load_weights(self, weights: Any, probe: SyncExpectation | None = None) -> None:
        self.worker.load_weights(weights, probe)

    def evaluate(self, horizon: int, step: int, *, resumed: bool = False) -> dict[str, Any]:
        return self.worker.evaluate(horizon, step, resumed=resumed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.worker, name)
