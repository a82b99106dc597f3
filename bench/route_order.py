"""What the router's route order costs a /v1 request: its linear match, with /v1 first and with the faces first.

Starlette finds a route by trying each in order; AgentGym's raw-request routes skip that scan (found
by exact method and path, ``DirectRouteApp``), /v1's go through it. This times the scan alone, in
one process, for the same app's routes in two orders interleaved round by round: as ``create_app``
registers them now (/v1 first) and with OpenEnv's and AgentGym's routes moved ahead of /v1 (the order
before issue 49's review). The full server CPU per step is ``bench/env_server.py``'s figure.

    nice python bench/route_order.py --env textcraft
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from starlette.routing import Match

from agentgym_core.http.server import create_app
from agentgym_core.plugins import PluginManager

PATHS = [("POST", "/v1/instances/123/step"), ("POST", "/v1/step_batch"), ("GET", "/v1/instances/123/observation")]


def scan_ns(routes: list, method: str, path: str, repeats: int) -> float:
    """CPU nanoseconds per request for the router's scan up to the first full match."""
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}
    start = time.thread_time_ns()  # CPU time: what a loaded machine does not inflate
    for _ in range(repeats):
        for route in routes:
            match, _child = route.matches(scope)
            if match is Match.FULL:
                break
    return (time.thread_time_ns() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="textcraft")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeats", type=int, default=20_000)
    parser.add_argument("--out", default="bench/results/route_order_{env}.json")
    args = parser.parse_args()
    app = create_app(PluginManager(autoload=True).env_class(args.env))
    now = list(app.router.routes)
    faces = [r for r in now if not getattr(r, "path", "").startswith(("/v1", "/docs", "/redoc", "/openapi"))]
    framework = [r for r in now if getattr(r, "path", "").startswith(("/docs", "/redoc", "/openapi"))]
    before = framework + faces + [r for r in now if r not in faces and r not in framework]
    orders = {"v1_first": now, "faces_first": before}
    load_before = os.getloadavg()
    rows = []
    for method, path in PATHS:
        runs: dict[str, list[float]] = {name: [] for name in orders}
        for _ in range(args.rounds):
            for name, routes in orders.items():
                runs[name].append(scan_ns(routes, method, path, args.repeats))
        row = {"request": f"{method} {path}", **{f"{name}_ns": round(statistics.median(v)) for name, v in runs.items()},
               "routes_tried": {name: 1 + next(i for i, r in enumerate(routes) if r.matches(
                   {"type": "http", "method": method, "path": path, "root_path": "", "headers": []})[0] is Match.FULL)
                   for name, routes in orders.items()}}
        row["saved_ns"] = row["faces_first_ns"] - row["v1_first_ns"]
        rows.append(row)
        print(f"{row['request']}: {row['faces_first_ns']} ns ({row['routes_tried']['faces_first']} routes tried) -> "
              f"{row['v1_first_ns']} ns ({row['routes_tried']['v1_first']}) with /v1 first", flush=True)
    out = Path(args.out.format(env=args.env))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"env": args.env, "machine": {"cpus": os.cpu_count()},
                               "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()},
                               "rounds": args.rounds, "repeats": args.repeats, "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
