"""A FastAPI app that calls raw-request routes directly, without the per-request framework stack.

A route whose endpoint takes only the :class:`~starlette.requests.Request` (AgentGym's legacy
routes, :mod:`agentgym_core.http.compat`) gets nothing from FastAPI at request time: no parameters to
validate, no response model beyond ``Any``. Yet every such request still walks the middleware stack, the router's
linear match, dependency solving and ``jsonable_encoder``, and for environments whose step takes
microseconds (TextCraft, BabyAI) that walk is most of the server's time (``bench/env_server.py``).
:class:`DirectRouteApp` looks those routes up by exact method and path and calls the endpoint
itself; everything else (``/v1``, ``/docs``, unknown paths) goes through FastAPI as before.

What a direct call keeps: the body limit (413 in the protocol's error shape), the app's exception
handlers for anything an endpoint raises, JSON answers encoded as FastAPI encodes them, and the
routes' place in the OpenAPI description. What it skips: the app's middleware (the environment server
has only its body limit, kept above) and the router's order: a direct route wins over any other route
for its method and path, so an app should register one route per method and path (the environment
server does; :func:`agentgym_core.http.server.create_app`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import pydantic_core
from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentgym_core.http.asgi_body import TOO_LARGE, declared_too_large, read_body
from agentgym_core.http.auth import gate
from agentgym_core.http.errors import ServerError

__all__ = ["DirectRouteApp", "body_too_large"]

Endpoint = Callable[[Request], Awaitable[Any]]

_JSON_HEADERS = [(b"content-type", b"application/json")]


def body_too_large(limit: int) -> JSONResponse:
    """The 413 answer for a body over ``limit`` bytes, in the protocol's error shape."""
    error = ServerError(413, "body_too_large", f"request body exceeds the server's limit of {limit} bytes")
    return JSONResponse(error.body(), status_code=413)


def _takes_only_the_request(route: APIRoute) -> bool:
    """True for a route FastAPI adds nothing to: one ``Request`` parameter, no model, no path params."""
    # `-> Any` endpoints get a response model of Any: nothing to validate, only serialization.
    if route.response_model not in (None, Any) or route.dependencies or "{" in route.path:
        return False
    if not inspect.iscoroutinefunction(route.endpoint):
        return False
    params = list(inspect.signature(route.endpoint).parameters.values())
    return len(params) == 1 and params[0].annotation in (Request, "Request")


def _encode(content: Any) -> bytes:
    """JSON bytes as FastAPI writes a ``-> Any`` route's answer (pydantic's serializer: UTF-8, NaN as
    null); types it does not know go through ``jsonable_encoder`` first."""
    try:
        return pydantic_core.to_json(content)
    except pydantic_core.PydanticSerializationError:
        return pydantic_core.to_json(jsonable_encoder(content))


class DirectRouteApp(FastAPI):
    """FastAPI whose raw-request routes are called directly (see the module docstring).

    Call :meth:`enable_direct_routes` once every route is added; until then it is plain FastAPI.
    """

    _direct: dict[tuple[str, str], Endpoint] = {}  # noqa: RUF012 - replaced per instance
    _body_limit: int = 0
    token: str | None = None
    """When set, every HTTP request must carry it (:mod:`agentgym_core.http.auth`), checked before any route."""
    asgi_paths: dict[str, Any]
    """Exact paths served by an ASGI app of their own (``/mcp``), after the token check."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asgi_paths = {}

    def enable_direct_routes(self, *, max_body_bytes: int) -> list[str]:
        """Serve the qualifying routes directly from now on; returns them as ``"METHOD /path"``."""
        direct: dict[tuple[str, str], Endpoint] = {}
        for route in self.router.routes:
            if isinstance(route, APIRoute) and _takes_only_the_request(route):
                for method in route.methods - {"HEAD"}:
                    direct.setdefault((method, route.path), route.endpoint)
        self._direct, self._body_limit = direct, max_body_bytes
        return sorted(f"{method} {path}" for method, path in direct)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and self.token is not None:
            admitted = await gate(scope, send, self.token)
            if admitted is None:
                return
            scope = admitted
        if scope["type"] == "http":
            endpoint = self._direct.get((scope["method"], scope["path"]))
            if endpoint is not None:
                await self._call_direct(endpoint, scope, receive, send)
                return
            other = self.asgi_paths.get(scope["path"])
            if other is not None:
                await other(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    async def _call_direct(self, endpoint: Endpoint, scope: Any, receive: Any, send: Any) -> None:
        body = await self._read_body(scope, receive)
        if body is TOO_LARGE:
            await body_too_large(self._body_limit)(scope, receive, send)
            return
        if body is None:  # the client went away
            return
        scope["app"] = self
        request = Request(scope, receive)
        request._body = body  # what request.body() returns; the stream is already read
        try:
            result = await endpoint(request)
        except Exception as exc:
            await self._answer_error(request, exc, scope, receive, send)
            return
        if isinstance(result, Response):
            await result(scope, receive, send)
            return
        try:
            payload = _encode(result)
        except Exception as exc:  # a type JSON cannot carry
            await self._answer_error(request, exc, scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(payload)).encode()), *_JSON_HEADERS]})
        await send({"type": "http.response.body", "body": payload})

    async def _read_body(self, scope: Any, receive: Any) -> bytes | object | None:
        """The whole body; ``TOO_LARGE`` past the limit; None when the client left."""
        if declared_too_large(scope, self._body_limit):
            return TOO_LARGE
        body = await read_body(receive, self._body_limit)
        return None if isinstance(body, dict) else body

    async def _answer_error(self, request: Request, exc: Exception, scope: Any, receive: Any, send: Any) -> None:
        """Answer with the app's exception handler for ``exc`` (the most specific one registered)."""
        handler = next((self.exception_handlers[kind] for kind in type(exc).__mro__
                        if kind in self.exception_handlers), None)
        if handler is None:
            raise exc
        response = await handler(request, exc)
        await response(scope, receive, send)
