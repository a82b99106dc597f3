"""The environment served over loopback HTTP: conformance, gold-path expert, JVM death.

The AgentGym routes are tested in test_sciworld_agentgym_compat.py.
"""

from __future__ import annotations

import gc
import os
import signal

import pytest
from sciworld_helpers import first_test_task_per_family, requires_java

from agentgym_core.env import EnvError
from agentgym_core.http.client import HTTPEnv
from agentgym_core.plugins import PluginManager
from agentgym_core.testing import check_env_http, serve_env
from agentgym_env_sciworld import POOL, GoldPathExpert, SciWorldEnv, families, task_catalog

pytestmark = [pytest.mark.java, requires_java]


def test_plugin_registers_the_env_by_entry_point():
    manager = PluginManager(autoload=True, allow=["sciworld"])
    assert manager.get("env", "sciworld") is SciWorldEnv


def test_check_env_passes_over_http():
    report = check_env_http(SciWorldEnv, task_ids=task_catalog().split("test")[:1], max_steps=10)
    assert report.episodes[0].first_observation.startswith("Your task is to")


def _play_gold(url: str, task_ids: list[int]) -> dict[int, float]:
    env = HTTPEnv(url)
    expert = GoldPathExpert()
    try:
        return {tid: expert.play(env, tid).score for tid in task_ids}
    finally:
        env.close()


def test_gold_expert_reaches_100_over_http_on_test_tasks_of_two_families():
    short = {"power-component", "lifespan-longest-lived"}  # short gold paths keep this test quick
    picks = [fam.first_task_id + fam.splits["test"][0] for fam in families() if fam.name in short]
    with serve_env(SciWorldEnv, {"include_gold_path": True}) as url:
        scores = _play_gold(url, picks)
    assert scores == {tid: 100.0 for tid in picks}


@pytest.mark.slow
def test_gold_expert_reaches_100_over_http_on_a_test_task_of_every_family():
    picks = first_test_task_per_family()
    assert len(picks) == 23 and set(picks) <= set(task_catalog().split("test")) | set(task_catalog().split("test_extra"))
    with serve_env(SciWorldEnv, {"include_gold_path": True}) as url:
        scores = _play_gold(url, picks)
    assert scores == {tid: 100.0 for tid in picks}


def test_killing_one_jvm_fails_only_its_instance_and_the_server_keeps_serving():
    with serve_env(SciWorldEnv) as url:
        victim, survivor = HTTPEnv(url), HTTPEnv(url)
        try:
            victim.reset(0)
            survivor.reset(30)
            pids = [pid for pid in _jvm_children() if pid not in POOL.idle_pids()]
            assert len(pids) >= 2
            target = _jvm_of_instance(url, victim, pids)
            os.kill(target, signal.SIGKILL)
            with pytest.raises(EnvError, match=rf"JVM \(pid {target}\)"):
                victim.step("look around")
            assert survivor.step("look around").info["valid_action"]
            # the victim's instance recovers on reset with a fresh JVM
            assert victim.reset(0).observation.startswith("Your task")
            assert victim.step("look around").info["valid_action"]
        finally:
            victim.close()
            survivor.close()


def _jvm_children() -> list[int]:
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{entry}/cmdline") as f:
                    cmd = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me and "scienceworld" in cmd:
                out.append(int(entry))
    return out


def _jvm_of_instance(url: str, env: HTTPEnv, candidates: list[int]) -> int:
    """The JVM serving ``env``: the server's Env objects know their own simulator pid."""
    # serve_env runs the server in this process, so its Env objects are reachable here; the victim
    # was reset onto task 0 (boil), the survivor onto task 30 (melt)
    for obj in gc.get_objects():
        if (isinstance(obj, SciWorldEnv) and obj.simulator_pid() in candidates
                and obj._task is not None and obj._task.task_id == 0):
            return obj.simulator_pid()
    raise AssertionError("could not find the victim's simulator")
