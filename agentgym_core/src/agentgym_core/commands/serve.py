"""`agentgym serve ENV`: serve an environment over the agentgym HTTP protocol."""

from __future__ import annotations

import argparse
import errno
import socket

from agentgym_core.commands.eval import json_object
from agentgym_core.http.auth import TOKEN_ENV, check_exposure, resolve_token
from agentgym_core.http.protocol import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_IDLE_TTL_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INSTANCES,
    DEFAULT_WORKER_TIMEOUT_S,
)
from agentgym_core.plugins import get_plugin_manager


def _bounded(kind: type, low: float, *, allow_zero: bool = False, what: str) -> argparse._ActionsContainer:
    """An argparse type that refuses values below ``low`` (and says what the option means)."""

    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if allow_zero and value == 0:
            return value
        if value < low:
            zero = " (or 0 for never)" if allow_zero else ""
            raise argparse.ArgumentTypeError(f"{what} must be at least {low}{zero}, got {text}")
        return value

    return parse  # type: ignore[return-value]


def check_port_free(host: str, port: int) -> None:
    """Raise ValueError (one line, rc 2) when ``host:port`` cannot be bound, e.g. another server holds it."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no conflict
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ValueError(f"port {port} on {host} is already in use (another `agentgym serve`?); stop that "
                                 "server or pick another --port") from None
            raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror}; check --host and --port") from None


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve an environment over HTTP",
        description="Serve ENV over the agentgym protocol (/v1, OpenAPI page at /docs), OpenEnv's routes (/ws, "
                    "/reset, /step, /state, /schema, ...), MCP tools (/mcp) and, where the environment defines "
                    "them, AgentGym's legacy routes (/create, /reset, /step, ...).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("env", help="environment name (see `agentgym envs`)")
    parser.add_argument("--host", default="127.0.0.1",
                        help=f"address to bind; an address other than loopback needs a token (${TOKEN_ENV} or "
                             "--token-file) or --insecure")
    parser.add_argument("--token", default=None,
                        help=f"shared token every request must carry, as 'Authorization: Bearer TOKEN' or as the "
                             f"path prefix /token/TOKEN (for AgentGym's clients). Every user of this machine can "
                             f"read it in `ps`: set ${TOKEN_ENV} or use --token-file instead; default: ${TOKEN_ENV}")
    parser.add_argument("--token-file", default=None, metavar="FILE",
                        help="read the shared token from the first line of FILE (keep it readable by you alone)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow binding an address other than loopback without a token")
    parser.add_argument("--port", type=_bounded(int, 0, what="--port"), default=8000,
                        help="TCP port; 0 picks a free one, and the 'serving ... on http://HOST:PORT' line says which")
    parser.add_argument("--max-instances", type=_bounded(int, 1, what="--max-instances"),
                        default=DEFAULT_MAX_INSTANCES, help="live instances allowed at once; more answer 503")
    parser.add_argument("--idle-ttl", type=_bounded(float, 1.0, allow_zero=True, what="--idle-ttl"),
                        default=DEFAULT_IDLE_TTL_S, help="close instances idle this many seconds (0: never)")
    parser.add_argument("--max-body-bytes", type=_bounded(int, 1024, what="--max-body-bytes"),
                        default=DEFAULT_MAX_BODY_BYTES, help="larger request bodies answer 413")
    parser.add_argument("--header-timeout", type=_bounded(float, 0.1, what="--header-timeout"),
                        default=DEFAULT_HEADER_TIMEOUT_S,
                        help="seconds a client may take to send a request's headers; slower ones get 408")
    parser.add_argument("--body-timeout", type=_bounded(float, 0.1, what="--body-timeout"),
                        default=DEFAULT_BODY_TIMEOUT_S,
                        help="seconds a client may take to send a request's body after its headers")
    parser.add_argument("--workers", type=_bounded(int, 1, what="--workers"), default=1,
                        help="server processes sharing the port, for more steps/s on several cores. Each "
                             "instance lives in the worker that created it, and its id says which: a request "
                             "that reaches another worker is passed on to it over loopback, so no request "
                             "steps another worker's instances. --max-instances is per worker")
    parser.add_argument("--worker-timeout", type=_bounded(float, 1.0, what="--worker-timeout"),
                        default=DEFAULT_WORKER_TIMEOUT_S,
                        help="with --workers: seconds a worker may leave its heartbeat unanswered before it is "
                             "killed and restarted (its instances are lost; the other workers' go on)")
    parser.add_argument("--env-kwargs", type=json_object, default={},
                        help='JSON object of constructor arguments, e.g. \'{"max_steps": 64}\'; checked against '
                             "the environment's constructor before the server starts")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # the web stack is imported only to serve, not for `agentgym --help`
    from agentgym_core.env import check_env_options
    from agentgym_core.http.server import create_app
    from agentgym_core.http.serving import serve_forever

    token = resolve_token(args.token, file=args.token_file)
    check_exposure(args.host, token, insecure=args.insecure, what="environment server")
    env_cls = get_plugin_manager().env_class(args.env)
    # Both before "serving ...": a bad option would otherwise answer 500 to every create, and a
    # port in use would print the address, then uvicorn's traceback.
    check_env_options(env_cls, args.env_kwargs, where="--env-kwargs")
    check_port_free(args.host, args.port)
    if args.workers > 1:
        from agentgym_core.http.workers import serve_workers

        # Built once here too, so that bad options fail now, in one line, not in every worker.
        create_app(env_cls, env_kwargs=args.env_kwargs, name=args.env, max_instances=args.max_instances,
                   idle_ttl_s=args.idle_ttl or None, max_body_bytes=args.max_body_bytes)
        return serve_workers(
            workers=args.workers, host=args.host, port=args.port,
            app_options={"env": args.env, "env_kwargs": args.env_kwargs, "name": args.env,
                         "max_instances": args.max_instances, "idle_ttl_s": args.idle_ttl or None,
                         "max_body_bytes": args.max_body_bytes, "token": token},
            serve_options={"header_timeout_s": args.header_timeout, "body_timeout_s": args.body_timeout},
            worker_timeout_s=args.worker_timeout)
    serve_forever(env_cls, args.env_kwargs, host=args.host, port=args.port, name=args.env,
                  header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout,
                  max_instances=args.max_instances, idle_ttl_s=args.idle_ttl or None,
                  max_body_bytes=args.max_body_bytes, token=token)
    return 0
