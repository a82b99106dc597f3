"""Run an environment server on loopback inside the current process (tests, notebooks, benches)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from agentgym_core.env import Env
from agentgym_core.server import create_app

__all__ = ["serve_app", "serve_env"]


@contextlib.contextmanager
def serve_app(app: Any, *, host: str = "127.0.0.1", startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Serve an ASGI app on a free port of ``host`` in a background thread; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"serve:{port}")
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server thread exited during startup; see the log above")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise TimeoutError(f"server did not start within {startup_timeout_s} s")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@contextlib.contextmanager
def serve_env(env_cls: type[Env], env_kwargs: dict[str, Any] | None = None, **server_options: Any) -> Iterator[str]:
    """Serve ``env_cls`` with :func:`agentgym_core.server.create_app`; yield the base URL.

    ``server_options`` go to ``create_app`` (``max_instances``, ``idle_ttl_s``, ...).
    """
    app = create_app(env_cls, env_kwargs=env_kwargs, **server_options)
    with serve_app(app) as url:
        yield url
