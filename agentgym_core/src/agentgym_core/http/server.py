"""An HTTP server generated from any :class:`~agentgym_core.env.Env` class.

Environment packages never write routes: ``create_app(MyEnv)`` serves the protocol of
:mod:`agentgym_core.http.protocol` (with an OpenAPI page at ``/docs``), OpenEnv's routes
(:mod:`agentgym_core.http.openenv_face`), MCP tools (:mod:`agentgym_core.http.mcp_face`), plus AgentGym's legacy routes when the class sets
``agentgym_compat`` (see :mod:`agentgym_core.http.compat`).

Handlers are plain functions, so FastAPI runs them in its worker threads; the instance table
serialises calls on one instance and lets different instances run in parallel. An environment whose
calls take microseconds (``Env.inline_calls = True``: BabyAI, TextCraft) is called on the event
loop instead: the hop to a worker thread and back costs more than such a step, and it is what
bounded TextCraft's throughput (bench/env_server.py). AgentGym's legacy routes, which read the raw
request, are also called without FastAPI's per-request stack (:mod:`agentgym_core.http.direct_routes`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentgym_core.env import Env
from agentgym_core.http import protocol as p
from agentgym_core.http.asgi_body import TOO_LARGE, declared_too_large, read_body, replay
from agentgym_core.http.compat import add_agentgym_routes
from agentgym_core.http.direct_routes import DirectRouteApp, body_too_large
from agentgym_core.http.errors import ServerError, error_status, parse_json_body
from agentgym_core.http.instances import Instance, InstanceTable
from agentgym_core.http.mcp_face import MCP_PATH, MCPFace
from agentgym_core.http.openenv_face import add_openenv_routes

__all__ = ["ServerError", "create_app", "error_status", "validate_server_options"]

log = logging.getLogger(__name__)

DEFAULT_MAX_INSTANCES = p.DEFAULT_MAX_INSTANCES
DEFAULT_IDLE_TTL_S = p.DEFAULT_IDLE_TTL_S
DEFAULT_MAX_BODY_BYTES = p.DEFAULT_MAX_BODY_BYTES

# Statuses Starlette raises itself (routing, unreadable bodies) -> the protocol's codes.
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


def validate_server_options(*, max_instances: int, idle_ttl_s: float | None, max_body_bytes: int) -> None:
    """Raise ValueError, saying what to change, for options no server should run with."""
    if isinstance(max_instances, bool) or not isinstance(max_instances, int) or max_instances < 1:
        raise ValueError(f"max_instances must be an integer >= 1, got {max_instances!r}")
    if idle_ttl_s is not None and not (isinstance(idle_ttl_s, int | float) and 0 < idle_ttl_s < float("inf")):
        raise ValueError(f"idle_ttl_s must be a positive finite number of seconds, or None for never; got {idle_ttl_s!r}")
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1024:
        raise ValueError(f"max_body_bytes must be an integer >= 1024, got {max_body_bytes!r}")


class _BodyLimit:
    """ASGI middleware: refuse bodies over ``limit`` bytes with 413, declared or streamed."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if declared_too_large(scope, self.limit):
            await self._refuse(send)
            return
        # Read the whole body first: FastAPI turns errors raised while it reads into a 400, so the
        # limit must be enforced before the app sees the request. Bodies are small (<= limit).
        body = await read_body(receive, self.limit)
        if body is TOO_LARGE:
            await self._refuse(send)
        elif isinstance(body, dict):  # the client left: the app hears it as it would have
            await self.app(scope, lambda m=body: _return(m), send)
        else:
            await self.app(scope, replay(body, receive), send)

    async def _refuse(self, send: Any) -> None:
        await body_too_large(self.limit)({"type": "http"}, None, send)


async def _return(message: Any) -> Any:
    return message


def _server_version() -> str:
    from agentgym_core.plugins import _core_version

    return _core_version()


