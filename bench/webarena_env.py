"""WebArena environment throughput on the bundled local sites: actions/s and latency percentiles.

Scripted episodes (search the shop, open a product, scroll, go back, answer; or open a forum and
answer) run for a fixed time with 1..N concurrent instances, in-process and through the core's
HTTP server (in this process, on loopback). Every action includes the observation it returns
(CDP accessibility tree + layout snapshot), as an agent step would.

    python bench/webarena_env.py --seconds 20 --concurrency 1 4 8
    python bench/webarena_env.py --seconds 10 --concurrency 4 --no-http

`measure_webarena(...)` returns the numbers as a dict (for bench/env_server.py to call).
Results go to bench/results/webarena_env.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentgym_core import Env
from agentgym_core.http.client import HTTPEnv
from agentgym_core.testing import serve_env
from agentgym_env_webarena import BrowserConfig, BrowserPool, LocalWebArenaEnv


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _id(observation: str, role: str, name: str) -> int:
    match = re.search(rf"\[(\d+)\] {role} ['\"]{re.escape(name)}['\"]", observation)
    if not match:
        raise RuntimeError(f"no {role} {name!r} in observation:\n{observation[:2000]}")
    return int(match.group(1))


def _episode(env: Env, index: int, step_s: list[float], reset_s: list[float]) -> float:
    """One scripted episode; appends each step's and the reset's latency. Returns the reward."""

    def step(action: str) -> Any:
        t0 = time.perf_counter()
        result = env.step(f"```{action}```")
        step_s.append(time.perf_counter() - t0)
        return result

    t0 = time.perf_counter()
    if index % 2 == 0:
        obs = env.reset(0).observation
        reset_s.append(time.perf_counter() - t0)
        obs = step(f"type [{_id(obs, 'searchbox', 'Search products')}] [olive desk lamp] [1]").observation
        obs = step(f"click [{_id(obs, 'link', 'Olive Desk Lamp')}]").observation
        step("scroll [down]")
        step("scroll [up]")
        step("go_back")
        step("go_forward")
        return step("stop [$118.99]").reward
    obs = env.reset(2).observation
    reset_s.append(time.perf_counter() - t0)
    step("scroll [down]")
    step(f"click [{_id(obs, 'link', 'gardening')}]")
    return step("stop []").reward


def _run(make_env: Any, concurrency: int, seconds: float) -> dict[str, Any]:
    envs = [make_env() for _ in range(concurrency)]
    step_s: list[float] = []
    reset_s: list[float] = []
    rewards: list[float] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def worker(slot: int) -> None:
        index = slot
        while time.perf_counter() < deadline:
            steps: list[float] = []
            resets: list[float] = []
            reward = _episode(envs[slot], index, steps, resets)
            with lock:
                step_s.extend(steps)
                reset_s.extend(resets)
                rewards.append(reward)
            index += 1

    start = time.perf_counter()
    try:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(worker, range(concurrency)))
    finally:
        for env in envs:
            env.close()
    wall = time.perf_counter() - start
    return {
        "concurrency": concurrency,
        "episodes": len(rewards),
        "success_rate": sum(r == 1.0 for r in rewards) / max(len(rewards), 1),
        "actions": len(step_s),
        "actions_per_s": len(step_s) / wall,
        "episodes_per_s": len(rewards) / wall,
        "step_p50_ms": 1e3 * _percentile(step_s, 0.50),
        "step_p99_ms": 1e3 * _percentile(step_s, 0.99),
        "reset_p50_ms": 1e3 * _percentile(reset_s, 0.50),
        "reset_p99_ms": 1e3 * _percentile(reset_s, 0.99),
        "wall_s": wall,
    }


def measure_webarena(seconds: float = 10.0, concurrency: tuple[int, ...] = (1, 4), http: bool = True) -> dict[str, Any]:
    """Throughput of the local WebArena env, per concurrency level, in-process and over HTTP."""
    results: dict[str, Any] = {"in_process": [], "http": []}
    pool = BrowserPool.shared(BrowserConfig())
    LocalWebArenaEnv().close()  # start the browser and the sites outside the timed runs
    for n in concurrency:
        results["in_process"].append(_run(LocalWebArenaEnv, n, seconds))
    if http:
        with serve_env(LocalWebArenaEnv, max_instances=max(concurrency) + 2) as url:
            for n in concurrency:
                results["http"].append(_run(lambda url=url: HTTPEnv(url), n, seconds))
    results["browser_rss_mib"] = pool.browser_rss_bytes() / 2**20
    results["browser_launches"] = pool.launches
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="Timed run per configuration.")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4], help="Concurrent instances.")
    parser.add_argument("--no-http", action="store_true", help="Skip the runs through the HTTP server.")
    args = parser.parse_args()
    results = measure_webarena(args.seconds, tuple(args.concurrency), http=not args.no_http)
    results["machine"] = {"python": platform.python_version(), "cpus": __import__("os").cpu_count()}
    for mode in ("in_process", "http"):
        for row in results[mode]:
            print(
                f"{mode:10s} x{row['concurrency']}: {row['actions_per_s']:6.1f} actions/s, "
                f"step p50 {row['step_p50_ms']:6.1f} ms p99 {row['step_p99_ms']:6.1f} ms, "
                f"reset p50 {row['reset_p50_ms']:6.1f} ms p99 {row['reset_p99_ms']:6.1f} ms, "
                f"{row['episodes']} episodes, success {row['success_rate']:.0%}"
            )
    print(f"browser RSS {results['browser_rss_mib']:.0f} MiB, launches {results['browser_launches']}")
    out = Path(__file__).parent / "results" / "webarena_env.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
