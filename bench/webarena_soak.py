"""Soak the WebArena env server: many episodes through it, the server's and Chromium's memory sampled.

The core's HTTP server runs in this process on loopback (as `agentgym serve webarena_local` would),
with the shared browser pool behind it; two clients play scripted episodes in turn (the shop task:
search, then a wrong answer, reward 0; the forum task: open the forum, stop, reward 1). Every
--every episodes it records this process's RSS, the browser's (its process and all children:
renderers, GPU, utility) and how many browser contexts and pages are open. Flat memory and a
context count that never exceeds the live instances mean nothing leaks per episode.

    python bench/webarena_soak.py --episodes 1000 --every 100

The suite's `test_webarena_memory.py` calls `soak()` for a short version (20 + 40 episodes) and
checks the same figures; this script is the long measurement. Results: bench/results/soak_webarena.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import write_json

from agentgym_core.http.client import HTTPEnv
from agentgym_core.testing import serve_env
from agentgym_env_webarena import BrowserConfig, BrowserPool, LocalWebArenaEnv

CLIENTS = 2


def process_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def element_id(observation: str, role: str, name: str) -> int:
    match = re.search(rf"\[(\d+)\] {re.escape(role)} ['\"]{re.escape(name)}['\"]", observation)
    if match is None:
        raise RuntimeError(f"no {role} {name!r} in the observation:\n{observation}")
    return int(match.group(1))


def play_episode(env: HTTPEnv, index: int) -> float:
    """Odd episodes: the forum task, solved (reward 1). Even ones: the shop task, answered wrong (0)."""
    if index % 2:
        obs = env.reset(2).observation
        env.step(f"```click [{element_id(obs, 'link', 'gardening')}]```")
        return env.step("```stop []```").reward
    obs = env.reset(0).observation
    env.step(f"```type [{element_id(obs, 'searchbox', 'Search products')}] [lamp] [1]```")
    return env.step("```stop [$0.01]```").reward


def open_contexts_and_pages(pool: BrowserPool) -> tuple[int, int]:
    """How many browser contexts, and pages over all of them, the shared browser holds now."""
    async def count() -> tuple[int, int]:
        browser, _ = await pool.browser()
        return len(browser.contexts), sum(len(context.pages) for context in browser.contexts)
    return pool.run(count(), timeout=30)


def soak(episodes: int, *, warmup: int = 20, every: int = 100) -> dict:
    """Play ``warmup`` episodes, then ``episodes`` more, sampling memory and open contexts every ``every``."""
    pool = BrowserPool.shared(BrowserConfig())
    before = open_contexts_and_pages(pool)  # another user of this process's browser may hold instances
    samples, rewards = [], []
    with serve_env(LocalWebArenaEnv, max_instances=8) as url:
        envs = [HTTPEnv(url) for _ in range(CLIENTS)]

        def play(indices: range) -> list[float]:
            return [play_episode(envs[i % CLIENTS], i) for i in indices]

        def play_block(first: int, count: int) -> list[float]:
            with ThreadPoolExecutor(CLIENTS) as workers:
                shares = [range(first + c, first + count, CLIENTS) for c in range(CLIENTS)]
                return sum(workers.map(play, shares), [])

        try:
            play_block(0, warmup)
            start = time.monotonic()
            done = 0
            while True:
                contexts, pages = open_contexts_and_pages(pool)
                samples.append({"episode": done, "server_rss_mb": round(process_rss_bytes() / 2**20, 1),
                                "browser_rss_mb": round(pool.browser_rss_bytes() / 2**20, 1),
                                "contexts": contexts, "pages": pages, "seconds": round(time.monotonic() - start, 1)})
                print(samples[-1], flush=True)
                if done >= episodes:
                    break
                block = min(every, episodes - done)
                rewards += play_block(warmup + done, block)
                done += block
        finally:
            for env in envs:
                env.close()
        after_close = open_contexts_and_pages(pool)
    first, last = samples[0], samples[-1]
    return {
        "episodes": episodes, "warmup": warmup, "clients": CLIENTS,
        "solved": rewards.count(1.0), "expected_solved": sum(1 for i in range(warmup, warmup + episodes) if i % 2),
        "samples": samples, "contexts_and_pages_before": list(before), "contexts_and_pages_after_close": list(after_close),
        "server_rss_growth_pct": round(100 * (last["server_rss_mb"] / first["server_rss_mb"] - 1), 2),
        "browser_rss_growth_pct": round(100 * (last["browser_rss_mb"] / first["browser_rss_mb"] - 1), 2),
        "minutes": round(last["seconds"] / 60, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1000, help="episodes after the warm-up")
    parser.add_argument("--warmup", type=int, default=20, help="episodes before the first sample")
    parser.add_argument("--every", type=int, default=100, help="sample memory every this many episodes")
    parser.add_argument("--out", default="bench/results/soak_webarena.json")
    args = parser.parse_args()
    if args.episodes < args.every or args.every < CLIENTS:
        parser.error(f"--episodes must be at least --every, and --every at least {CLIENTS}")

    measured = soak(args.episodes, warmup=args.warmup, every=args.every)
    result = {
        "what": "WebArena server soak: episodes through the in-process HTTP server, memory after the warm-up",
        "command": f"python bench/webarena_soak.py --episodes {args.episodes} --every {args.every}",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores", "load_average_1_5_15": os.getloadavg(),
        **measured,
    }
    out = write_json(args.out, result)
    first, last = result["samples"][0], result["samples"][-1]
    print(f"server RSS {first['server_rss_mb']} -> {last['server_rss_mb']} MB ({result['server_rss_growth_pct']:+}%), "
          f"browser RSS {first['browser_rss_mb']} -> {last['browser_rss_mb']} MB ({result['browser_rss_growth_pct']:+}%), "
          f"most contexts open {max(s['contexts'] for s in result['samples'])}, "
          f"after close {result['contexts_and_pages_after_close']}; "
          f"{result['solved']}/{result['expected_solved']} forum episodes solved; wrote {out}")


if __name__ == "__main__":
    main()
