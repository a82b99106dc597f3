"""Environment-server throughput: steps/s and latency percentiles with concurrent HTTP clients.

The server runs as its own process (`agentgym serve ENV`), as in production; clients are threads
in this process, each driving its own instance(s) with cheap valid actions and resetting when an
episode ends. Modes: `single` (one POST per step) and `batched` (one /v1/step_batch per client
carrying --batch-size instances). The in-process step loop of the same environment is measured
first as the baseline, so the HTTP overhead is a ratio from the same run.

    python bench/env_server.py --env babyai --clients 1 8 32 --seconds 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from agentgym_core.client import EnvClient, HTTPEnv
from agentgym_core.plugins import PluginManager

DEFAULT_ACTIONS = {
    "babyai": ["turn left", "move forward", "turn right", "move forward"],
    "textcraft": ["inventory"],
    "sciworld": ["look around"],
    "search": ["<search>capital of france</search>"],
    "webarena": ["scroll [down]", "scroll [up]"],
    "webarena_local": ["scroll [down]", "scroll [up]"],
    "guess": ["guess 50", "guess 25"],
}


# Environments whose upstream package has its own step loop: measured too, as the baseline a user
# of that package would otherwise have (module in bench/, function(seconds, warmup) -> {steps_per_s, ...}).
PACKAGE_BASELINES = {"sciworld": ("sciworld_env", "package_baseline")}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(env: str, port: int) -> subprocess.Popen:
    agentgym = Path(sys.executable).with_name("agentgym")
    process = subprocess.Popen([str(agentgym), "serve", env, "--port", str(port), "--max-instances", "2048"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    client = EnvClient(f"http://127.0.0.1:{port}", timeout=2, retries=0)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {process.stderr.read()}")
        try:
            client.health()
            return process
        except Exception:
            time.sleep(0.2)
    process.kill()
    raise TimeoutError("server did not come up in 120 s")


def in_process_baseline(env_cls, tasks: list[int], actions: list[str], seconds: float) -> dict:
    env = env_cls()
    latencies, steps, task_index = [], 0, 0
    env.reset(tasks[0])
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        result = env.step(actions[steps % len(actions)])
        latencies.append(time.perf_counter() - start)
        steps += 1
        if result.done:
            task_index += 1
            env.reset(tasks[task_index % len(tasks)])
    env.close()
    return {"steps_per_s": steps / seconds, "p50_ms": 1e3 * percentile(latencies, 0.5),
            "p99_ms": 1e3 * percentile(latencies, 0.99)}


def run_clients(url: str, tasks: list[int], actions: list[str], clients: int, batch: int, seconds: float) -> dict:
    """``batch`` == 0 means single-step requests."""
    shared = EnvClient(url, pool_size=clients + 4)
    latencies: list[float] = []
    counts = [0] * clients
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)
    stop = threading.Event()

    def worker(index: int) -> None:
        width = max(batch, 1)
        envs = [HTTPEnv(client=shared) for _ in range(width)]
        for k, env in enumerate(envs):
            env.reset(tasks[(index * width + k) % len(tasks)])
        local, n, turn = [], 0, 0
        barrier.wait()
        while not stop.is_set():
            action = actions[turn % len(actions)]
            turn += 1
            start = time.perf_counter()
            if batch:
                outcomes = shared.step_batch([(e.instance_id, action) for e in envs])
                ended = [e for e, o in zip(envs, outcomes, strict=True) if o.result is None or o.result.done]
            else:
                ended = [envs[0]] if envs[0].step(action).done else []
            local.append(time.perf_counter() - start)
            n += width
            for env in ended:
                env.reset(tasks[(index + n) % len(tasks)])
        with lock:
            latencies.extend(local)
            counts[index] = n
        for env in envs:
            env.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    shared.close()
    return {"clients": clients, "batch": batch, "steps_per_s": sum(counts) / seconds,
            "requests_per_s": len(latencies) / seconds, "p50_ms": 1e3 * percentile(latencies, 0.5),
            "p99_ms": 1e3 * percentile(latencies, 0.99), "mean_ms": 1e3 * statistics.fmean(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="babyai")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--batch-size", type=int, default=8, help="instances per /v1/step_batch request")
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per configuration")
    parser.add_argument("--actions", nargs="+", default=None, help="actions to cycle (default per env)")
    parser.add_argument("--out", default="bench/results/env_server_{env}.json")
    args = parser.parse_args()

    env_cls = PluginManager(autoload=True).env_class(args.env)
    tasks = env_cls.tasks().split("train")[:256]
    actions = args.actions or DEFAULT_ACTIONS.get(args.env) or ["look"]
    results = {"env": args.env, "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
               "actions": actions, "seconds": args.seconds}
    if args.env in PACKAGE_BASELINES:
        import importlib

        sys.path.insert(0, str(Path(__file__).parent))
        module, function = PACKAGE_BASELINES[args.env]
        results["package"] = getattr(importlib.import_module(module), function)(args.seconds, 1.0)
        print(f"upstream package's own loop: {results['package']['steps_per_s']:.1f} steps/s", flush=True)
    results["in_process"] = in_process_baseline(env_cls, tasks, actions, args.seconds)
    print(f"in-process baseline: {results['in_process']['steps_per_s']:.0f} steps/s", flush=True)

    port = free_port()
    server = start_server(args.env, port)
    try:
        url = f"http://127.0.0.1:{port}"
        runs = []
        for batch in (0, args.batch_size):
            for clients in args.clients:
                row = run_clients(url, tasks, actions, clients, batch, args.seconds)
                row["vs_in_process"] = row["steps_per_s"] / results["in_process"]["steps_per_s"]
                if "package" in results:
                    row["vs_package"] = row["steps_per_s"] / results["package"]["steps_per_s"]
                runs.append(row)
                mode = f"batched x{batch}" if batch else "single"
                print(f"{mode:>11} clients={clients:>3}: {row['steps_per_s']:8.0f} steps/s  "
                      f"p50={row['p50_ms']:.2f} ms  p99={row['p99_ms']:.2f} ms", flush=True)
        results["http"] = runs
    finally:
        server.terminate()
        server.wait(timeout=30)
    out = Path(args.out.format(env=args.env))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
