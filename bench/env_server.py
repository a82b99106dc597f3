"""Environment-server throughput: steps/s and latency percentiles with concurrent HTTP clients.

The server runs as its own process (`agentgym serve ENV`), as in production; clients are threads
in this process, each driving its own instance(s) with cheap valid actions and resetting when an
episode ends. Modes: `single` (one POST per step) and `batched` (one /v1/step_batch per client
carrying --batch-size instances). The in-process step loop of the same environment is measured
first as the baseline, so the HTTP overhead is a ratio from the same run.

    python bench/env_server.py --env babyai --clients 1 8 32 --seconds 5

``--vs-anchor`` (TextCraft) also drives, in the same run and with the same AgentGym-style client
(POST /create, /step {id, action}, /reset {id, data_idx}), a stand-in for AgentGym's TextCraft
server (bench/anchor_standin.py) and ours through its compat routes, interleaved round by round so
a busy machine slows both alike; the JSON gets the ratio per client count and per `--workers` count
of our server (default 1 and 2), the servers' CPU time per step (load-independent: what a step
costs, not how much CPU the server was given), and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
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
from typing import Any

import requests

from agentgym_core.http.client import EnvClient, HTTPEnv
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
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {process.stderr.read()}")
        try:
            client.health()
            return process
        except Exception:
            time.sleep(0.2)
    process.kill()
    raise TimeoutError("server did not come up in 600 s")


def start_process(command: list[str], port: int) -> subprocess.Popen:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {process.stderr.read()}")
        try:  # an HTTP answer, not just a connection: `--workers` listens before its workers serve
            requests.get(f"http://127.0.0.1:{port}/", timeout=2)
            return process
        except requests.RequestException:
            time.sleep(0.2)
    process.kill()
    raise TimeoutError("server did not come up in 600 s")


async def _post(reader: Any, writer: Any, path: str, body: dict) -> dict:
    """One POST on a kept-alive connection (a minimal HTTP/1.1 client: the requests library tops out
    near 1k requests/s per process, below what the servers compared here can answer)."""
    payload = json.dumps(body).encode()
    writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                 b"content-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return json.loads(await reader.readexactly(length))


def run_compat_clients(url: str, action: str, clients: int, seconds: float) -> float:
    """Steps/s of ``clients`` concurrent connections driving AgentGym's legacy routes, one instance each."""
    import asyncio

    host, port = url.removeprefix("http://").split(":")

    async def worker(index: int, stop: asyncio.Event, counts: list[int]) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        instance = (await _post(reader, writer, "/create", {}))["id"]
        await start.wait()
        n = 0
        while not stop.is_set():
            answer = await _post(reader, writer, "/step", {"id": instance, "action": action})
            n += 1
            if answer.get("done") or "error" in answer:
                await _post(reader, writer, "/reset", {"id": instance, "data_idx": index + n})
        counts[index] = n
        writer.close()

    async def main() -> float:
        stop, counts = asyncio.Event(), [0] * clients
        tasks = [asyncio.create_task(worker(i, stop, counts)) for i in range(clients)]
        await asyncio.sleep(0.5)  # every worker has its instance
        start.set()
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks)
        return sum(counts) / seconds

    start = asyncio.Event()
    return asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` and its children so far (Linux /proc), or NaN."""

    def own(stat: str) -> tuple[int, float]:
        fields = stat.rsplit(")", 1)[1].split()
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    total = float("nan")
    try:
        total = own(Path(f"/proc/{pid}/stat").read_text())[1]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    parent, seconds = own((entry / "stat").read_text())
                    if parent == pid:
                        total += seconds
    except OSError:
        pass
    return total


def measured(url: str, pid: int, clients: int, seconds: float) -> tuple[float, float]:
    """(steps/s, server CPU microseconds per step) of one run of AgentGym-style clients."""
    before = cpu_seconds(pid)
    rate = run_compat_clients(url, "inventory", clients, seconds)
    return rate, 1e6 * (cpu_seconds(pid) - before) / max(1.0, rate * seconds)


def versus_anchor(clients_list: list[int], seconds: float, workers_list: list[int], rounds: int) -> list[dict]:
    """Our TextCraft server's compat routes (once per worker count) vs the anchor-shaped stand-in,
    interleaved round by round."""
    agentgym = Path(sys.executable).with_name("agentgym")
    anchor_port = free_port()
    anchor = start_process([sys.executable, str(Path(__file__).with_name("anchor_standin.py")), "--port",
                            str(anchor_port)], anchor_port)
    ours: dict[int, tuple[int, subprocess.Popen]] = {}
    rows = []
    try:
        for workers in workers_list:
            port = free_port()
            ours[workers] = port, start_process(
                [str(agentgym), "serve", "textcraft", "--port", str(port), "--max-instances", "4096",
                 "--workers", str(workers)], port)
        for port in (anchor_port, *(port for port, _ in ours.values())):  # warm up: imports, caches, pools
            run_compat_clients(f"http://127.0.0.1:{port}", "inventory", max(clients_list), 0.5)
        for clients in clients_list:
            anchor_runs, our_runs = [], {w: [] for w in workers_list}
            for _ in range(rounds):
                anchor_runs.append(measured(f"http://127.0.0.1:{anchor_port}", anchor.pid, clients, seconds))
                for workers, (port, process) in ours.items():
                    our_runs[workers].append(measured(f"http://127.0.0.1:{port}", process.pid, clients, seconds))
            anchor_rate = statistics.median(r for r, _ in anchor_runs)
            anchor_cpu = statistics.median(c for _, c in anchor_runs)
            for workers in workers_list:
                row = {"clients": clients, "workers": workers,
                       "ours_steps_per_s": statistics.median(r for r, _ in our_runs[workers]),
                       "anchor_standin_steps_per_s": anchor_rate,
                       "ours_server_cpu_us_per_step": statistics.median(c for _, c in our_runs[workers]),
                       "anchor_standin_server_cpu_us_per_step": anchor_cpu,
                       "rounds": {"ours_steps_per_s": [r for r, _ in our_runs[workers]],
                                  "anchor_standin_steps_per_s": [r for r, _ in anchor_runs]}}
                row["ratio"] = row["ours_steps_per_s"] / anchor_rate
                rows.append(row)
                print(f"vs anchor stand-in, clients={clients:>3}, workers={workers}: ours {row['ours_steps_per_s']:7.0f} "
                      f"steps/s, stand-in {anchor_rate:7.0f} steps/s: x{row['ratio']:.2f}  (server CPU per step: "
                      f"ours {row['ours_server_cpu_us_per_step']:.0f} us, stand-in {anchor_cpu:.0f} us)", flush=True)
    finally:
        for process in (anchor, *(p for _, p in ours.values())):
            process.terminate()
            process.wait(timeout=30)
    return rows


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
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="--vs-anchor: `agentgym serve --workers` counts to measure (each against the anchor)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="--vs-anchor: interleaved rounds per configuration; the median is reported")
    parser.add_argument("--vs-anchor", action="store_true",
                        help="textcraft only: compare with the anchor-shaped stand-in and skip the /v1 runs")
    args = parser.parse_args()
    if args.vs_anchor:
        if args.env != "textcraft":
            parser.error("--vs-anchor compares TextCraft servers; use --env textcraft")
        load_before = os.getloadavg()
        rows = versus_anchor(args.clients, args.seconds, args.workers, args.rounds)
        out = Path(args.out.format(env="textcraft_vs_anchor"))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                                   "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()},
                                   "seconds": args.seconds, "rounds": args.rounds, "rows": rows}, indent=2))
        print(f"wrote {out}")
        return

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
