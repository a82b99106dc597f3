"""JVM lifecycle: heap cap, pooling, recycling and recovery from a dead JVM."""

from __future__ import annotations

import os
import signal

import pytest
from sciworld_helpers import requires_java

from agentgym_env_sciworld import POOL, SciWorldEnv, SimulatorDiedError
from agentgym_env_sciworld.simulator import java_options

pytestmark = [pytest.mark.java, requires_java]


def test_heap_is_capped_unless_the_user_set_one(monkeypatch):
    monkeypatch.delenv("JAVA_TOOL_OPTIONS", raising=False)
    assert java_options("512m") == ["-Xmx512m"]
    assert java_options(None) == []
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xmx2g -Dfoo=1")
    assert java_options("512m") == []


def test_started_jvm_runs_with_the_heap_cap(env):
    env.reset(0)
    with open(f"/proc/{env.simulator_pid()}/cmdline") as f:
        args = f.read().split("\0")
    assert "-Xmx512m" in args or "-Xmx" in os.environ.get("JAVA_TOOL_OPTIONS", "")


def test_closed_instances_hand_their_warm_jvm_to_the_next(env):
    env.reset(0)
    pid = env.simulator_pid()
    env.close()
    other = SciWorldEnv()
    try:
        other.reset(30)
        assert other.simulator_pid() == pid
    finally:
        other.close()


def test_recycling_thresholds_on_a_live_jvm(env):
    env.reset(0)
    sim = env._sim
    assert sim.needs_recycling(max_episodes=sim.episodes, max_rss_mb=None)
    assert not sim.needs_recycling(max_episodes=sim.episodes + 1, max_rss_mb=None)
    assert sim.needs_recycling(max_episodes=None, max_rss_mb=1.0)  # every JVM is above 1 MiB
    assert not sim.needs_recycling(max_episodes=None, max_rss_mb=1e6)


def test_reset_replaces_a_jvm_past_its_episode_budget(env):
    env.reset(0)
    pid = env.simulator_pid()
    env.reset(1)
    assert env.simulator_pid() == pid  # the default budget (500 episodes) is far away
    env.config = env.config.model_copy(update={"recycle_after_episodes": 1})
    env.reset(2)
    assert env.simulator_pid() != pid
    assert not os.path.exists(f"/proc/{pid}") or _is_zombie(pid)
    assert env.step("look around").info["valid_action"]


def test_dead_jvm_gives_a_clear_error_then_reset_recovers():
    env = SciWorldEnv()
    try:
        env.reset(0)
        pid = env.simulator_pid()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(SimulatorDiedError, match=rf"JVM \(pid {pid}\).*reset the environment"):
            env.step("look around")
        recovered = env.reset(0)
        assert env.simulator_pid() != pid and recovered.observation.startswith("Your task")
        assert env.step("look around").info["valid_action"]
    finally:
        env.close()
    assert pid not in POOL.idle_pids()


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True

