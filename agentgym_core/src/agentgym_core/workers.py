"""``agentgym serve --workers N``: one environment server as N processes on one port.

Every worker accepts connections on the shared port (each has its own socket there, with
SO_REUSEPORT, and the kernel hands each new connection to one of them) and also listens on a private loopback port of its own. Worker ``k`` of ``n`` hands out
only instance ids equal to ``k`` modulo ``n`` (ids stay random, so they are still never reused
across server lifetimes), and :class:`WorkerFront` reads the id a request addresses (the
``/v1/instances/{id}`` path, the ``id`` field of AgentGym's ``/reset``, ``/step`` and ``/close``
bodies, ``?id=`` of ``/observation``) and, when the instance lives in another worker, passes the
request on to that worker's private port and its answer back. A request can therefore only ever
reach the worker that holds its instance: an id it does not know answers 404 there, as on one
process. ``/v1/step_batch`` is split by owner and the answers are put back in request order.

A client that keeps its connection (AgentGym's clients with a session, ``bench/env_server.py``)
creates and steps its instances on one worker and is never passed on; one that opens a connection
per request is passed on about ``(n-1)/n`` of the time, at the cost of one loopback hop.

Per worker: ``--max-instances``, the idle reaper, ``/v1/health``'s ``live_instances``. Shared:
the port and the creation count (AgentGym TextCraft's ``/create`` picks task = that count).
If a worker dies the server stops (its instances are gone; a silent half-server would be worse).
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import signal
import socket
import time
from typing import Any

from agentgym_core.asgi_body import TOO_LARGE, read_body, replay
from agentgym_core.direct_routes import body_too_large

__all__ = ["WorkerFront", "owner_of", "serve_workers"]

log = logging.getLogger(__name__)

_COMPAT_BODY_ROUTES = ("/reset", "/step", "/close")
_V1_INSTANCES = "/v1/instances/"


def owner_of(instance_id: int, workers: int) -> int:
    """The worker holding ``instance_id`` (ids are handed out as ``worker`` modulo ``workers``)."""
    return instance_id % workers


def _is_id(text: str) -> bool:
    """ASCII digits only (``"²".isdigit()`` is true too), short enough to be an instance id."""
    return text.isascii() and text.isdigit() and len(text) < 20


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Forwarder:
    """A minimal HTTP/1.1 client over kept-alive loopback connections to the sibling workers."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self._idle: dict[int, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    async def request(self, worker: int, method: str, target: str, body: bytes, content_type: bytes | None
                      ) -> tuple[int, bytes, bytes]:
        """(status, content-type, body) of the request as ``worker`` answers it."""
        port = self.ports[worker]
        idle = self._idle.setdefault(port, [])
        for attempt in range(2):  # a kept-alive connection the sibling closed meanwhile: one retry
            reader, writer = idle.pop() if idle else await asyncio.open_connection("127.0.0.1", port)
            try:
                head = [f"{method} {target} HTTP/1.1".encode(), b"host: 127.0.0.1",
                        b"content-length: " + str(len(body)).encode()]
                if content_type:
                    head.append(b"content-type: " + content_type)
                writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
                status, answer_type, answer, keep = await self._read_answer(reader)
            except (ConnectionError, asyncio.IncompleteReadError):
                writer.close()
                if attempt:
                    raise
                continue
            if keep:
                idle.append((reader, writer))
            else:
                writer.close()
            return status, answer_type, answer
        raise ConnectionError(f"worker {worker} did not answer")  # pragma: no cover - loop returns or raises

    @staticmethod
    async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes, bool]:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if b"content-length" in headers:
            body = await reader.readexactly(int(headers[b"content-length"]))
        else:  # not sent by these servers, but read to the end rather than guess
            body = await reader.read()
            return status, headers.get(b"content-type", b""), body, False
        keep = headers.get(b"connection", b"").lower() != b"close"
        return status, headers.get(b"content-type", b""), body, keep


