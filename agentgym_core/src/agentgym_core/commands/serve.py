"""`agentgym serve ENV`: serve an environment over the agentgym HTTP protocol."""

from __future__ import annotations

import argparse
import json

from agentgym_core.plugins import get_plugin_manager
from agentgym_core.server import DEFAULT_IDLE_TTL_S, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_INSTANCES, create_app


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve an environment over HTTP",
        description="Serve ENV over the agentgym protocol (/v1, OpenAPI page at /docs) and, where the "
                    "environment defines them, AgentGym's legacy routes (/create, /reset, /step, ...).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("env", help="environment name (see `agentgym envs`)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind; use 0.0.0.0 only on a trusted network")
    parser.add_argument("--port", type=int, default=8000, help="TCP port")
    parser.add_argument("--max-instances", type=int, default=DEFAULT_MAX_INSTANCES,
                        help="live instances allowed at once; more answer 503")
    parser.add_argument("--idle-ttl", type=float, default=DEFAULT_IDLE_TTL_S,
                        help="close instances idle this many seconds (0: never)")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                        help="larger request bodies answer 413")
    parser.add_argument("--env-kwargs", type=json.loads, default={},
                        help='JSON object of constructor arguments, e.g. \'{"max_steps": 64}\'')
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    env_cls = get_plugin_manager().env_class(args.env)
    if not isinstance(args.env_kwargs, dict):
        raise ValueError(f"--env-kwargs must be a JSON object, got {args.env_kwargs!r}")
    app = create_app(env_cls, env_kwargs=args.env_kwargs, name=args.env, max_instances=args.max_instances,
                     idle_ttl_s=args.idle_ttl or None, max_body_bytes=args.max_body_bytes)
    print(f"serving {args.env!r} on http://{args.host}:{args.port} (docs: http://{args.host}:{args.port}/docs)",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
