"""``agentgym serve --workers N``: one environment server as N processes on one port.

Every worker accepts connections on the shared port (each has its own socket there, with
SO_REUSEPORT, and the kernel hands each new connection to one of them) and also listens on a private
loopback port of its own. Worker ``k`` of ``n`` hands out only instance ids equal to ``k`` modulo
``n`` (ids stay random, so they are still never reused across server lifetimes), and
:class:`WorkerFront` reads the id a request addresses (the ``/v1/instances/{id}`` path, the ``id``
field of AgentGym's ``/reset``, ``/step`` and ``/close`` bodies, ``?id=`` of ``/observation``) and,
when the instance lives in another worker, passes the request on to that worker's private port and
its answer back. So the server keeps the guarantees of one process:

* a request only ever reaches the worker that holds its instance (an id it does not know answers
  404 there, as on one process); ids are read strictly (``+7``, ``07``, ``%207`` are not 7), and a
  query that names its id twice is left to the app, which refuses it;
* a create with a ``request_id`` goes to the worker the id hashes to, so a retried create answers
  the first one's instance (and a different request under the same id answers 409) whichever
  connection it arrives on;
* ``/v1/step_batch`` is validated whole before any part runs (an invalid batch is refused by the
  worker that received it, with the client's own indices), then split by owner and the answers put
  back in request order;
* ``/v1/health`` sums every worker's counts and lists each worker;
* an MCP ``tools/call`` goes to the worker of the episode it names;
* OpenEnv's shared HTTP episode (``/reset``, ``/step``, ``/state`` with OpenEnv's bodies) lives in
  worker 0; an OpenEnv WebSocket session lives in the worker that accepted its connection.

The parent process health-checks every worker (a heartbeat on its private port, answered on the
worker's event loop) and restarts one that died, or that left its heartbeat unanswered for
``worker_timeout_s`` (hung, stopped): it is killed, so its socket leaves the port's group and
connections stop going to it, and a new worker takes its number and ports. Its instances are gone:
while it is away requests for them answer ``503 worker_lost``, afterwards ``404 unknown_instance``
with a message saying the worker was restarted. The other workers' episodes go on untouched.
A worker that dies or hangs before its app starts stops the whole server (a configuration error
would only repeat). Workers end with their supervisor, however it ends (``kill -9`` included): a
worker with no supervisor would serve on unwatched and hold the port against a new server.

A client that keeps its connection (AgentGym's clients with a session, ``bench/env_server.py``)
creates and steps its instances on one worker and is never passed on; one that opens a connection
per request is passed on about ``(n-1)/n`` of the time, at the cost of one loopback hop.

Per worker: ``--max-instances`` and the idle reaper. Shared: the port and the creation count
(AgentGym TextCraft's ``/create`` picks task = that count).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs

from agentgym_core.http import protocol as p
from agentgym_core.http.asgi_body import TOO_LARGE, read_body, replay
from agentgym_core.http.auth import bearer, gate
from agentgym_core.http.direct_routes import body_too_large
from agentgym_core.http.mcp_face import MCP_PATH
from agentgym_core.http.openenv_face import is_openenv_body
from agentgym_core.http.protocol import DEFAULT_WORKER_TIMEOUT_S

__all__ = ["DEFAULT_WORKER_TIMEOUT_S", "WorkerFront", "create_owner", "owner_of", "serve_workers"]

log = logging.getLogger(__name__)

FORWARD_CONNECT_TIMEOUT_S = 5.0
FORWARD_TIMEOUT_S = 600.0  # an env call may be slow; a hung worker is killed long before this
HEARTBEAT_PATH = "/_agentgym/heartbeat"
FORWARDED = b"x-agentgym-forwarded"  # a request a sibling passed on: answer it here, route nothing
ORPHAN_CHECK_S = 1.0  # how often a worker looks for its supervisor where the kernel cannot tell it
ORPHAN_GRACE_S = 10.0  # how long an orphaned worker may take to shut down before it exits outright

# Worker states, shared with the fronts (one byte each).
STARTING, OK, LOST = 0, 1, 2
_STATE_NAMES = {STARTING: "starting", OK: "ok", LOST: "lost"}

_COMPAT_BODY_ROUTES = ("/reset", "/step", "/close")
OPENENV_BODY_ROUTES = ("/reset", "/step")
OPENENV_HTTP_OWNER = 0  # the worker that holds OpenEnv's shared HTTP episode (/reset, /step, /state)
_V1_INSTANCES = "/v1/instances/"
_JSON = b"application/json"
# Headers a passed-on request keeps besides its content type: MCP's transport reads these (and its Mcp-*).
_PASSED_HEADERS = (b"accept", b"last-event-id")


def owner_of(instance_id: int, workers: int) -> int:
    """The worker holding ``instance_id`` (ids are handed out as ``worker`` modulo ``workers``)."""
    return instance_id % workers


def create_owner(request_id: str, workers: int) -> int:
    """The worker that creates the instance of ``request_id`` (the same in every process)."""
    return zlib.crc32(request_id.encode("utf-8", "surrogatepass")) % workers


def _is_id(text: str) -> bool:
    """Plain decimal digits, as the app reads an id (:func:`agentgym_core.http.protocol.strict_id`)."""
    try:
        p.strict_id(text)
    except ValueError:
        return False
    return True


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _error(status: int, code: str, message: str) -> tuple[int, bytes, bytes]:
    return status, _JSON, json.dumps({"error": {"code": code, "details": None, "message": message}}).encode()


def _lost(worker: int) -> tuple[int, bytes, bytes]:
    return _error(503, "worker_lost", f"worker {worker} of this server, which holds this instance, stopped "
                  "answering and is being restarted; its instances are gone: create a new one")


class _Forwarder:
    """A minimal HTTP/1.1 client over kept-alive loopback connections to the sibling workers."""

    def __init__(self, ports: list[int], token: str | None, timeout_s: float = FORWARD_TIMEOUT_S) -> None:
        self.ports, self.token, self.timeout_s = ports, token, timeout_s
        self._idle: dict[int, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    async def request(self, worker: int, method: str, target: str, body: bytes, content_type: bytes | None,
                      *, timeout_s: float | None = None, headers: Sequence[bytes] = ()) -> tuple[int, bytes, bytes]:
        """(status, content-type, body) of the request as ``worker`` answers it; raises OSError,
        asyncio.TimeoutError or IncompleteReadError when it does not answer. ``headers``: more header
        lines (``b"name: value"``) to send."""
        return await asyncio.wait_for(self._request(worker, method, target, body, content_type, headers),
                                      timeout_s or self.timeout_s)

    async def _request(self, worker: int, method: str, target: str, body: bytes, content_type: bytes | None,
                       headers: Sequence[bytes]) -> tuple[int, bytes, bytes]:
        port = self.ports[worker]
        idle = self._idle.setdefault(port, [])
        for attempt in range(2):  # a kept-alive connection the sibling closed meanwhile: one retry, on a new one
            if idle and not attempt:
                reader, writer = idle.pop()
            else:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port),
                                                        FORWARD_CONNECT_TIMEOUT_S)
            try:
                head = [f"{method} {target} HTTP/1.1".encode(), b"host: 127.0.0.1", FORWARDED + b": 1",
                        b"content-length: " + str(len(body)).encode()]
                if content_type:
                    head.append(b"content-type: " + content_type)
                head.extend(headers)
                if self.token is not None:
                    head.append(b"authorization: " + bearer(self.token))
                writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
                status, answer_type, answer, keep = await self._read_answer(reader)
            except (ConnectionError, asyncio.IncompleteReadError):
                writer.close()
                if attempt:
                    raise
                continue
            except BaseException:  # timed out or cancelled: the connection is mid-answer, not reusable
                writer.close()
                raise
            if keep:
                idle.append((reader, writer))
            else:
                writer.close()
            return status, answer_type, answer
        raise ConnectionError(f"worker {worker} did not answer")  # pragma: no cover - loop returns or raises

    def forget(self, worker: int) -> None:
        """Drop kept-alive connections to ``worker`` (it was restarted)."""
        for _, writer in self._idle.pop(self.ports[worker], []):
            writer.close()

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
        states: each worker's state (``STARTING``, ``OK``, ``LOST``), kept by the parent; None: all OK.
        restarts: how many times each worker was restarted, kept by the parent.
        token: the shared token every request must carry (checked here, and sent on when passing on).
    """

    def __init__(self, app: Any, *, index: int, workers: int, ports: list[int], compat_id_field: str | None,
                 max_body_bytes: int, states: Any = None, restarts: Any = None, token: str | None = None) -> None:
        self.app, self.index, self.workers = app, index, workers
        self.compat_id_field = compat_id_field
        self.max_body_bytes = max_body_bytes
        self.states = states
        self.restarts = restarts
        self.token = token
        self.forwarder = _Forwarder(ports, token)
        self._seen_restarts = [0] * workers
        self._said_up = False

    def _state(self, worker: int) -> int:
        return OK if self.states is None else self.states[worker]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self._said_up:  # once: the shared array takes a lock, and this runs on every request
            self._said_up = True
            if self.states is not None and self.states[self.index] == STARTING:
                # Up (uvicorn's start-up reaches the app first): from now on the parent counts this worker's
                # silence, even if it hangs before the parent's first heartbeat reaches it.
                self.states[self.index] = OK
        if scope["type"] in ("http", "websocket") and self.token is not None:
            admitted = await gate(scope, send, self.token)
            if admitted is None:
                return
            scope = admitted
        if scope["type"] != "http":  # lifespan, and OpenEnv's WebSocket sessions: each lives where it connected
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path == HEARTBEAT_PATH:
            await self._answer(send, 200, _JSON, json.dumps(self._heartbeat_answer()).encode())
            return
        if any(name == FORWARDED for name, _ in scope.get("headers") or ()):
            await self.app(scope, receive, send)  # a sibling routed it here already
            return
        if path == f"{p.PREFIX}/health" and method == "GET" and self.workers > 1:
            await self._answer(send, *await self._health())
            return
        owner: int | None = None
        if path.startswith(_V1_INSTANCES):
            head = path[len(_V1_INSTANCES):].split("/", 1)[0]
            owner = owner_of(int(head), self.workers) if _is_id(head) else None
        elif path == "/observation" and method == "GET" and self.compat_id_field:
            raw = _single_query_value(scope, self.compat_id_field)
            owner = owner_of(int(raw), self.workers) if raw is not None and _is_id(raw) else None
        elif path == "/state" and method == "GET":
            owner = OPENENV_HTTP_OWNER
        elif method == "POST" and (path in ("/v1/step_batch", "/v1/instances", MCP_PATH, *OPENENV_BODY_ROUTES)
                                   or (self.compat_id_field and path in _COMPAT_BODY_ROUTES)):
            body = await self._body_or_answer(receive, send)
            if body is None:
                return
            receive = replay(body, receive)
            if path == "/v1/step_batch":
                if await self._split_batch(body, send):
                    return
            elif path == "/v1/instances":
                owner = self._create_owner(body)
            elif path == MCP_PATH:
                owner = self._mcp_owner(body)
            else:
                owner = self._compat_owner(body, path)
            if owner is not None and owner != self.index:
                await self._pass_on(owner, scope, body, send)
                return
        if owner is not None and owner != self.index:
            body = await self._body_or_answer(receive, send)
            if body is not None:
                await self._pass_on(owner, scope, body, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    async def _answer(send: Any, status: int, content_type: bytes, body: bytes) -> None:
        headers = [(b"content-length", str(len(body)).encode())]
        if content_type:
            headers.append((b"content-type", content_type))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _body_or_answer(self, receive: Any, send: Any) -> bytes | None:
        """The request's body; None once a too-large body is answered (413) or the client left."""
        body = await read_body(receive, self.max_body_bytes)
        if body is TOO_LARGE:
            await body_too_large(self.max_body_bytes)({"type": "http"}, receive, send)
            return None
        return None if isinstance(body, dict) else body  # type: ignore[return-value]  # a dict: the client left

    def _mcp_owner(self, body: bytes) -> int | None:
        """The worker of the episode an MCP ``tools/call`` names; None for any other message."""
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            return None
        params = value.get("params") if isinstance(value, dict) and value.get("method") == "tools/call" else None
        arguments = params.get("arguments") if isinstance(params, dict) else None
        episode = _int_or_none(arguments.get("episode")) if isinstance(arguments, dict) else None
        return None if episode is None or episode < 0 else owner_of(episode, self.workers)

    def _compat_owner(self, body: bytes, path: str) -> int | None:
        """The worker of an AgentGym body's instance, or of OpenEnv's shared HTTP episode."""
        try:
            value = json.loads(body) if body.strip() else None
        except (ValueError, RecursionError):
            return None
        if path in OPENENV_BODY_ROUTES and is_openenv_body(value, self.compat_id_field):
            return OPENENV_HTTP_OWNER
        instance_id = _int_or_none(value.get(self.compat_id_field)) if isinstance(value, dict) else None
        return None if instance_id is None or instance_id < 0 else owner_of(instance_id, self.workers)

    def _create_owner(self, body: bytes) -> int | None:
        """The worker a create with a ``request_id`` belongs to; the first live one after it if it is lost."""
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            return None
        request_id = value.get("request_id") if isinstance(value, dict) else None
        if not isinstance(request_id, str):
            return None  # no id (any worker may create) or a malformed one (the app says why)
        first = create_owner(request_id, self.workers)
        for step in range(self.workers):
            candidate = (first + step) % self.workers
            if self._state(candidate) != LOST:
                return candidate
        return first

    async def _ask(self, owner: int, method: str, target: str, body: bytes, content_type: bytes | None,
                   timeout_s: float | None = None, headers: Sequence[bytes] = ()) -> tuple[int, bytes, bytes]:
        """The owner's answer; ``503 worker_lost`` when it is lost or does not answer."""
        if self.restarts is not None and self.restarts[owner] != self._seen_restarts[owner]:
            self._seen_restarts[owner] = self.restarts[owner]
            self.forwarder.forget(owner)
        if self._state(owner) == LOST:
            return _lost(owner)
        try:
            return await self.forwarder.request(owner, method, target, body, content_type, timeout_s=timeout_s,
                                                headers=headers)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
            return _lost(owner)

    async def _pass_on(self, owner: int, scope: Any, body: bytes, send: Any) -> None:
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target = target + b"?" + scope["query_string"]
        given = scope.get("headers") or ()
        content_type = dict(given).get(b"content-type")
        passed = [name + b": " + value for name, value in given
                  if name in _PASSED_HEADERS or name.startswith(b"mcp-")]
        await self._answer(send, *await self._ask(owner, scope["method"], target.decode("latin-1"), body,
                                                  content_type, headers=passed))

    def _heartbeat_answer(self) -> dict[str, Any]:
        table = self.app.state.table
        return {"worker": self.index, "pid": os.getpid(), "live_instances": len(table),
                "max_instances": table.max_instances}

    async def _health(self) -> tuple[int, bytes, bytes]:
        """``/v1/health`` of the whole server: every worker's counts summed, each worker listed."""
        async def one(worker: int) -> p.WorkerHealth:
            restarts = self.restarts[worker] if self.restarts is not None else 0
            if worker == self.index:
                return p.WorkerHealth(status="ok", restarts=restarts, **self._heartbeat_answer())
            status, _, answer = await self._ask(worker, "GET", HEARTBEAT_PATH, b"", None, timeout_s=5.0)
            if status == 200:
                return p.WorkerHealth(status="ok", restarts=restarts, **json.loads(answer))
            state = self._state(worker)
            return p.WorkerHealth(worker=worker, status="starting" if state == STARTING else "lost", restarts=restarts)

        workers = list(await asyncio.gather(*(one(k) for k in range(self.workers))))
        from agentgym_core.http.server import _server_version

        health = p.Health(
            status="ok" if all(w.status == "ok" for w in workers) else "degraded",
            env=self.app.state.env_name, server_version=_server_version(),
            live_instances=sum(w.live_instances for w in workers),
            max_instances=sum(w.max_instances for w in workers), workers=workers)
        return 200, _JSON, health.model_dump_json().encode()

    async def _split_batch(self, body: bytes, send: Any) -> bool:
        """Answer a step_batch whose instances live in several workers; False to leave it to the app.

        A batch that does not validate is left to this worker's app, which refuses it whole (422,
        naming the client's own indices) before any step runs, as one process does.
        """
        try:
            batch = p.BatchStep.model_validate_json(body)
        except ValueError:
            return False
        owners = [owner_of(item.instance_id, self.workers) for item in batch.steps]
        if all(o == self.index for o in owners):
            return False
        groups: dict[int, list[int]] = {}
        for position, owner in enumerate(owners):
            groups.setdefault(owner, []).append(position)

        async def ask(owner: int, positions: list[int]) -> tuple[int, bytes, bytes]:
            part = json.dumps({"steps": [batch.steps[i].model_dump() for i in positions]}).encode()
            return await self._ask(owner, "POST", "/v1/step_batch", part, _JSON)

        answers = await asyncio.gather(*(ask(o, ps) for o, ps in groups.items()))
        results: list[Any] = [None] * len(batch.steps)
        for positions, (status, _, answer) in zip(groups.values(), answers, strict=True):
            if status == 200:
                for position, result in zip(positions, json.loads(answer)["results"], strict=True):
                    results[position] = result
                continue
            # The part never ran (its worker was lost or refused it): each of its steps says why.
            try:
                error = json.loads(answer)["error"]
            except (ValueError, KeyError, TypeError):
                error = {"code": "worker_lost", "message": answer.decode("utf-8", "replace")[:300]}
            for position in positions:
                results[position] = {"instance_id": batch.steps[position].instance_id, "status": status,
                                     "result": None, "error": {"code": error.get("code"),
                                                               "message": error.get("message"), "details": None}}
        await self._answer(send, 200, _JSON, json.dumps({"results": results}).encode())
        return True


def _single_query_value(scope: Any, name: str) -> str | None:
    """The query's ``name``, or None when it is absent or given more than once (the app refuses that)."""
    values = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True).get(name)
    return values[0] if values and len(values) == 1 else None


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