class WorkerFront:
    """ASGI front of worker ``index``: requests for other workers' instances go to their owners.

    Args:
        app: this worker's application.
        index, workers: this worker's number and how many there are.
        ports: each worker's private loopback port, by worker number.
        compat_id_field: the id field of AgentGym's routes (None if the env has none).
        max_body_bytes: bodies are read here to find the id; larger ones answer 413 here.
    """

    def __init__(self, app: Any, *, index: int, workers: int, ports: list[int], compat_id_field: str | None,
                 max_body_bytes: int) -> None:
        self.app, self.index, self.workers = app, index, workers
        self.compat_id_field = compat_id_field
        self.max_body_bytes = max_body_bytes
        self.forwarder = _Forwarder(ports)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        owner: int | None = None
        if path.startswith(_V1_INSTANCES):
            head = path[len(_V1_INSTANCES):].split("/", 1)[0]
            owner = owner_of(int(head), self.workers) if _is_id(head) else None
        elif path == "/observation" and method == "GET" and self.compat_id_field:
            raw = _query_value(scope, self.compat_id_field)
            owner = owner_of(int(raw), self.workers) if raw is not None and _is_id(raw) else None
        elif method == "POST" and (path == "/v1/step_batch" or (self.compat_id_field and path in _COMPAT_BODY_ROUTES)):
            body = await self._body_or_answer(receive, send)
            if body is None:
                return
            receive = replay(body, receive)
            if path == "/v1/step_batch":
                if await self._split_batch(scope, body, send):
                    return
            else:
                owner = self._compat_owner(body)
            if owner is not None and owner != self.index:
                await self._pass_on(owner, scope, body, send)
                return
        if owner is not None and owner != self.index:
            body = await self._body_or_answer(receive, send)
            if body is not None:
                await self._pass_on(owner, scope, body, send)
            return
        await self.app(scope, receive, send)

    async def _body_or_answer(self, receive: Any, send: Any) -> bytes | None:
        """The request's body; None once a too-large body is answered (413) or the client left."""
        body = await read_body(receive, self.max_body_bytes)
        if body is TOO_LARGE:
            await body_too_large(self.max_body_bytes)({"type": "http"}, receive, send)
            return None
        return None if isinstance(body, dict) else body  # type: ignore[return-value]  # a dict: the client left

    def _compat_owner(self, body: bytes) -> int | None:
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            return None
        instance_id = _int_or_none(value.get(self.compat_id_field)) if isinstance(value, dict) else None
        return None if instance_id is None or instance_id < 0 else owner_of(instance_id, self.workers)

    async def _pass_on(self, owner: int, scope: Any, body: bytes, send: Any) -> None:
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target = target + b"?" + scope["query_string"]
        content_type = dict(scope.get("headers") or ()).get(b"content-type")
        try:
            status, answer_type, answer = await self.forwarder.request(
                owner, scope["method"], target.decode("latin-1"), body, content_type)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            status, answer_type = 503, b"application/json"
            answer = json.dumps({"error": {"code": "worker_unavailable", "details": None,
                                           "message": f"worker {owner}, which holds this instance, did not "
                                                      f"answer ({type(exc).__name__}); restart the server"}}).encode()
        headers = [(b"content-length", str(len(answer)).encode())]
        if answer_type:
            headers.append((b"content-type", answer_type))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    async def _split_batch(self, scope: Any, body: bytes, send: Any) -> bool:
        """Answer a step_batch whose instances live in several workers; False to leave it to the app."""
        try:
            steps = json.loads(body)["steps"]
            ids = [_int_or_none(item["instance_id"]) for item in steps]
        except (ValueError, RecursionError, KeyError, TypeError):
            return False  # malformed: the app says why
        if any(i is None or i < 0 for i in ids):
            return False
        owners = [owner_of(i, self.workers) for i in ids]  # type: ignore[arg-type]
        if all(o == self.index for o in owners):
            return False
        groups: dict[int, list[int]] = {}
        for position, owner in enumerate(owners):
            groups.setdefault(owner, []).append(position)

        async def ask(owner: int, positions: list[int]) -> tuple[int, bytes, bytes]:
            part = json.dumps({"steps": [steps[p] for p in positions]}).encode()
            return await self.forwarder.request(owner, "POST", "/v1/step_batch", part, b"application/json")

        try:
            answers = await asyncio.gather(*(ask(o, ps) for o, ps in groups.items()))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            answers = None
        if answers is None or any(status != 200 for status, _, _ in answers):
            bad = next(((s, t, a) for s, t, a in answers or () if s != 200), None)
            status, answer_type, answer = bad or (503, b"application/json", json.dumps(
                {"error": {"code": "worker_unavailable", "details": None,
                           "message": "a worker holding some of these instances did not answer"}}).encode())
        else:
            results: list[Any] = [None] * len(steps)
            for positions, (_, _, answer) in zip(groups.values(), answers, strict=True):
                for position, result in zip(positions, json.loads(answer)["results"], strict=True):
                    results[position] = result
            status, answer_type, answer = 200, b"application/json", json.dumps({"results": results}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(answer)).encode()), (b"content-type", answer_type)]})
        await send({"type": "http.response.body", "body": answer})
        return True


