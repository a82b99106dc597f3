"""The TextCraft server of two checkouts, interleaved: steps/s and server CPU per step, same run.

Both servers are `agentgym serve textcraft --workers N` (default 2, the front) from this environment;
the "before" one imports agentgym_core from --before-src (e.g. an exported older commit), the "after"
one from the installed checkout. Clients (bench/env_server.py) step each in turn, round by round, so
a busy machine slows both alike: AgentGym-style ones on the compat routes (`--route compat`) or
agentgym's own HTTPEnv on /v1 (`--route v1`).

    git archive main agentgym_core/src | tar -x -C /tmp/before
    nice python bench/workers_front_ab.py --before-src /tmp/before/agentgym_core/src
    nice python bench/workers_front_ab.py --before-src /tmp/before/agentgym_core/src --workers 1 --route v1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).parent))
import env_server as bench  # noqa: E402 - a sibling script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-src", required=True, help="directory holding the older agentgym_core package")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    parser.add_argument("--workers", type=int, default=2, help="`agentgym serve --workers` of both servers")
    parser.add_argument("--route", choices=["compat", "v1"], default="compat",
                        help="AgentGym's compat routes or agentgym's own /v1 instance routes")
    parser.add_argument("--out", default="bench/results/workers_front_ab.json")
    args = parser.parse_args()
    tasks = list(range(64))
    if args.route == "v1":
        from agentgym_env_textcraft import TextCraftEnv

        tasks = TextCraftEnv.tasks().split("train")[:64]

    def measured(url: str, pid: int, clients: int) -> tuple[float, float]:
        if args.route == "compat":
            return bench.measured(url, pid, clients, args.seconds)
        before = bench.cpu_seconds(pid)
        rate = bench.run_clients(url, tasks, ["inventory"], clients, 0, args.seconds)["steps_per_s"]
        cpu_seconds = bench.cpu_seconds(pid) - before
        return rate, 1e6 * cpu_seconds / max(1.0, rate * args.seconds)

    agentgym = Path(sys.executable).with_name("agentgym")
    servers: dict[str, tuple[int, subprocess.Popen]] = {}
    for label, src in (("before", args.before_src), ("after", None)):
        port = bench.free_port()
        env = dict(os.environ, PYTHONPATH=src) if src else dict(os.environ)
        servers[label] = port, subprocess.Popen(
            [str(agentgym), "serve", "textcraft", "--port", str(port), "--max-instances", "4096",
             "--workers", str(args.workers)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    rows = []
    try:
        deadline = time.monotonic() + args.ready_timeout
        for label, (port, process) in servers.items():
            while True:
                if process.poll() is not None:
                    sys.exit(f"the {label} server exited with status {process.returncode}")
                try:
                    requests.get(f"http://127.0.0.1:{port}/v1/health", timeout=2).raise_for_status()
                    break
                except requests.RequestException:
                    if time.monotonic() > deadline:
                        sys.exit(f"the {label} server did not answer within {args.ready_timeout:.0f} s")
                    time.sleep(0.2)
            measured(f"http://127.0.0.1:{port}", process.pid, max(args.clients))  # warm-up
        for clients in args.clients:
            runs: dict[str, list[tuple[float, float]]] = {label: [] for label in servers}
            for _ in range(args.rounds):
                for label, (port, process) in servers.items():
                    runs[label].append(measured(f"http://127.0.0.1:{port}", process.pid, clients))
            row = {"clients": clients, **{f"{label}_steps_per_s": statistics.median(r for r, _ in runs[label])
                                          for label in servers},
                   **{f"{label}_server_cpu_us_per_step": statistics.median(c for _, c in runs[label])
                      for label in servers}, "rounds": runs}
            row["steps_ratio"] = row["after_steps_per_s"] / row["before_steps_per_s"]
            row["cpu_ratio"] = row["after_server_cpu_us_per_step"] / row["before_server_cpu_us_per_step"]
            rows.append(row)
            print(f"clients={clients}: steps/s after/before x{row['steps_ratio']:.2f}, server CPU per step "
                  f"{row['before_server_cpu_us_per_step']:.0f} -> {row['after_server_cpu_us_per_step']:.0f} us "
                  f"(x{row['cpu_ratio']:.2f})", flush=True)
    finally:
        for _, process in servers.values():
            process.terminate()
            process.wait(timeout=30)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": {"cpus": os.cpu_count()}, "load_average": os.getloadavg(),
                               "workers": args.workers, "route": args.route, "seconds": args.seconds,
                               "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
