"""rl.batch's trainable trajectories: episodes an environment error or timeout ended stay out of the loss
(and are counted), in the trainer too."""

from __future__ import annotations

import json
import time

import pytest

from agentgym_core import hookimpl
from agentgym_core.recipes import ConfigError
from agentgym_core.rl.batch import trainable_trajectories
from agentgym_core.rl.config import load_config
from agentgym_core.rollout.trajectory import Trajectory


def _traj(task_id: int, *, failed: bool = False, sampled: int = 2) -> Trajectory:
    return Trajectory(env="word", task_id=task_id, token_ids=[1, 2, 3, 4], loss_mask=[0, 0] + [1] * sampled
                      + [0] * (2 - sampled), logprobs=[0.0] * 4, failed=failed,
                      failure_reason="env_error: step raised RuntimeError: boom" if failed else None)


def test_trainable_trajectories_leaves_out_and_counts_infra_failures():
    trajs = [_traj(0), _traj(1, failed=True), _traj(2, sampled=0), _traj(3), _traj(4, failed=True, sampled=0)]
    kept, infra_failed = trainable_trajectories(trajs)
    assert [t.task_id for t in kept] == [0, 3]  # order kept; failed and empty rows gone
    assert infra_failed == 2  # both failed ones counted, the empty-but-healthy one not


def test_env_timeout_s_is_a_recipe_key_with_the_anchors_default():
    config = load_config(None, ["envs=[{name: x}]"])
    assert config.rollout.env_timeout_s == 600.0
    assert load_config(None, ["envs=[{name: x}]", "rollout.env_timeout_s=5"]).rollout.env_timeout_s == 5.0
    with pytest.raises(ConfigError, match="env_timeout_s"):
        load_config(None, ["envs=[{name: x}]", "rollout.env_timeout_s=0"])


def _flaky_plugin():
    """WordEnv whose step crashes on tasks 1, 5, ... and hangs for 3 s on tasks 3, 7, ... (a real server)."""
    from word_env import WordEnv

    class FlakyWordEnv(WordEnv):
        name = "flaky"

        def reset(self, task_id, seed=None):
            self.task_id = task_id
            return super().reset(task_id, seed)

        def step(self, action):
            if self.task_id % 4 == 1:
                raise RuntimeError("simulated environment crash")
            if self.task_id % 4 == 3:
                time.sleep(3.0)  # longer than the run's rollout.env_timeout_s
            return super().step(action)

    class FlakyPlugin:
        @hookimpl
        def agentgym_register_envs(self, register) -> None:
            register("flaky", FlakyWordEnv, summary="test env that crashes or hangs on some tasks")

    return FlakyPlugin()


def test_trainer_leaves_env_errors_and_timeouts_out_of_the_loss(tmp_path, tiny_config):
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pm = PluginManager(autoload=True, allow=["estimators", "transformers"])
    pm.register(_flaky_plugin(), "flaky-test")
    model, tokenizer = tiny_chat_model(seed=0)
    config = tiny_config(tmp_path / "run", **{
        "envs": "[{name: flaky, max_concurrency: 8, train_tasks: [0, 1, 2, 3]}]",
        "rollout.tasks_per_step": 4, "rollout.group_size": 2, "rollout.env_timeout_s": 0.5,
        "trainer.steps": 1, "trainer.eval_tasks": 0,
    })
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    line = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    # 2 crashes + 2 timeouts (the 3 s step outlives env_timeout_s=0.5), each re-run once
    # (rollout.rerun_failed=1) and failing again: all 8 failed attempts kept and counted.
    assert line["trajectories"] == 12 and line["reruns"] == 4 and line["failed_after_reruns"] == 4
    assert line["infra_failed"] == 8
    assert line["trained_trajectories"] == 4
    trajs = [json.loads(x) for x in (tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    failed = [t for t in trajs if t["failed"]]
    assert sorted(t["task_id"] for t in failed) == [1, 1, 1, 1, 3, 3, 3, 3]
    assert {t["failure_reason"].split(":")[0] for t in failed} == {"env_error", "timeout"}
    assert all("advantages" not in t for t in failed)  # never trained
    assert all("advantages" in t for t in trajs if not t["failed"])
