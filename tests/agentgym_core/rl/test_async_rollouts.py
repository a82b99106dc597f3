"""Asynchronous rollouts (rollout.max_staleness): sampling runs ahead of the learner, within the bound."""

from __future__ import annotations

import json
import time

import pytest

from agentgym_core.rl.async_rollouts import AsyncRollouts
from agentgym_core.rl.rollout_worker import RolloutResult
from agentgym_core.rl.trainer import train
from agentgym_core.rollout.trajectory import Trajectory


class CountingWorker:
    """A stand-in rollout worker (no model): one trajectory per step; records the weights it held."""

    def __init__(self) -> None:
        self.weights: int = 0
        self.sampled_with: dict[int, int] = {}

    def collect(self, step: int) -> RolloutResult:
        self.sampled_with[step] = self.weights
        return RolloutResult([Trajectory(env="count", task_id=step)], 0.0, 0.0, 0)

    def load_weights(self, weights: dict, probe: object = None) -> None:
        self.weights = weights["version"]

    def evaluate(self, horizon: int, step: int, *, resumed: bool = False) -> dict:
        return {"weights": self.weights}


def _drive(max_staleness: int, steps: int, update_seconds: float) -> tuple[list[int], CountingWorker]:
    """The training loop's calls: collect a step, 'update' (sleep), publish the next version."""
    worker = CountingWorker()
    rollouts = AsyncRollouts(worker, max_staleness=max_staleness, first_step=0, last_step=steps)
    lags = []
    try:
        for step in range(steps):
            (traj,) = rollouts.collect(step).trajectories
            lags.append(step - traj.policy_version)
            time.sleep(update_seconds)
            rollouts.load_weights({"version": step + 1})
    finally:
        rollouts.stop()
    return lags, worker


@pytest.mark.parametrize("bound", [0, 1, 2])
def test_a_slow_learner_lets_sampling_run_ahead_exactly_up_to_the_bound(bound):
    lags, worker = _drive(bound, steps=6, update_seconds=0.05)
    assert max(lags) == bound  # sampling ran ahead as far as allowed, and never further
    assert all(worker.sampled_with[s] == s - lag for s, lag in enumerate(lags))  # the stamp is the truth


def test_evaluation_uses_the_newest_weights_while_sampling_waits():
    worker = CountingWorker()
    rollouts = AsyncRollouts(worker, max_staleness=1, first_step=0, last_step=3)
    try:
        rollouts.collect(0)
        rollouts.load_weights({"version": 1})
        assert rollouts.evaluate(2, step=1) == {"weights": 1}
    finally:
        rollouts.stop()


def test_evaluation_starts_once_sampling_has_made_every_step_the_weights_allow():
    # Every learner rank evaluates together (collectives), so the steps each rank's thread sampled before the
    # evaluation must not depend on timing: all the published weights allow, never one more.
    class SlowWorker(CountingWorker):
        def collect(self, step: int) -> RolloutResult:
            time.sleep(0.2)  # the evaluation is asked for while the thread is still sampling
            return super().collect(step)

        def evaluate(self, horizon: int, step: int, *, resumed: bool = False) -> dict:
            return {"sampled": sorted(self.sampled_with)}

    rollouts = AsyncRollouts(SlowWorker(), max_staleness=0, first_step=0, last_step=5)
    try:
        rollouts.collect(0)
        rollouts.load_weights({"version": 1})  # step 1 may now be sampled, step 2 may not
        assert rollouts.evaluate(2, step=1) == {"sampled": [0, 1]}
    finally:
        rollouts.stop()


def test_an_error_while_sampling_is_raised_at_the_step_it_broke():
    class Broken(CountingWorker):
        def collect(self, step: int) -> RolloutResult:
            if step == 1:
                raise ConnectionError("env server gone")
            return super().collect(step)

    rollouts = AsyncRollouts(Broken(), max_staleness=1, first_step=0, last_step=3)
    try:
        rollouts.collect(0)
        with pytest.raises(ConnectionError, match="env server gone"):
            rollouts.collect(1)
    finally:
        rollouts.stop()


def test_training_with_max_staleness_1_trains_trajectories_at_most_one_version_old(tmp_path, pm, tiny_config):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    config = tiny_config(tmp_path / "run", **{"trainer.eval_tasks": 0, "rollout.max_staleness": 1})
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_lines = [x for x in lines if x["kind"] == "train"]
    assert len(train_lines) == 3
    assert all(0 <= x["staleness_max"] <= 1 for x in train_lines)
    assert train_lines[0]["staleness_max"] == 0  # the first batch: the initial weights, nothing older exists
    for step in range(3):
        trajs = [json.loads(x) for x in (tmp_path / "run" / "trajectories" / f"step_{step + 1:06d}.jsonl")
                 .read_text().splitlines()]
        assert trajs and all(0 <= step - t["policy_version"] <= 1 for t in trajs)
