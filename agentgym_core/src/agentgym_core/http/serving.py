"""Run environment servers: in a background thread of this process, or as ``agentgym serve``.

Every server started here closes connections of clients that send their request too slowly
(a slow-loris client would otherwise hold a connection and a parser forever): the request line
and headers must arrive within ``header_timeout_s`` of the connection opening (or of the previous
response, on a kept-alive connection), and the body within ``body_timeout_s`` after the headers.
Such a client gets ``408 request_timeout`` in the protocol's error shape, then the connection is
closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from agentgym_core.env import Env
from agentgym_core.http.protocol import DEFAULT_BODY_TIMEOUT_S, DEFAULT_HEADER_TIMEOUT_S
from agentgym_core.http.server import create_app

__all__ = ["DEFAULT_BODY_TIMEOUT_S", "DEFAULT_HEADER_TIMEOUT_S", "listening_socket", "serve_app", "serve_env",
           "serve_forever", "uvicorn_config"]

log = logging.getLogger(__name__)


def _timeout_answer() -> bytes:
    body = json.dumps({"error": {"code": "request_timeout", "details": None,
                                 "message": "the request's headers or body arrived too slowly; the connection "
                                            "is closed"}}).encode()
    head = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n")
    return head + body


def deadline_protocol(header_timeout_s: float, body_timeout_s: float) -> type | str:
    """uvicorn's httptools protocol with request deadlines (``"auto"`` if httptools is absent)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - uvicorn[standard] brings httptools
        log.warning("httptools is not installed: slow clients are not timed out (pip install 'uvicorn[standard]')")
        return "auto"

    class DeadlineProtocol(HttpToolsProtocol):  # type: ignore[misc, valid-type]
        """Closes connections whose request headers or body arrive too slowly."""

        _deadline: asyncio.TimerHandle | None = None

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete or not self.cycle.response_started:
                self.transport.write(_timeout_answer())
            self.transport.close()

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm(header_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:
                self._arm(header_timeout_s)

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._arm(body_timeout_s)

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

    return DeadlineProtocol


def uvicorn_config(app: Any, *, header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
                   body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S, **options: Any) -> uvicorn.Config:
    """A uvicorn config for an environment server, with slow-client deadlines."""
    if not header_timeout_s > 0 or not body_timeout_s > 0:
        raise ValueError(f"header and body timeouts must be positive; got {header_timeout_s}, {body_timeout_s}")
    options.setdefault("log_level", "warning")
    # Per-request costs that buy nothing here: uvicorn formats every access-log line before the
    # logger drops it below info level, and parses X-Forwarded-* headers for client addresses that
    # an environment server never reads.
    options.setdefault("access_log", options["log_level"] in ("trace", "debug", "info"))
    options.setdefault("proxy_headers", False)
    options.setdefault("timeout_keep_alive", 5)
    return uvicorn.Config(app, http=deadline_protocol(header_timeout_s, body_timeout_s), **options)


@contextlib.contextmanager
def serve_app(app: Any, *, host: str = "127.0.0.1", startup_timeout_s: float = 30.0,
              header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
              body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S) -> Iterator[str]:
    """Serve an ASGI app on a free port of ``host`` in a background thread; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn_config(app, header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s,
                            lifespan="on", timeout_graceful_shutdown=5)
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
def serve_env(env_cls: type[Env], env_kwargs: dict[str, Any] | None = None, *,
              header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S, body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
              **server_options: Any) -> Iterator[str]:
    """Serve ``env_cls`` with :func:`agentgym_core.http.server.create_app`; yield the base URL.

    ``server_options`` go to ``create_app`` (``max_instances``, ``idle_ttl_s``, ...).
    """
    app = create_app(env_cls, env_kwargs=env_kwargs, **server_options)
    with serve_app(app, header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s) as url:
        yield url


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening (port 0: a free one the OS picks; ``getsockname`` says which).

    A server binds it before its slow start-up (loading a model) and prints the address only after, so a
    port in use fails at once, in one line (``ValueError``), and the address printed is the one served.
    """
    if not 0 <= port <= 65535:
        raise ValueError(f"--port must be 0-65535 (0 picks a free one), got {port}")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is no conflict
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port} ({exc.strerror}); stop what holds it or pick another "
                         "--port (0 picks a free one)") from None
    sock.listen(2048)
    return sock


def serve_forever(env_cls: type[Env], env_kwargs: dict[str, Any] | None = None, *, host: str = "127.0.0.1",
                  port: int = 8000, name: str | None = None, header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
                  body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S, **server_options: Any) -> None:
    """Serve ``env_cls`` on ``host:port`` in this thread until interrupted: ``agentgym serve`` for a registered
    environment, and a script's own ``Env`` class (no plugin needed) that a recipe then uses with ``url:``.

    Prints ``serving NAME on http://HOST:PORT`` once the port is listening (port 0: the free one it got).

    ``name`` defaults to ``env_cls.name``; ``server_options`` go to
    :func:`agentgym_core.http.server.create_app` (``max_instances``, ``token``, ...).
    """
    name = name or env_cls.name
    app = create_app(env_cls, env_kwargs=env_kwargs or {}, name=name, **server_options)
    # Bound and listening before the line is printed: the address printed is served from then on (port 0
    # prints the free port the OS gave), and no other process can take the port in between.
    sock = listening_socket(host, port)
    port = sock.getsockname()[1]
    print(f"serving {name!r} on http://{host}:{port} (docs: http://{host}:{port}/docs)", flush=True)
    uvicorn.Server(uvicorn_config(app, header_timeout_s=header_timeout_s,
                                  body_timeout_s=body_timeout_s)).run(sockets=[sock])
