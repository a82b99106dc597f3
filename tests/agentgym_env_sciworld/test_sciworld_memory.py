"""Memory stays bounded through one server: 2,000 steps and 100 task switches under 1 GB in total."""

from __future__ import annotations

import pytest
from sciworld_helpers import requires_java, tree_rss_mb

from agentgym_core.client import HTTPEnv
from agentgym_core.testing import serve_env
from agentgym_env_sciworld import SciWorldEnv, task_catalog

pytestmark = [pytest.mark.java, requires_java, pytest.mark.slow]

_ACTIONS = ("look around", "inventory", "open door to kitchen", "go to kitchen", "look at picture", "wait1",
            "fly to the moon", "task")


def test_2000_steps_and_100_task_switches_keep_server_rss_under_1gb():
    train = task_catalog().split("train")
    tasks = train[:: len(train) // 100][:100]  # spread over every family
    assert len(tasks) == 100
    peak = 0.0
    with serve_env(SciWorldEnv) as url:
        env = HTTPEnv(url)
        try:
            steps = 0
            for switch, task_id in enumerate(tasks):
                env.reset(task_id)
                for i in range(20):
                    steps += 1
                    if env.step(_ACTIONS[(switch + i) % len(_ACTIONS)]).done:
                        break
                if switch % 10 == 9:
                    peak = max(peak, tree_rss_mb())
            while steps < 2000:  # top up to 2,000 steps on the last task, resetting when it ends
                steps += 1
                if env.step(_ACTIONS[steps % len(_ACTIONS)]).done:
                    env.reset(tasks[-1])
            peak = max(peak, tree_rss_mb())
        finally:
            env.close()
    # this test process hosts the server and its JVM(s): its whole process tree is the server's RSS
    assert peak < 1024, f"server RSS peaked at {peak:.0f} MiB"