def _end_with(supervisor: int) -> None:
    """Make this worker end (SIGTERM, then exit) when the process ``supervisor`` is gone.

    On Linux the kernel signals the worker the moment its parent dies (``PR_SET_PDEATHSIG``); a
    thread that watches the parent's pid covers other systems, and a supervisor that died before
    the signal was asked for.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(ORPHAN_CHECK_S)
        log.error("the supervisor (pid %d) is gone; this worker stops", supervisor)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful shutdown: the port is let go first
        time.sleep(ORPHAN_GRACE_S)
        os._exit(1)  # shutdown hung on a connection or an environment's close

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


def _worker_main(index: int, workers: int, shared: socket.socket, private: socket.socket, ports: list[int],
                 serial: Any, states: Any, restarts: Any, app_options: dict[str, Any],
                 serve_options: dict[str, Any], supervisor: int) -> None:
    """One worker process: build the app for shard ``index`` and serve both sockets until it is
    stopped or its ``supervisor`` process is gone."""
    _end_with(supervisor)
    import uvicorn

    from agentgym_core.http.server import create_app
    from agentgym_core.http.serving import uvicorn_config
    from agentgym_core.plugins import get_plugin_manager

    def next_serial() -> int:
        with serial.get_lock():
            serial.value += 1
            return serial.value - 1

    options = dict(app_options)
    env_cls = get_plugin_manager().env_class(options.pop("env"))
    # The front checks the token, once: it strips a path token (/token/T/...) before the app sees the
    # request, so an app that checked again would refuse every request that carried it that way.
    token = options.pop("token", None)
    app = create_app(env_cls, shard=(index, workers), next_serial=next_serial, **options)
    if restarts[index]:
        app.state.table.lost_note = (f" (worker {index} of this server was restarted after it stopped answering; "
                                     "the instances it held then are gone)")
    spec = getattr(env_cls, "agentgym_compat", None)
    front = WorkerFront(app, index=index, workers=workers, ports=ports,
                        compat_id_field=spec.id_field if spec is not None else None,
                        max_body_bytes=options.get("max_body_bytes", 1 << 20), states=states, restarts=restarts,
                        token=token)
    uvicorn.Server(uvicorn_config(front, lifespan="on", **serve_options)).run(sockets=[shared, private])


def _heartbeat(port: int, token: str | None, timeout_s: float) -> bool:
    """Whether the worker on ``port`` answers its heartbeat within ``timeout_s``."""
    request = f"GET {HEARTBEAT_PATH} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n".encode()
    if token is not None:
        request += b"authorization: " + bearer(token) + b"\r\n"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(request + b"\r\n")
            return sock.recv(16).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


class _Supervisor:
    """The parent's view of the workers: start, health-check, restart."""

    def __init__(self, *, workers: int, host: str, port: int, app_options: dict[str, Any],
                 serve_options: dict[str, Any], worker_timeout_s: float, startup_timeout_s: float) -> None:
        self.workers, self.host = workers, host
        self.app_options, self.serve_options = app_options, serve_options
        self.worker_timeout_s, self.startup_timeout_s = worker_timeout_s, startup_timeout_s
        self.context = multiprocessing.get_context("spawn")
        # One listening socket per worker on the same port (SO_REUSEPORT): the kernel spreads new
        # connections over them evenly, where one shared socket gives most to whichever worker wakes first.
        first = _listening_socket(host, port, reuse_port=True)
        self.port = first.getsockname()[1]
        self.pending = {0: first}
        privates = [_listening_socket("127.0.0.1", 0) for _ in range(workers)]
        self.ports = [sock.getsockname()[1] for sock in privates]
        self.pending_private = dict(enumerate(privates))
        self.serial = self.context.Value("q", 0)
        self.states = self.context.Array("b", [STARTING] * workers)
        self.restarts = self.context.Array("i", [0] * workers)
        self.processes: list[Any] = [None] * workers
        self.started_at = [0.0] * workers
        self.last_ok: list[float | None] = [None] * workers
        self.retired: set[int] = set()

    def start(self, k: int) -> None:
        shared = self.pending.pop(k, None) or _listening_socket(self.host, self.port, reuse_port=True)
        private = self.pending_private.pop(k, None) or _listening_socket("127.0.0.1", self.ports[k])
        process = self.context.Process(
            target=_worker_main, name=f"agentgym-worker-{k}", daemon=False,
            args=(k, self.workers, shared, private, self.ports, self.serial, self.states, self.restarts,
                  self.app_options, self.serve_options, os.getpid()))
        self.states[k] = STARTING
        process.start()
        # The worker holds its own copies now; the parent's would keep a dead worker's socket in the
        # port's group (connections queued to nobody) after the worker is gone.
        shared.close()
        private.close()
        self.processes[k], self.started_at[k], self.last_ok[k] = process, time.monotonic(), None

    def check(self) -> str | None:
        """Heartbeat every worker and restart the dead or silent; a message when the server must stop."""
        now = time.monotonic()
        for k, process in enumerate(self.processes):
            if k in self.retired:
                continue
            alive = process.is_alive()
            answered = alive and _heartbeat(self.ports[k], self.app_options.get("token"),
                                            min(1.0, self.worker_timeout_s / 2))
            now = time.monotonic()
            if answered:
                self.last_ok[k] = now
                self.states[k] = OK
                continue
            if self.last_ok[k] is None and self.states[k] == OK:  # it said it serves: count its silence from now
                self.last_ok[k] = now
            if self.last_ok[k] is None:  # never served: its start-up failed or hangs
                if not alive:
                    return f"{process.name} exited with status {process.exitcode} before it served"
                if now - self.started_at[k] > self.startup_timeout_s:
                    return f"{process.name} did not answer within {self.startup_timeout_s:.0f} s of starting"
                continue
            if alive and now - self.last_ok[k] < self.worker_timeout_s:
                continue
            why = (f"exited with status {process.exitcode}" if not alive
                   else f"left its heartbeat unanswered for {now - self.last_ok[k]:.1f} s")
            log.error("%s %s; restarting it (its instances are gone, the other workers' go on)", process.name, why)
            print(f"{process.name} {why}; restarting it", flush=True)
            self.restart(k)
        return None

    def restart(self, k: int) -> None:
        self.states[k] = LOST
        process = self.processes[k]
        if process.is_alive():
            process.kill()  # SIGKILL also ends a stopped (SIGSTOP) process
        process.join(timeout=10)
        self.restarts[k] += 1
        try:
            self.start(k)
        except OSError as exc:  # its private port was taken meanwhile: serve on without it
            log.error("cannot restart worker %d (%s); the server goes on without it", k, exc)
            self.retired.add(k)

    def stop(self) -> None:
        for process in self.processes:
            if process is not None and process.is_alive():
                process.terminate()
        for process in self.processes:
            if process is None:
                continue
            process.join(timeout=15)
            if process.is_alive():
                process.kill()
        for sock in (*self.pending.values(), *self.pending_private.values()):
            sock.close()


