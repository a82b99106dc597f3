"""Start-up of the command line and of env servers: seconds, CPU seconds and server RSS.

Each command runs as a fresh process, as a user types it. With ``--baseline CHECKOUT`` (another
checkout of agentgym, e.g. a `git worktree` of an older commit, sharing this environment's installed
dependencies) every measurement is repeated with that checkout's sources first on PYTHONPATH,
interleaved round by round with the current tree, so a busy machine slows both alike; the JSON gets
the ratio current/baseline per command.

    python bench/cli_startup.py --rounds 5 --servers babyai textcraft sciworld search \\
        --baseline /tmp/agentgym-before

CLI rows: wall seconds (median) and CPU seconds (user+sys of the child: median, and the minimum, the
figure a shared machine disturbs least) and exit code of ``--help``, ``plugins``, ``envs``, a
misspelt env's one-line error, ``train`` of a recipe that does not exist, ``train --print-config``
of the smoke recipe, ``train`` of a recipe whose env is misspelt, and ``eval`` of a model path that
does not exist. Server rows: seconds from start until
``POST /v1/instances`` (with a reset onto task 0) answers 201, and the server process's RSS then.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "examples" / "babyai_smoke_cpu.yaml")
TYPO_RECIPE = Path(tempfile.gettempdir()) / "agentgym_bench_typo_env.yaml"  # the smoke recipe, env misspelt
CLI_COMMANDS = {"--help": ["--help"], "plugins": ["plugins"], "envs": ["envs"], "typo error": ["serve", "textcraf"],
                "missing recipe": ["train", "no_such_recipe.yaml"],
                "print-config": ["train", SMOKE, "--print-config"],
                "typo in recipe": ["train", str(TYPO_RECIPE)],
                "eval bad model": ["eval", "--env", "babyai", "--model", "/no/such/model"]}


def source_path(checkout: Path) -> str:
    """PYTHONPATH that makes ``checkout``'s packages win over the installed (editable) ones."""
    folders = [checkout / "agentgym_core" / "src", *sorted(checkout.glob("plugins/*/src")),
               *sorted(checkout.glob("agentgym_env_*/src")), *sorted(checkout.glob("examples/*/src"))]
    return os.pathsep.join(str(f) for f in folders if f.is_dir())


def child_env(checkout: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = source_path(checkout)
    return env


def time_command(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, child CPU s, exit code) of ``python -m agentgym_core ARGV``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "agentgym_core", *argv], capture_output=True, env=env, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def time_server(env_name: str, env: dict[str, str], ready_timeout: float) -> tuple[float, float]:
    """(seconds until the first create+reset answers, server RSS in MiB then)."""
    port = free_port()
    start = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "agentgym_core", "serve", env_name, "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"`agentgym serve {env_name}` exited: {server.stderr.read().decode()[-2000:]}")
            try:
                answer = requests.post(f"http://127.0.0.1:{port}/v1/instances", json={"task_id": 0}, timeout=60)
                break
            except (requests.ConnectionError, requests.Timeout):
                if time.perf_counter() - start > ready_timeout:
                    raise RuntimeError(f"`agentgym serve {env_name}` did not answer in {ready_timeout} s") from None
                time.sleep(0.05)
        ready = time.perf_counter() - start
        if answer.status_code != 201:
            raise RuntimeError(f"create on {env_name} answered {answer.status_code}: {answer.text[:300]}")
        return ready, rss_mib(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=60)


def summarise(samples: list[tuple[float, ...]]) -> list[float]:
    return [round(statistics.median(column), 3) for column in zip(*samples, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="repetitions of every measurement (median reported)")
    parser.add_argument("--servers", nargs="*", default=["babyai", "textcraft", "sciworld", "search"],
                        help="env servers to start (none: CLI only)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another agentgym checkout to measure interleaved with this one")
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for a server")
    parser.add_argument("--out", default="bench/results/cli_startup.json")
    args = parser.parse_args()

    text = Path(SMOKE).read_text()
    TYPO_RECIPE.write_text(text.replace("name: babyai\n", "name: babyaai\n", 1))
    trees = {"current": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    envs = {name: child_env(path) for name, path in trees.items()}
    cli: dict[str, dict[str, list[tuple[float, ...]]]] = {t: {c: [] for c in CLI_COMMANDS} for t in trees}
    servers: dict[str, dict[str, list[tuple[float, ...]]]] = {t: {s: [] for s in args.servers} for t in trees}
    codes: dict[str, int] = {}
    load_before = os.getloadavg()
    for round_index in range(args.rounds):
        for tree in trees:
            for command, argv in CLI_COMMANDS.items():
                wall, cpu, code = time_command(argv, envs[tree])
                cli[tree][command].append((wall, cpu))
                codes[command] = code
            for env_name in args.servers:
                servers[tree][env_name].append(time_server(env_name, envs[tree], args.ready_timeout))
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    result: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                              "load_before": load_before, "load_after": os.getloadavg(), "rounds": args.rounds,
                              "trees": {t: str(p) for t, p in trees.items()}, "cli": {}, "servers": {}}
    print(f"{'command':<22}" + "".join(f"{t + ' wall/cpu s':>26}" for t in trees) + ("   ratio (wall)" if args.baseline else ""))
    for command in CLI_COMMANDS:
        row = {t: {**dict(zip(("wall_s", "cpu_s"), summarise(cli[t][command]), strict=True)),
                   "cpu_min_s": round(min(cpu for _, cpu in cli[t][command]), 3)} for t in trees}
        row["exit_code"] = codes[command]
        if args.baseline:
            row["ratio_wall"] = round(row["current"]["wall_s"] / row["baseline"]["wall_s"], 3)
            row["ratio_cpu"] = round(row["current"]["cpu_s"] / row["baseline"]["cpu_s"], 3)
        result["cli"][command] = row
        cells = "".join(f"{row[t]['wall_s']:>10.2f} / {row[t]['cpu_s']:.2f} (min {row[t]['cpu_min_s']:.2f})"
                        for t in trees)
        print(f"agentgym {command:<13}{cells}" + (f"   x{row['ratio_wall']:.2f}" if args.baseline else ""))
    for env_name in args.servers:
        row = {t: dict(zip(("ready_s", "rss_mib"), summarise(servers[t][env_name]), strict=True)) for t in trees}
        if args.baseline:
            row["ratio_ready"] = round(row["current"]["ready_s"] / row["baseline"]["ready_s"], 3)
            row["ratio_rss"] = round(row["current"]["rss_mib"] / row["baseline"]["rss_mib"], 3)
        result["servers"][env_name] = row
        cells = "".join(f"{row[t]['ready_s']:>12.2f} s {row[t]['rss_mib']:>7.0f} MiB" for t in trees)
        print(f"serve {env_name:<16}{cells}" + (f"   x{row['ratio_ready']:.2f} time, x{row['ratio_rss']:.2f} RSS"
                                                 if args.baseline else ""))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
