"""Long-run memory: episodes through the server must not grow its memory or the browser's.

A short version of `bench/webarena_soak.py` (1,000 episodes, bench/results/soak_webarena.json): the
direct leak check is that the browser never holds more contexts or pages than there are live
instances, and none once they close; memory after the warm-up stays within 20%.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from webarena_helpers import element_id

from agentgym_core.http.client import HTTPEnv
from agentgym_core.testing import serve_env
from agentgym_env_webarena import BrowserConfig, BrowserPool, LocalWebArenaEnv

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EPISODES = 60
WARMUP = 20


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _open_contexts_and_pages(pool: BrowserPool) -> tuple[int, int]:
    async def count() -> tuple[int, int]:
        browser, _ = await pool.browser()
        return len(browser.contexts), sum(len(context.pages) for context in browser.contexts)
    return pool.run(count(), timeout=30)


def _episode(env: HTTPEnv, index: int) -> float:
    if index % 2:
        obs = env.reset(2).observation
        env.step(f"```click [{element_id(obs, 'link', 'gardening')}]```")
        return env.step("```stop []```").reward
    obs = env.reset(0).observation
    env.step(f"```type [{element_id(obs, 'searchbox', 'Search products')}] [lamp] [1]```")
    return env.step("```stop [$0.01]```").reward


def test_episodes_keep_browser_contexts_bounded_and_memory_flat():
    pool = BrowserPool.shared(BrowserConfig())
    before = _open_contexts_and_pages(pool)  # an earlier test in this worker may have left instances open
    with serve_env(LocalWebArenaEnv, max_instances=8) as url:
        envs = [HTTPEnv(url) for _ in range(2)]

        def run(indices):
            return [_episode(envs[i % 2], i) for i in indices]

        try:
            with ThreadPoolExecutor(2) as workers:
                list(workers.map(run, [range(0, WARMUP, 2), range(1, WARMUP, 2)]))
                server_before, browser_before = _rss(), pool.browser_rss_bytes()
                rewards = sum(workers.map(run, [range(WARMUP, EPISODES, 2), range(WARMUP + 1, EPISODES, 2)]), [])
            server_after, browser_after = _rss(), pool.browser_rss_bytes()
            while_open = _open_contexts_and_pages(pool)
        finally:
            for env in envs:
                env.close()
        after_close = _open_contexts_and_pages(pool)
    assert rewards.count(1.0) == (EPISODES - WARMUP) // 2  # every navigation episode solved, no answer passes
    # one context with one page per live instance after all the episodes; closing an instance closes them
    assert while_open == (before[0] + 2, before[1] + 2)
    assert after_close == before
    growth = server_after / server_before - 1
    browser_growth = browser_after / browser_before - 1
    print(f"server RSS {server_before / 2**20:.0f} -> {server_after / 2**20:.0f} MiB ({growth:+.1%}); "
          f"browser RSS {browser_before / 2**20:.0f} -> {browser_after / 2**20:.0f} MiB ({browser_growth:+.1%})")
    assert growth < 0.20
    assert browser_growth < 0.20
