"""The environment served over HTTP by the core server: conformance, agents, concurrency, crashes."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from webarena_helpers import solve_navigation_task, solve_shop_price_task

from agentgym_core.http.client import HTTPEnv
from agentgym_core.testing import check_env_http, serve_env
from agentgym_env_webarena import BrowserConfig, BrowserPool, LocalWebArenaEnv

pytestmark = pytest.mark.browser


def _policy(env, step, observation):
    return ["```scroll [down]```", "no action here", "```stop [N/A]```"][step]


def test_check_env_over_http_plays_the_same_episodes():
    report = check_env_http(LocalWebArenaEnv, {}, task_ids=[0, 2], policy=_policy)
    assert [len(e.steps) for e in report.episodes] == [3, 3]


@pytest.fixture(scope="module")
def server():
    with serve_env(LocalWebArenaEnv, max_instances=16) as url:
        yield url


def test_scripted_agents_solve_shop_and_navigation_tasks_through_the_client(server):
    env = HTTPEnv(server)
    try:
        shop = solve_shop_price_task(env)
        assert (shop.reward, shop.success) == (1.0, True)
        nav = solve_navigation_task(env)
        assert (nav.reward, nav.success) == (1.0, True)
        assert solve_shop_price_task(env, answer="$1.00").reward == 0.0
    finally:
        env.close()


def test_eight_concurrent_instances_share_one_browser(server):
    pool = BrowserPool.shared(BrowserConfig())
    envs = [HTTPEnv(server) for _ in range(8)]

    def play(index):
        env = envs[index]
        return solve_shop_price_task(env) if index % 2 == 0 else solve_navigation_task(env)

    try:
        with ThreadPoolExecutor(8) as workers:
            results = list(workers.map(play, range(8)))
        assert [r.reward for r in results] == [1.0] * 8
        pids = {pool.browser_pid()}
        assert len(pids) == 1 and None not in pids
    finally:
        for env in envs:
            env.close()


def test_a_killed_browser_is_replaced_and_the_next_episode_works(server):
    pool = BrowserPool.shared(BrowserConfig())
    env = HTTPEnv(server)
    try:
        env.reset(0)
        pid = pool.browser_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 10
        while pool.is_current(pool.generation) and time.time() < deadline:
            time.sleep(0.05)
        lost = env.step("```scroll [down]```")
        assert lost.truncated and lost.info["error"] == "browser_lost"
        result = solve_shop_price_task(env)  # reset relaunches the browser
        assert result.reward == 1.0
        assert pool.browser_pid() not in (None, pid)
        assert requests.get(f"{server}/v1/health", timeout=5).status_code == 200  # the server stayed up
    finally:
        env.close()


def test_agentgym_legacy_routes(server):
    created = requests.post(f"{server}/create", timeout=30).json()
    env_idx = created["env_idx"]
    reset = requests.post(f"{server}/reset", json={"env_idx": env_idx, "seed": 0, "idx": 2}, timeout=30).json()
    assert "OBJECTIVE: Open the gardening forum" in reset["observation"] and set(reset) == {"observation"}
    step = requests.post(f"{server}/step", json={"env_idx": env_idx, "action": "```stop [N/A]```"}, timeout=30).json()
    assert step["terminated"] is True and step["reward"] == 0.0
    assert {"truncated", "info"} <= set(step)
    requests.post(f"{server}/close", json={"env_idx": env_idx}, timeout=30)
