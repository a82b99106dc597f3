"""TextCraft served over HTTP: conformance, the expert through the client, AgentGym's routes, memory."""

from __future__ import annotations

import gc

import pytest
import requests

from agentgym_core.http.client import HTTPEnv
from agentgym_core.testing import check_env_http, serve_env
from agentgym_env_textcraft import TextCraftEnv, plan_actions, solve
from agentgym_env_textcraft.agentgym_style import agentgym_recipes
from agentgym_env_textcraft.tasks import goals


@pytest.fixture(scope="module")
def server_url():
    with serve_env(TextCraftEnv) as url:
        yield url


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def test_check_env_http():
    report = check_env_http(TextCraftEnv)
    assert report.catalog.sizes() == {"train": 444, "test": 100}


def test_expert_solves_every_test_task_through_the_http_client(server_url):
    env = HTTPEnv(server_url, env="textcraft")
    try:
        results = [solve(env, task, seed=0) for task in TextCraftEnv.tasks().split("test")]
    finally:
        env.close()
    assert [r.task_id for r in results if not r.success] == []
    local = TextCraftEnv()
    # The remote episodes are the local ones: same number of actions for the same (task, seed).
    assert [r.steps for r in results] == [solve(local, r.task_id, seed=0).steps for r in results]


def test_agentgym_legacy_routes(server_url):
    """AgentGym's TextCraft client talks {id, data_idx} / {id, action} and reads observation/reward/done."""
    session = requests.Session()
    created = session.post(f"{server_url}/create", json={}).json()
    instance = created["id"]
    # As AgentGym's server: /create already reset the instance onto task index = its id.
    assert list(created) == ["id", "observation", "done", "reward"] and created["observation"].startswith("Crafting")
    task = agentgym_recipes().goals.index("minecraft:stick")  # AgentGym's data_idx of the stick
    reset = session.post(f"{server_url}/reset", json={"id": instance, "data_idx": task}).json()
    assert reset["observation"].endswith("Goal: craft stick.") and reset["done"] is False
    assert session.get(f"{server_url}/observation", params={"id": instance}).json() == reset["observation"]
    answer = {}
    for action in plan_actions(reset["observation"]):
        answer = session.post(f"{server_url}/step", json={"id": instance, "action": action}).json()
    assert set(answer) == {"observation", "reward", "done"}
    assert answer["reward"] == 1.0 and answer["done"] is True
    wrapped = session.post(f"{server_url}/reset", json={"id": instance, "data_idx": task + 544}).json()
    assert wrapped["observation"] == reset["observation"]  # indices wrap modulo the 544 goals
    bad = session.post(f"{server_url}/reset", json={"id": instance, "data_idx": "stick"})
    assert bad.status_code == 200 and "must be an integer" in bad.json()["error"]
    assert session.post(f"{server_url}/close", json={"id": instance}).json() is True


def test_memory_stays_flat_in_process():
    """2,000 full expert episodes on one instance: RSS grows < 5% (the package's reset leaked)."""
    env = TextCraftEnv()
    all_goals = goals()
    for goal in all_goals:  # fill the per-goal caches (bounded: one entry per goal)
        solve(env, goal.task_id, seed=0)
    gc.collect()
    before = _rss_kib()
    for i in range(2000):
        assert solve(env, all_goals[i % len(all_goals)].task_id, seed=i).success
    gc.collect()
    assert _rss_kib() < before * 1.05, f"RSS grew from {before} KiB to {_rss_kib()} KiB"


@pytest.mark.slow
def test_memory_stays_flat_through_one_server():
    """2,000 episodes through one server (reset + 2 actions each): RSS grows < 10%."""
    all_goals = goals()
    local = TextCraftEnv()
    plans = {g.task_id: plan_actions(local.reset(g.task_id, seed=0).observation)[:2] for g in all_goals}
    with serve_env(TextCraftEnv, {"max_steps": 2}) as url:
        env = HTTPEnv(url, env="textcraft")

        def episodes(count: int, offset: int) -> int:
            ended = 0
            for i in range(offset, offset + count):
                task = all_goals[i % len(all_goals)].task_id
                env.reset(task, seed=0)
                for action in plans[task]:
                    result = env.step(action)
                ended += result.done
            return ended

        episodes(300, 0)  # warm up: connection pool, per-goal caches, allocator arenas
        gc.collect()
        before = _rss_kib()
        assert episodes(2000, 300) == 2000
        gc.collect()
        after = _rss_kib()
        env.close()
    assert after < before * 1.10, f"RSS grew from {before} KiB to {after} KiB over 2,000 episodes"