def serve_workers(*, workers: int, host: str, port: int, app_options: dict[str, Any],
                  serve_options: dict[str, Any], worker_timeout_s: float = DEFAULT_WORKER_TIMEOUT_S,
                  startup_timeout_s: float = 600.0) -> int:
    """Serve ``create_app(**app_options)`` (``env`` names the environment) as ``workers`` processes.

    Blocks until interrupted (SIGINT/SIGTERM), restarting workers that die or hang (see the module
    docstring); returns the exit status (1 when a worker failed before it ever served).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if not worker_timeout_s > 0:
        raise ValueError(f"worker_timeout_s must be a positive number of seconds, got {worker_timeout_s!r}")
    supervisor = _Supervisor(workers=workers, host=host, port=port, app_options=app_options,
                             serve_options=serve_options, worker_timeout_s=worker_timeout_s,
                             startup_timeout_s=startup_timeout_s)
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    failure = None
    try:
        for k in range(workers):
            supervisor.start(k)
        bound = supervisor.port
        print(f"serving {app_options.get('env')!r} with {workers} workers on http://{host}:{bound} "
              f"(docs: http://{host}:{bound}/docs)", flush=True)
        interval = min(0.5, worker_timeout_s / 4)
        while not stopping and failure is None:
            time.sleep(interval)
            if not stopping:
                failure = supervisor.check()
        if failure is not None:
            log.error("%s; stopping the server", failure)
            print(f"error: {failure}; stopping the server", flush=True)
    finally:
        supervisor.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 1 if failure is not None else 0
