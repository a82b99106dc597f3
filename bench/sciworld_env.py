"""SciWorld throughput: the package's own env.step() loop vs our lean path, in-process and over HTTP.

Same run, same task, same action cycle for every row:

* ``package_env_step``: ``scienceworld.ScienceWorldEnv.step()`` (rebuilds the valid-action list
  every step), the baseline;
* ``agentgym_in_process``: ``SciWorldEnv.step()`` (lean path, valid actions only on request);
* ``agentgym_http_{1,4}_clients``: ``agentgym serve sciworld`` in its own process, N client threads,
  each with its own instance (one pooled JVM per instance).

Reports steps/s, p50/p99 step latency and the server's peak RSS (process tree, JVMs included).
Writes bench/results/sciworld_env.json.

    python bench/sciworld_env.py --seconds 20
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ACTIONS = ["look around", "inventory", "wait1", "task", "look at picture"]
TASK_ID = 0  # boil water, variation 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def summarise(latencies: list[float], elapsed: float) -> dict:
    return {"steps": len(latencies), "steps_per_s": round(len(latencies) / elapsed, 1),
            "p50_ms": round(1000 * percentile(latencies, 0.50), 2),
            "p99_ms": round(1000 * percentile(latencies, 0.99), 2)}


def tree_rss_mb(root: int) -> float:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
        except (OSError, StopIteration):
            pass
    return total


def _warm(step, reset, warmup: float) -> None:
    """Run untimed steps first, so JIT compilation of a fresh JVM is not measured."""
    end, i = time.perf_counter() + warmup, 0
    while time.perf_counter() < end:
        if step(ACTIONS[i % len(ACTIONS)]):
            reset()
        i += 1


def package_baseline(seconds: float, warmup: float) -> dict:
    """The scienceworld package's own loop: env.step() computes every valid action each step."""
    from scienceworld import ScienceWorldEnv

    from agentgym_env_sciworld import task

    os.environ.setdefault("JAVA_TOOL_OPTIONS", "-Xmx512m")  # same heap cap as ours, for a fair comparison
    chosen = task(TASK_ID)
    env = ScienceWorldEnv("", envStepLimit=100)
    try:
        env.load(chosen.family.name, chosen.variation)
        env.reset()
        _warm(lambda a: env.step(a)[2], env.reset, warmup)
        latencies: list[float] = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            _, _, done, _ = env.step(ACTIONS[len(latencies) % len(ACTIONS)])
            latencies.append(time.perf_counter() - t0)
            if done:
                env.reset()
        return summarise(latencies, time.perf_counter() - start)
    finally:
        env.close()


def ours_in_process(seconds: float, warmup: float) -> dict:
    from agentgym_env_sciworld import SciWorldEnv

    env = SciWorldEnv()
    try:
        env.reset(TASK_ID)
        _warm(lambda a: env.step(a).done, lambda: env.reset(TASK_ID), warmup)
        latencies: list[float] = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            result = env.step(ACTIONS[len(latencies) % len(ACTIONS)])
            latencies.append(time.perf_counter() - t0)
            if result.done:
                env.reset(TASK_ID)
        return summarise(latencies, time.perf_counter() - start)
    finally:
        env.close()


def start_server() -> tuple[subprocess.Popen, str]:
    from agentgym_core.http.client import EnvClient

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agentgym = Path(sys.executable).with_name("agentgym")
    process = subprocess.Popen([str(agentgym), "serve", "sciworld", "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    client = EnvClient(url, timeout=2, retries=0)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("`agentgym serve sciworld` exited; run it by hand to see why")
        try:
            client.health()
            return process, url
        except Exception:
            time.sleep(0.2)
    process.kill()
    raise TimeoutError("the sciworld server did not answer within 120 s")


def http_clients(url: str, server_pid: int, clients: int, seconds: float, warmup: float) -> dict:
    from agentgym_core.http.client import HTTPEnv

    envs = [HTTPEnv(url) for _ in range(clients)]
    for env in envs:
        env.reset(TASK_ID)  # JVM starts happen here, outside the timed window
    warmers = [threading.Thread(target=_warm, args=(lambda a, e=e: e.step(a).done, lambda e=e: e.reset(TASK_ID),
                                                    warmup)) for e in envs]
    for thread in warmers:
        thread.start()
    for thread in warmers:
        thread.join()
    latencies: list[list[float]] = [[] for _ in envs]
    peak = [tree_rss_mb(server_pid)]
    stop = threading.Event()

    def worker(index: int) -> None:
        env, mine = envs[index], latencies[index]
        while not stop.is_set():
            t0 = time.perf_counter()
            result = env.step(ACTIONS[len(mine) % len(ACTIONS)])
            mine.append(time.perf_counter() - t0)
            if result.done:
                env.reset(TASK_ID)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    while time.perf_counter() - start < seconds:
        time.sleep(0.5)
        peak.append(tree_rss_mb(server_pid))
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    for env in envs:
        env.close()
    row = summarise([x for per in latencies for x in per], elapsed)
    row["server_peak_rss_mb"] = round(max(peak))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring time per row")
    parser.add_argument("--warmup", type=float, default=5.0, help="untimed seconds first (JVM JIT warm-up)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4], help="HTTP client counts")
    args = parser.parse_args()

    rows: dict[str, dict] = {}
    rows["package_env_step"] = package_baseline(args.seconds, args.warmup)
    print("package_env_step", rows["package_env_step"], flush=True)
    rows["agentgym_in_process"] = ours_in_process(args.seconds, args.warmup)
    print("agentgym_in_process", rows["agentgym_in_process"], flush=True)
    process, url = start_server()
    try:
        for n in args.clients:
            rows[f"agentgym_http_{n}_clients"] = http_clients(url, process.pid, n, args.seconds, args.warmup)
            print(f"agentgym_http_{n}_clients", rows[f"agentgym_http_{n}_clients"], flush=True)
    finally:
        process.terminate()
        process.wait(timeout=30)
    base = rows["package_env_step"]["steps_per_s"]
    for row in rows.values():
        row["speedup_vs_package"] = round(row["steps_per_s"] / base, 2) if base else None
    result = {"bench": "sciworld_env", "task_id": TASK_ID, "actions": ACTIONS, "seconds": args.seconds, "warmup": args.warmup,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "rows": rows}
    out = Path(__file__).parent / "results" / "sciworld_env.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(rows, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
