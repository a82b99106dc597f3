"""`agentgym view RUN_DIR`: browse a training or evaluation run in a local web page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "view", help="browse a run directory (curves, trajectories, tokens) in a local web page",
        description="Serve a local page over a training or evaluation run directory (or a folder of runs): "
                    "a chart for every metric in metrics.jsonl (several runs overlaid), the run config, "
                    "each step's trajectories with filters, one trajectory turn by turn or token by token, "
                    "the same task at two steps side by side. The view is kept in the URL; running "
                    "trainings and new runs update in the page without reload. Nothing is fetched from "
                    "the internet.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("run_dir", help="run directory (from `agentgym train` or `agentgym eval`) or a folder of runs")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind; the default keeps the page on this machine")
    parser.add_argument("--port", type=int, default=8765, help="port to listen on (0 picks a free one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout=None) -> int:
    import uvicorn

    from agentgym_core.http.serving import listening_socket
    from agentgym_core.viewer import create_viewer_app, discover_runs

    stdout = stdout or sys.stdout
    root = Path(args.run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory; pass a run directory made by `agentgym train` "
                                "or `agentgym eval` (or a folder of them)")
    if not discover_runs(root):
        print(f"agentgym view: no run files under {root} yet (metrics.jsonl, trajectories/, trajectories.jsonl, "
              "results.json); the page will show them when they appear", file=sys.stderr)
    app = create_viewer_app(root)
    sock = listening_socket(args.host, args.port)
    port = sock.getsockname()[1]
    print(f"agentgym view: serving {root.resolve()} at http://{args.host}:{port}/  (Ctrl-C to stop)",
          file=stdout, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.run(sockets=[sock])
    return 0
