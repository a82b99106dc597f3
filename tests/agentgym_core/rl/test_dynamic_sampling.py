"""Dynamic sampling: more rounds of tasks until enough groups have differing rewards; tied groups left out."""

from __future__ import annotations

import json

from agentgym_core import hookimpl
from agentgym_core.env import Env, EpisodeEndedError, ResetResult, StepResult, TaskCatalog
from agentgym_core.rl.config import DynamicSamplingConfig
from agentgym_core.rl.dynamic_sampling import collect_with_signal, count_mixed_groups, mixed_groups_only
from agentgym_core.rl.rollout_worker import RolloutResult
from agentgym_core.rollout.trajectory import Trajectory


def _traj(task: int, reward: float, failed: bool = False) -> Trajectory:
    return Trajectory(env="e", task_id=task, outcome_reward=reward, failed=failed)


def test_mixed_groups_are_those_with_differing_rewards():
    trajs = [_traj(0, 1.0), _traj(0, 0.0), _traj(1, 1.0), _traj(1, 1.0), _traj(2, 0.0), _traj(2, 1.0, failed=True)]
    assert count_mixed_groups(trajs) == (1, 3)  # task 2's only differing sample failed (infrastructure)
    assert [t.task_id for t in mixed_groups_only(trajs)] == [0, 0]


def test_rounds_stop_at_enough_mixed_groups_or_the_limit():
    plan = {0: [_traj(0, 1.0), _traj(0, 1.0)], 1: [_traj(1, 0.0), _traj(1, 1.0)], 2: [_traj(2, 0.0), _traj(2, 1.0)]}
    calls: list[int] = []

    def collect(r: int) -> RolloutResult:
        calls.append(r)
        return RolloutResult(plan[r], seconds=1.0, generation_seconds=0.5, generation_calls=2)

    out = collect_with_signal(collect, DynamicSamplingConfig(min_mixed_groups=1, max_rounds=3))
    assert calls == [0, 1]
    assert out.metrics == {"sampling_rounds": 2.0, "mixed_groups": 1.0, "sampled_groups": 2.0}  # rounds report none
    assert (out.seconds, out.generation_calls, len(out.trajectories)) == (2.0, 4, 4)

    calls.clear()
    out = collect_with_signal(collect, DynamicSamplingConfig(min_mixed_groups=5, max_rounds=2))
    assert calls == [0, 1] and out.metrics["mixed_groups"] == 1.0  # the limit wins; the step trains what it has

    calls.clear()
    out = collect_with_signal(collect, DynamicSamplingConfig())  # off: one round
    assert calls == [0] and len(out.trajectories) == 2


def test_a_steps_worker_restarts_add_up_over_its_rounds_and_the_total_is_the_last_rounds():
    restarts = {0: (1.0, 1.0), 1: (0.0, 1.0), 2: (2.0, 3.0)}  # (this round's, running total) from the Ray workers

    def collect(r: int) -> RolloutResult:
        metrics = {"rollout_worker_restarts": restarts[r][0], "rollout_worker_restarts_total": restarts[r][1]}
        return RolloutResult([_traj(r, 1.0), _traj(r, 1.0)], seconds=1.0, generation_seconds=0.5,
                             generation_calls=2, metrics=metrics)

    out = collect_with_signal(collect, DynamicSamplingConfig(min_mixed_groups=1, max_rounds=3))  # all tie: 3 rounds
    assert out.metrics["rollout_worker_restarts"] == 3.0
    assert out.metrics["rollout_worker_restarts_total"] == 3.0


class HalfTiedEnv(Env):
    """Even tasks pay 1 whatever the reply (their groups always tie); odd ones pay by the reply's length parity."""

    name = "halftied"

    def __init__(self) -> None:
        self.task, self.done = 0, True

    @property
    def instruction(self) -> str:
        return "Reply with Action: <anything>"

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskCatalog(splits={"train": list(range(8)), "test": [8, 9]})

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        self.task, self.done = task_id, False
        return ResetResult(observation="Go.")

    def step(self, action: str) -> StepResult:
        if self.done:
            raise EpisodeEndedError("episode over")
        self.done = True
        reward = 1.0 if self.task % 2 == 0 else float(len(action) % 2)
        return StepResult(observation="ok", reward=reward, terminated=True, success=reward > 0)


class _Plugin:
    @hookimpl
    def agentgym_register_envs(self, register) -> None:
        register("halftied", HalfTiedEnv, summary="test env")


def test_trainer_trains_only_mixed_groups_and_logs_the_rounds(tmp_path, tiny_config):
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pm = PluginManager(autoload=True, allow=["estimators", "transformers"])
    pm.register(_Plugin(), "halftied-test")
    model, tokenizer = tiny_chat_model(seed=0)
    config = tiny_config(tmp_path / "run", **{
        "envs": "[{name: halftied, max_concurrency: 8}]", "rollout.tasks_per_step": 2, "rollout.group_size": 3,
        "rollout.dynamic_sampling.min_mixed_groups": 2, "rollout.dynamic_sampling.max_rounds": 3,
        "trainer.steps": 2, "trainer.eval_tasks": 0, "algorithm.rounds_ctrl.rounds": 1,
    })
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    logged = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for step, line in enumerate(logged, start=1):
        assert 1 <= line["sampling_rounds"] <= 3
        assert line["trajectories"] == 6 * line["sampling_rounds"]  # every round's samples are logged
        if line["mixed_groups"] < 2:
            assert line["sampling_rounds"] == 3  # stopped by the limit, not early
        trajs = [json.loads(x) for x in
                 (tmp_path / "run" / "trajectories" / f"step_{step:06d}.jsonl").read_text().splitlines()]
        trained = [t for t in trajs if "advantages" in t]
        assert line["trained_trajectories"] == len(trained)
        assert all(t["task_id"] % 2 == 1 for t in trained)  # even tasks always tie: never trained
        by_task: dict[int, set[float]] = {}
        for t in trained:
            by_task.setdefault(t["task_id"], set()).add(t["outcome_reward"])
        assert all(len(rewards) > 1 for rewards in by_task.values())
        assert len(by_task) == line["mixed_groups"]