def _describe(env_cls: type[Env]) -> str:
    """The first paragraph of the environment class's docstring (its name when it has none)."""
    doc = inspect.getdoc(env_cls) or env_cls.__name__
    return doc.split("\n\n", 1)[0].replace("\n", " ")


async def _json_body(request: Request) -> Any:
    return parse_json_body(await request.body())


class _ProtocolRequest(Request):
    """A request whose JSON body is read as every face reads it (:func:`parse_json_body`): UTF-8 only,
    where Starlette's ``json.loads`` of the bytes would also take UTF-16 and UTF-32."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json_body(await self.body())
        return self._json


class _ProtocolRoute(APIRoute):
    """A ``/v1`` route that reads its body with :class:`_ProtocolRequest` and answers that reader's
    refusal as it is (FastAPI would turn it into a 400 that says only "error parsing the body")."""

    def get_route_handler(self) -> Callable[..., Any]:
        handler = super().get_route_handler()

        async def read_body_as_the_faces_do(request: Request) -> Any:
            try:
                return await handler(_ProtocolRequest(request.scope, request.receive))
            except StarletteHTTPException as exc:
                if isinstance(exc.__cause__, ServerError):
                    raise exc.__cause__ from None
                raise

        return read_body_as_the_faces_do


def answer_errors_in_protocol_shape(app: FastAPI) -> None:
    """Every error ``app`` answers, whoever raised it (a route, request validation, Starlette's
    routing and body parsing, an unexpected exception), as the protocol's error body and status."""

    @app.exception_handler(ServerError)
    async def _server_error(request: Request, exc: ServerError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            f"{'.'.join(str(x) for x in e.get('loc', ()) if x != 'body') or 'body'}: {e.get('msg')}"
            for e in exc.errors()
        ]
        error = ServerError(422, "malformed_request", "; ".join(problems) or "malformed request",
                            details=[{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")}
                                     for e in exc.errors()])
        return JSONResponse(error.body(), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Starlette answers routing misses and unreadable bodies (not UTF-8, nested too deeply,
        # integers past Python's digit limit) with {"detail": ...}; answer the protocol's shape.
        if exc.status_code == 400:
            error = ServerError(422, "malformed_request", f"the body could not be read as JSON: {exc.detail}")
        else:
            error = ServerError(exc.status_code, _HTTP_CODES.get(exc.status_code, "http_error"), str(exc.detail))
        return JSONResponse(error.body(), status_code=error.status, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        error = error_status(exc)
        return JSONResponse(error.body(), status_code=error.status)


def create_app(
    env_cls: type[Env],
    *,
    env_kwargs: dict[str, Any] | None = None,
    name: str | None = None,
    max_instances: int = DEFAULT_MAX_INSTANCES,
    idle_ttl_s: float | None = DEFAULT_IDLE_TTL_S,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    shard: tuple[int, int] = (0, 1),
    next_serial: Callable[[], int] | None = None,
    token: str | None = None,
) -> FastAPI:
    """Build the FastAPI app serving ``env_cls``.

    Args:
        env_cls: the environment class; instantiated as ``env_cls(**env_kwargs)`` per instance.
        name: the environment's name in the protocol (default ``env_cls.name``).
        max_instances: live instances allowed at once; creating more answers 503.
        idle_ttl_s: close instances untouched for this long (None: never).
        max_body_bytes: larger request bodies answer 413.
        shard: ``(k, n)`` for worker k of n processes (``agentgym serve --workers``): instance ids
            are k modulo n, so a request can be sent to the worker that holds its instance.
        next_serial: the creation count shared by the workers (default: this app's own).
        token: a shared token every request must carry (:mod:`agentgym_core.http.auth`); None: no check.
    """
    validate_server_options(max_instances=max_instances, idle_ttl_s=idle_ttl_s, max_body_bytes=max_body_bytes)
    kwargs = dict(env_kwargs or {})
    env_cls = env_cls.configured(**kwargs)
    env_name = name or env_cls.name or env_cls.__name__.lower()
    table = InstanceTable(lambda: env_cls(**kwargs), max_instances=max_instances, idle_ttl_s=idle_ttl_s,
                          shard=shard, next_serial=next_serial)
    catalog = env_cls.tasks()
    stop = threading.Event()
    probe_lock = threading.Lock()
    probe: list[Env] = []  # one instance, made on first need, for instruction and parse_action

    def probe_env() -> Env:
        with probe_lock:
            if not probe:
                probe.append(env_cls(**kwargs))
            return probe[0]

    def reap_forever() -> None:
        interval = min(30.0, max(0.5, (idle_ttl_s or 30.0) / 4))
        while not stop.wait(interval):
            table.reap_idle()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        reaper = threading.Thread(target=reap_forever, name=f"{env_name}-reaper", daemon=True)
        if idle_ttl_s is not None:
            reaper.start()
        try:
            yield
        finally:
            stop.set()
            await app.state.mcp.aclose()
            table.close_all()
            for env in probe:
                env.close()

    app = DirectRouteApp(
        title=f"agentgym environment server: {env_name}",
        version=_server_version(),
        description=f"agentgym protocol v{p.PROTOCOL_VERSION} for the `{env_name}` environment.",
        lifespan=lifespan,
    )
    app.state.table = table
    app.state.env_name = env_name
    app.state.env_cls = env_cls
    app.token = token
    app.add_middleware(_BodyLimit, limit=max_body_bytes)
    app.router.route_class = _ProtocolRoute
    inline = env_cls.inline_calls

    def endpoint(handler: Callable[..., Any]) -> Callable[..., Any]:
        """The handler as FastAPI should call it: in a worker thread, or inline for cheap envs."""
        if not inline:
            return handler

        @functools.wraps(handler)
        async def on_loop(*args: Any, **kwargs: Any) -> Any:
            return handler(*args, **kwargs)

        on_loop.__signature__ = inspect.signature(handler)  # type: ignore[attr-defined]
        return on_loop

    answer_errors_in_protocol_shape(app)

    @contextlib.contextmanager
    def mapped_errors() -> Iterator[None]:
        try:
            yield
        except ServerError:
            raise
        except Exception as exc:
            raise error_status(exc) from exc

    def state(instance: Instance, info: dict[str, Any] | None = None) -> p.InstanceState:
        return p.InstanceState(instance_id=instance.instance_id, task_id=instance.task_id,
                               observation=instance.observation, done=instance.done, info=info or {})

    errors: dict[int | str, dict[str, Any]] = {
        code: {"model": p.ErrorResponse} for code in (401, 404, 409, 413, 422, 500, 503)
    }
    v1 = p.PREFIX

    @app.get(f"{v1}/health", response_model=p.Health)
    def health() -> p.Health:
        return p.Health(env=env_name, server_version=_server_version(), live_instances=len(table),
                        max_instances=table.max_instances)

    @app.get(f"{v1}/info", response_model=p.EnvInfo)
    def info() -> p.EnvInfo:
        probe = probe_env()  # an instance: its step limit may come from a constructor option
        return p.EnvInfo(env=env_name, instruction=probe.instruction, max_episode_steps=probe.max_episode_steps,
                         split_sizes=catalog.sizes(), tools=probe.tools)

    @app.get(f"{v1}/tasks")
    def tasks() -> dict[str, Any]:
        return catalog.model_dump()

    @app.post(f"{v1}/parse_action", response_model=p.ParsedAction, responses=errors)
    def parse_action(body: p.ParseAction) -> p.ParsedAction:
        return p.ParsedAction(action=probe_env().parse_action(body.text))

    @app.post(f"{v1}/instances", response_model=p.InstanceState, status_code=201, responses=errors)
    @endpoint
    def create(body: p.Create) -> p.InstanceState:
        if body.env is not None and body.env != env_name:
            raise ServerError(404, "unknown_env", f"this server serves {env_name!r}, not {body.env!r}")
        task_id = body.task_id
        with mapped_errors():
            # The first reset runs before the instance is published: a failure frees the slot.
            setup = None if task_id is None else (lambda i: i.reset(task_id, body.seed))
            request = {"env": env_name, "task_id": task_id, "seed": body.seed}
            instance, result = table.create(setup, request_id=body.request_id, request=request)
            return state(instance, result.info if result is not None else None)

    @app.post(f"{v1}/instances/{{instance_id}}/reset", response_model=p.InstanceState, responses=errors)
    @endpoint
    def reset(instance_id: p.PathId, body: p.Reset) -> p.InstanceState:
        with mapped_errors():
            return table.run(instance_id, lambda i: state(i, i.reset(body.task_id, body.seed).info))

    @app.post(f"{v1}/instances/{{instance_id}}/step", response_model=p.StepOutcome, responses=errors)
    @endpoint
    def step(instance_id: p.PathId, body: p.Step) -> p.StepOutcome:
        with mapped_errors():
            result = table.run(instance_id, lambda i: i.step(body.action))
        return p.StepOutcome(instance_id=instance_id, **result.model_dump())

    @app.get(f"{v1}/instances/{{instance_id}}/observation", response_model=p.InstanceState, responses=errors)
    @endpoint
    def observation(instance_id: p.PathId) -> p.InstanceState:
        with mapped_errors():
            return table.run(instance_id, state)

    @app.get(f"{v1}/instances/{{instance_id}}/available_actions", response_model=p.AvailableActions,
             responses=errors)
    @endpoint
    def available_actions(instance_id: p.PathId) -> p.AvailableActions:
        with mapped_errors():
            actions = table.run(instance_id, lambda i: i.env.available_actions())
        return p.AvailableActions(instance_id=instance_id, actions=actions)

    @app.delete(f"{v1}/instances/{{instance_id}}", response_model=p.Closed, responses=errors)
    @endpoint
    def close(instance_id: p.PathId) -> p.Closed:
        with mapped_errors():
            table.close(instance_id)
        return p.Closed(instance_id=instance_id)

    @app.post(f"{v1}/step_batch", response_model=p.BatchStepOutcome, responses=errors)
    @endpoint
    def step_batch(body: p.BatchStep) -> p.BatchStepOutcome:
        outcomes = []
        for item in body.steps:
            try:
                result = table.run(item.instance_id, lambda i, a=item.action: i.step(a))
                outcomes.append(p.BatchItemOutcome(instance_id=item.instance_id, status=200, result=result))
            except Exception as exc:
                error = error_status(exc)
                outcomes.append(p.BatchItemOutcome(
                    instance_id=item.instance_id, status=error.status,
                    error=p.ErrorBody(code=error.code, message=error.message)))
        return p.BatchStepOutcome(results=outcomes)

    # The other faces come after /v1 because the router tries its routes in order and /v1 (our own
    # clients) is the one that goes through it; AgentGym's raw-request routes are looked up by exact
    # method and path (DirectRouteApp), so their place in the list costs nothing. No two routes share
    # a method and path: where AgentGym's routes exist, OpenEnv's /reset and /step bodies reach
    # OpenEnv through them (a body that names AgentGym's id field is AgentGym's, any other OpenEnv's).
    openenv = add_openenv_routes(app, table, env_cls, env_name=env_name, description=_describe(env_cls),
                                 version=_server_version(), inline=inline, max_message_bytes=max_body_bytes,
                                 body_of=_json_body)
    add_agentgym_routes(app, table, env_cls, kwargs, inline=inline, openenv=openenv)
    app.state.mcp = MCPFace(table, app.state.openenv, env_name=env_name, instruction=lambda: probe_env().instruction,
                            max_body_bytes=max_body_bytes)
    app.asgi_paths[MCP_PATH] = app.state.mcp

    # AgentGym's routes take the raw request: called directly, they skip FastAPI's per-request
    # stack, which costs more than a TextCraft or BabyAI step (bench/env_server.py --vs-anchor).
    app.enable_direct_routes(max_body_bytes=max_body_bytes)
    return app
