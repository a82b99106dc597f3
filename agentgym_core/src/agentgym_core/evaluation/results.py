"""What an evaluation reports: one results shape for `agentgym eval` and the trainer's held-out evaluations.

Definitions (the same as the README's):

* **success** of a trajectory: the environment's success flag at the end (a failed trajectory, e.g. an
  environment crash or timeout, counts as unsuccessful and is reported separately).
* **score** of a trajectory: the environment's raw reward summed over the episode.
* With K samples per task: **Avg@K** is the mean over all K samples of all tasks; **Pass@K** is the mean
  over tasks of the best of its K samples (for success: 1 if any sample succeeded).

:class:`EvalResults` holds the metrics overall, per category and per environment (:class:`GroupMetrics`),
one row per trajectory, failure reasons, timing and the panel hash; `agentgym eval` writes it as
``results.json``, the trainer logs :meth:`EvalResults.trainer_record` (its metric names: ``success``,
``<env>/success``, ..., built by :func:`metric_record`, which also names the rollouts' training metrics).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from agentgym_core.rollout.trajectory import Trajectory, invalid_action_rate

__all__ = ["EvalResults", "GroupMetrics", "build_results", "group_metrics", "metric_record", "summarize"]


class GroupMetrics(BaseModel):
    """Success and score of one group of trajectories (a category, an environment, or all of them)."""

    tasks: int
    samples: int
    success_avg: float = Field(description="Avg@K success rate.")
    success_pass: float = Field(description="Pass@K success rate.")
    score_avg: float = Field(description="Avg@K mean score.")
    score_pass: float = Field(description="Pass@K mean score (best of K per task).")
    failed: int = Field(description="Trajectories ended by an env failure or timeout.")
    truncated: int = Field(0, description="Trajectories cut by the turn or token budget.")
    turns_avg: float = Field(0.0, description="Mean turns per trajectory.")
    invalid_action_rate: float | None = Field(
        default=None, description="Share of turns whose action the environment refused (None: it does not say).")


def group_metrics(trajs: Sequence[Trajectory]) -> GroupMetrics:
    """The metrics of ``trajs`` (zeros for none); those read back from a log have their turns too
    (:func:`agentgym_core.rollout.logs.trajectory_from_log_record`)."""
    by_task: dict[int, list[Trajectory]] = defaultdict(list)
    for traj in trajs:
        by_task[traj.task_id].append(traj)
    n = max(len(trajs), 1)
    k = max(len(by_task), 1)
    return GroupMetrics(
        tasks=len(by_task), samples=len(trajs),
        success_avg=sum(t.success for t in trajs) / n,
        success_pass=sum(any(t.success for t in ts) for ts in by_task.values()) / k,
        score_avg=sum(t.outcome_reward for t in trajs) / n,
        score_pass=sum(max(t.outcome_reward for t in ts) for ts in by_task.values()) / k,
        failed=sum(t.failed for t in trajs),
        truncated=sum(t.truncated or t.truncation_reason is not None for t in trajs),
        turns_avg=sum(t.num_turns for t in trajs) / n,
        invalid_action_rate=invalid_action_rate(list(trajs)),
    )


def _grouped(trajs: Sequence[Trajectory], key: Callable[[Trajectory], str]) -> dict[str, GroupMetrics]:
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in trajs:
        groups[key(traj)].append(traj)
    return {name: group_metrics(members) for name, members in sorted(groups.items())}


def summarize(trajs: Sequence[Trajectory]) -> tuple[GroupMetrics, dict[str, GroupMetrics]]:
    """Overall and per-category metrics of finished trajectories."""
    return group_metrics(trajs), _grouped(trajs, lambda t: t.category or "-")


def metric_record(trajs: Sequence[Trajectory], prefix: str = "") -> dict[str, float]:
    """The trainer's flat metrics, overall and per environment: ``{prefix}success``, ``{prefix}<env>/success``,
    and ``reward`` (Avg@K score), ``turns``, ``failed``, ``truncated`` and, for environments that say which
    actions they refused, ``invalid_action_rate``."""
    return _flat({"": group_metrics(trajs), **{f"{env}/": m for env, m in _grouped(trajs, lambda t: str(t.env)).items()}},
                 prefix)

class EvalResults(BaseModel):
    """The results of one evaluation (`agentgym eval`'s ``results.json``; the trainer's held-out evaluations)."""

    config: dict[str, Any]
    overall: GroupMetrics
    categories: dict[str, GroupMetrics]
    environments: dict[str, GroupMetrics] = Field(default_factory=dict, description="Metrics per environment.")
    per_task: list[dict[str, Any]]
    failure_reasons: dict[str, int]
    timing: dict[str, float]
    trainable: bool = Field(
        default=True, description="False when the backend gave text only (API models): no tokens were recorded."
    )
    panel_hash: str | None = Field(
        default=None, description="Hash of the evaluated task ids (agentgym_core.evaluation.panel.panel_hash): equal "
        "hashes, equal tasks, whatever the number of workers or servers.")
    run_dir: str | None = None
    sampling_setup: dict[str, str] = Field(
        default_factory=dict, description="What the backend sampled on, as it says it (device, dtype, decode engine, "
        "attention kernel; an API backend: the server): the trainer's rollout/* keys.")

    def trainer_record(self) -> dict[str, Any]:
        """The record the trainer logs: its flat metric names, success per ``env:task`` (for
        :mod:`agentgym_core.evaluation.paired`: 0/1 with one sample a task, the task's success rate with K),
        the tasks, the samples per task, the panel hash and the evaluation's wall time."""
        flat = _flat({"": self.overall, **{f"{env}/": m for env, m in self.environments.items()}})
        samples: dict[str, list[int]] = {}
        for row in self.per_task:
            samples.setdefault(f"{row['env']}:{row['task_id']}", []).append(int(row["success"]))
        k = max((len(s) for s in samples.values()), default=1)
        per_task = {task: s[0] if k == 1 else sum(s) / len(s) for task, s in samples.items()}
        return {"tasks": len(samples), "samples_per_task": k, **flat, "per_task": per_task,
                "panel_hash": self.panel_hash, "wall_seconds": self.timing.get("wall_seconds")}


def _flat(groups: dict[str, GroupMetrics], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for name, m in groups.items():
        out[f"{prefix}{name}success"] = m.success_avg
        out[f"{prefix}{name}reward"] = m.score_avg
        out[f"{prefix}{name}turns"] = m.turns_avg
        out[f"{prefix}{name}failed"] = float(m.failed)
        out[f"{prefix}{name}truncated"] = float(m.truncated)
        if m.invalid_action_rate is not None:
            out[f"{prefix}{name}invalid_action_rate"] = m.invalid_action_rate
    return out


def build_results(trajs: Sequence[Trajectory], *, config: dict[str, Any], panel_hash: str,
                  timing: dict[str, float], trainable: bool = True, run_dir: str | None = None,
                  sampling_setup: dict[str, str] | None = None) -> EvalResults:
    """:class:`EvalResults` of ``trajs`` in the panel's order (played now, or read back from a log with their
    turns: :func:`agentgym_core.rollout.logs.trajectory_from_log_record`)."""
    overall, per_category = summarize(trajs)
    failure_reasons: dict[str, int] = {}
    for t in trajs:
        if t.failed:
            key = (t.failure_reason or "").split(":")[0]
            failure_reasons[key] = failure_reasons.get(key, 0) + 1
    per_task = [{"env": t.env, "task_id": t.task_id, "sample_index": t.sample_index, "category": t.category,
                 "success": t.success, "score": t.outcome_reward, "turns": t.num_turns,
                 "invalid_actions": t.invalid_actions, "failed": t.failed, "failure_reason": t.failure_reason,
                 "truncation_reason": t.truncation_reason}
                for t in trajs]
    return EvalResults(config=config, overall=overall, categories=per_category,
                       environments=_grouped(trajs, lambda t: str(t.env)), per_task=per_task,
                       failure_reasons=failure_reasons, timing=timing, trainable=trainable, panel_hash=panel_hash,
                       run_dir=run_dir, sampling_setup=dict(sampling_setup or {}))
