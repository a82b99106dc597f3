"""Memory stays bounded through one server: 2,000 steps and 100 task switches under 1 GB in total."""

from __future__ import annotations

import os
import sys

import pytest
from sciworld_helpers import requires_java, tree_rss_mb

from agentgym_core.http.client import HTTPEnv
from agentgym_core.testing import start_server_process
from agentgym_env_sciworld import task_catalog

pytestmark = [pytest.mark.java, requires_java, pytest.mark.slow]

_ACTIONS = ("look around", "inventory", "open door to kitchen", "go to kitchen", "look at picture", "wait1",
            "fly to the moon", "task")


def test_2000_steps_and_100_task_switches_keep_server_rss_under_1gb():
    train = task_catalog().split("train")
    tasks = train[:: len(train) // 100][:100]  # spread over every family
    assert len(tasks) == 100
    peak = 0.0
    # A real `agentgym serve` process, measured with its JVM children: hosting the server inside
    # this test process would also count whatever else the suite has loaded (torch, models).
    environ = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}
    environ["AGENTGYM_PLUGINS"] = "sciworld"
    server, url = start_server_process(
        [sys.executable, "-m", "agentgym_core.cli", "serve", "sciworld", "--port", "0"], env=environ)
    try:
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
                    peak = max(peak, tree_rss_mb(server.pid))
            while steps < 2000:  # top up to 2,000 steps on the last task, resetting when it ends
                steps += 1
                if env.step(_ACTIONS[steps % len(_ACTIONS)]).done:
                    env.reset(tasks[-1])
            peak = max(peak, tree_rss_mb(server.pid))
        finally:
            env.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(f"server process tree (incl. JVM) peaked at {peak:.0f} MiB")
    assert 100 < peak < 1024, f"server RSS peaked at {peak:.0f} MiB"
