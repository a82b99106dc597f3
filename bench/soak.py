"""Soak an environment server: run many episodes through it and record its memory (RSS) as it goes.

The server runs as its own process (`agentgym serve ENV`); one client plays --episodes episodes of
random tasks (create, a few steps, close), sampling the server's resident memory every --every
episodes. Flat RSS means nothing leaks per episode.

    python bench/soak.py --env textcraft --episodes 10000
    python bench/soak.py --env textcraft --episodes 10000 --workers 2 --out bench/results/soak_textcraft_workers2.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

from agentgym_core.http.client import EnvClient, HTTPEnv

ACTIONS = {"babyai": ["turn left", "move forward", "toggle"], "textcraft": ["inventory", "get 1 oak logs"],
           "guess": ["guess 50", "guess 25"]}


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` and its direct children (the `--workers` processes)."""
    total = None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if int(entry.name) != pid and parent != pid:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total = (total or 0) + int(line.split()[1])
        except (OSError, ValueError, IndexError):  # the process ended while we read it
            continue
    if total is None:
        raise RuntimeError(f"no VmRSS for process {pid}")
    return total / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="textcraft")
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=4, help="steps per episode")
    parser.add_argument("--every", type=int, default=500, help="sample RSS every this many episodes")
    parser.add_argument("--ready-timeout", type=float, default=600.0,
                        help="seconds to wait for the server to answer /v1/health (start-up is slow on a busy machine)")
    parser.add_argument("--workers", type=int, default=1,
                        help="`agentgym serve --workers`; RSS is then the front's and the workers' together")
    parser.add_argument("--out", default="bench/results/soak_{env}.json")
    args = parser.parse_args()

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agentgym = Path(sys.executable).with_name("agentgym")
    server = subprocess.Popen([str(agentgym), "serve", args.env, "--port", str(port), "--workers", str(args.workers)], stdout=subprocess.DEVNULL)
    client = EnvClient(f"http://127.0.0.1:{port}", timeout=30)
    try:
        started = time.monotonic()
        while True:
            if server.poll() is not None:
                sys.exit(f"the server exited with status {server.returncode} before it answered")
            try:
                client.health()
                break
            except Exception:
                if time.monotonic() - started > args.ready_timeout:
                    sys.exit(f"the server did not answer /v1/health within {args.ready_timeout:.0f} s "
                             "(raise --ready-timeout on a busy machine)")
                time.sleep(0.2)
        ready_s = round(time.monotonic() - started, 1)
        print(f"server ready after {ready_s} s", flush=True)
        tasks = client.tasks().split("train")
        actions = ACTIONS.get(args.env, ["look"])
        rng = random.Random(0)
        samples, start = [], time.monotonic()
        for episode in range(args.episodes + 1):
            if episode % args.every == 0:
                samples.append({"episode": episode, "rss_mb": round(rss_mb(server.pid), 1),
                                "live_instances": client.health().live_instances,
                                "seconds": round(time.monotonic() - start, 1)})
                print(samples[-1], flush=True)
            if episode == args.episodes:
                break
            env = HTTPEnv(client=client)
            env.reset(rng.choice(tasks))
            for step in range(args.steps):
                if env.step(actions[step % len(actions)]).done:
                    break
            env.close()
        first, last = samples[1] if len(samples) > 1 else samples[0], samples[-1]
        result = {"env": args.env, "workers": args.workers, "load_average_1_5_15": os.getloadavg(),
                  "episodes": args.episodes, "ready_s": ready_s, "steps_per_episode": args.steps, "samples": samples,
                  "rss_growth_pct_after_warmup": round(100 * (last["rss_mb"] / first["rss_mb"] - 1), 2)}
        out = Path(args.out.format(env=args.env))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
        print(f"RSS {first['rss_mb']} MB -> {last['rss_mb']} MB ({result['rss_growth_pct_after_warmup']:+}%); wrote {out}")
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