def _query_value(scope: Any, name: str) -> str | None:
    from urllib.parse import parse_qs

    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    return values[0] if values else None




def _listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _worker_main(index: int, workers: int, shared: socket.socket, private: socket.socket, ports: list[int],
                 serial: Any, app_options: dict[str, Any], serve_options: dict[str, Any]) -> None:
    """One worker process: build the app for shard ``index`` and serve both sockets."""
    import uvicorn

    from agentgym_core.plugins import get_plugin_manager
    from agentgym_core.server import create_app
    from agentgym_core.serving import uvicorn_config

    def next_serial() -> int:
        with serial.get_lock():
            serial.value += 1
            return serial.value - 1

    options = dict(app_options)
    env_cls = get_plugin_manager().env_class(options.pop("env"))
    app = create_app(env_cls, shard=(index, workers), next_serial=next_serial, **options)
    spec = getattr(env_cls, "agentgym_compat", None)
    front = WorkerFront(app, index=index, workers=workers, ports=ports,
                        compat_id_field=spec.id_field if spec is not None else None,
                        max_body_bytes=options.get("max_body_bytes", 1 << 20))
    uvicorn.Server(uvicorn_config(front, lifespan="on", **serve_options)).run(sockets=[shared, private])


def serve_workers(*, workers: int, host: str, port: int, app_options: dict[str, Any],
                  serve_options: dict[str, Any]) -> int:
    """Serve ``create_app(**app_options)`` (``env`` names the environment) as ``workers`` processes.

    Blocks until interrupted (SIGINT/SIGTERM) or until a worker exits; returns the exit status.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    context = multiprocessing.get_context("spawn")
    # One listening socket per worker on the same port (SO_REUSEPORT): the kernel spreads new
    # connections over them evenly, where one shared socket gives most to whichever worker wakes first.
    first = _listening_socket(host, port, reuse_port=True)
    shared = [first, *(_listening_socket(host, first.getsockname()[1], reuse_port=True) for _ in range(workers - 1))]
    privates = [_listening_socket("127.0.0.1", 0) for _ in range(workers)]
    ports = [sock.getsockname()[1] for sock in privates]
    serial = context.Value("q", 0)
    processes = [context.Process(target=_worker_main, name=f"agentgym-worker-{k}", daemon=False,
                                 args=(k, workers, shared[k], privates[k], ports, serial, app_options, serve_options))
                 for k in range(workers)]
    for process in processes:
        process.start()
    bound = first.getsockname()[1]
    print(f"serving {app_options.get('env')!r} with {workers} workers on http://{host}:{bound} "
          f"(docs: http://{host}:{bound}/docs)", flush=True)
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stopping and all(p.is_alive() for p in processes):
            time.sleep(0.2)
        dead = [p.name for p in processes if not p.is_alive()]
        if dead and not stopping:
            log.error("%s exited; stopping the server (its instances are gone)", ", ".join(dead))
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=15)
            if process.is_alive():
                process.kill()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sock in (*shared, *privates):
            sock.close()
    return 0 if stopping else 1
