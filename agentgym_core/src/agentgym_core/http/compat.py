"""AgentGym's legacy routes, so existing AgentGym clients and scripts run against our servers.

AgentGym (github.com/WooooDyy/AgentGym) gives every environment server the same small set of
routes, with field names that differ per environment::

    POST /create                      -> {"id": 0}
    POST /reset  {"id", "data_idx"}   -> {"observation", "reward", "score", "done", ...}
    POST /step   {"id", "action"}     -> {"observation", "reward", "score", "done"}
    GET  /observation?id=0            -> "observation text" (BabyAI: a status object)
    POST /close  {"id"}               -> {"id", "closed"}

and answers errors with HTTP 200 and ``{"error": "message"}``, except a body that is not JSON at
all or is missing where the route needs fields, which AgentGym's servers (FastAPI with typed
bodies) answer 422. Rewards and scores that are
whole numbers are answered as JSON integers (``0``, ``1``), as AgentGym's servers answer them. An
Env class opts in by setting ``agentgym_compat = AgentGymCompat(...)``; the knobs cover the per-environment differences. These
routes share the instance table of the ``/v1`` protocol, so both can be used on one server.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from agentgym_core.env import Env
from agentgym_core.http.compat_spec import AgentGymCompat
from agentgym_core.http.errors import ServerError, error_status, parse_json_body
from agentgym_core.http.instances import ID_LIMIT, InstanceTable, NoEpisodeError, UnknownInstanceError
from agentgym_core.http.openenv_face import is_openenv_body
from agentgym_core.http.protocol import MAX_ACTION_CHARS, check_text, strict_id

__all__ = ["AgentGymCompat", "add_agentgym_routes"]


def _body_field(body: Any, name: str, kind: type = int) -> Any:
    """``body[name]`` checked strictly: a JSON integer within the id range (``kind=int``) or a string
    of at most ``MAX_ACTION_CHARS`` characters; anything else is a 422 that names the field."""
    if not isinstance(body, dict) or name not in body:
        got = sorted(body) if isinstance(body, dict) else type(body).__name__
        raise ServerError(422, "malformed_request", f"request body needs the field {name!r}; got {got}")
    value = body[name]
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ServerError(422, "malformed_request",
                              f"field {name!r} must be an integer, got {type(value).__name__} {value!r:.40}")
        if not -ID_LIMIT < value < ID_LIMIT:
            raise ServerError(422, "malformed_request", f"field {name!r} is out of range: {value!r:.40}")
        return value
    if not isinstance(value, str):
        raise ServerError(422, "malformed_request",
                          f"field {name!r} must be a string, got {type(value).__name__} {value!r:.40}")
    if len(value) > MAX_ACTION_CHARS:
        raise ServerError(422, "malformed_request",
                          f"field {name!r} is {len(value)} characters long; the limit is {MAX_ACTION_CHARS}")
    try:
        return check_text(value)
    except ValueError as exc:
        raise ServerError(422, "malformed_request", f"field {name!r}: {exc}") from None


async def _json_body(request: Request) -> Any:
    """The request's JSON body (None when empty); an unreadable one raises :class:`_Unreadable` (answered 422)."""
    try:
        return parse_json_body(await request.body())
    except ServerError as exc:
        raise _Unreadable(exc.status, exc.code, exc.message) from None


def _needed(body: Any, *fields: str) -> Any:
    """``body``, unless it is missing: AgentGym's servers, with typed bodies, answer that 422."""
    if body is None:
        example = ", ".join(f'"{name}": ...' for name in fields)
        raise _Unreadable(422, "malformed_request", f"the request has no body; send a JSON object {{{example}}}")
    return body


def add_agentgym_routes(app: FastAPI, table: InstanceTable, env_cls: type[Env],
                        env_kwargs: dict[str, Any] | None = None, *, inline: bool = False,
                        openenv: dict[str, Callable[[Any], Awaitable[Any]]] | None = None) -> None:
    """Add the legacy routes when ``env_cls.agentgym_compat`` is set (no-op otherwise).

    Bodies are parsed strictly: ids and task indices must be JSON integers (not ``true`` or
    ``1.9``), actions JSON strings of at most ``MAX_ACTION_CHARS`` characters, and every problem is
    answered before anything is allocated or applied. ``inline`` calls the environment on the
    event loop instead of a worker thread (for environments whose calls take microseconds).
    ``openenv`` maps ``/reset`` and ``/step`` to OpenEnv's handlers, which answer the bodies that
    do not name the id field (:func:`agentgym_core.http.openenv_face.is_openenv_body`).
    """
    spec: AgentGymCompat | None = getattr(env_cls, "agentgym_compat", None)
    if spec is None:
        return
    if spec.env_class is not None:  # the env's AgentGym personality, a class of its own
        module_name, _, attribute = spec.env_class.partition(":")
        env_cls = getattr(importlib.import_module(module_name), attribute)
    if spec.observation_method is not None and not callable(getattr(env_cls, spec.observation_method, None)):
        raise TypeError(f"{env_cls.__name__}.agentgym_compat names observation_method="
                        f"{spec.observation_method!r}, but {env_cls.__name__} has no such method; define it "
                        "or leave observation_method unset to answer the observation text")
    compat_kwargs = {**(env_kwargs or {}), **spec.env_kwargs}
    make_env = (lambda: env_cls(**compat_kwargs)) if spec.env_kwargs or spec.env_class else None

    def fail(exc: Exception) -> JSONResponse:
        error = error_status(exc)
        if isinstance(exc, _Unreadable):  # AgentGym's servers answer an unreadable body 422, not 200
            return JSONResponse(error.body(), status_code=422)
        return JSONResponse({"error": error.message}, status_code=200 if spec.errors_as_200 else error.status)

    reset_fields = spec.reset_fields or (
        ("observation", "reward", "score", "done") if spec.include_score else ("observation", "reward", "done"))
    all_tasks = sorted({t for ids in env_cls.tasks().splits.values() for t in ids})

    def task_of(index: int) -> int:
        return all_tasks[index % len(all_tasks)] if spec.wrap_task_index else index

    def episode_payload(instance: Any, observation: str, reward: float, done: bool) -> dict[str, Any]:
        payload: dict[str, Any] = {"observation": observation, "reward": agentgym_number(reward)}
        if spec.include_score:
            payload["score"] = agentgym_number(instance.score)
        payload[spec.done_field] = done  # AgentGym's order: observation, reward, score, done
        return payload

    def reset_payload(instance: Any, result: Any) -> Any:
        info = result.info
        observation = info.get(spec.reset_observation_key, result.observation) if spec.reset_observation_key \
            else result.observation
        if spec.reset_answer == "text":
            return observation
        if spec.reset_answer == "observation":
            return {"observation": observation}
        values = {"id": instance.instance_id, "observation": observation, "reward": 0, "score": 0,
                  "deleted": False, "done": False}
        payload = {answer: info.get(key) for answer, key in spec.reset_info_fields.items()}
        for name in reset_fields:
            payload[spec.done_field if name == "done" else spec.id_field if name == "id" else name] = values[name]
        return payload

    @app.get("/", include_in_schema=False)
    def hello() -> str:
        return f"This is environment {app.state.env_name} (agentgym server; protocol at /v1, docs at /docs)."

    @app.post("/create", tags=["agentgym-compat"])
    async def create(request: Request) -> Any:
        try:
            body = await _json_body(request)
            if body is not None and not isinstance(body, dict):
                raise ServerError(422, "malformed_request", f"the body must be a JSON object, got {type(body).__name__}")
            index = _body_field(body, spec.task_field) if body and spec.task_field in body else None
        except Exception as exc:
            return fail(exc)

        def make() -> Any:
            def setup(instance: Any) -> Any:
                if not spec.create_resets:
                    return None
                return instance.reset(task_of(instance.serial if index is None else index), None)

            instance, result = table.create(setup, make_env=make_env)
            if spec.create_answer == "bare_id" and not spec.create_resets:
                return instance.instance_id
            answer: dict[str, Any] = {spec.id_field: instance.instance_id}
            if result is not None:
                answer.update(reset_payload(instance, result))
            return answer

        return await _in_thread(make, fail, inline)

    @app.post("/reset", tags=["agentgym-compat"])
    async def reset(request: Request) -> Any:
        try:
            body = await _json_body(request)
        except Exception as exc:
            return fail(exc)
        if openenv is not None and is_openenv_body(body, spec.id_field):
            return await openenv["/reset"](body)
        try:
            body = _needed(body, spec.id_field, spec.task_field)
            instance_id, task_id = _body_field(body, spec.id_field), _body_field(body, spec.task_field)
        except Exception as exc:
            return fail(exc)

        def run() -> Any:
            instance, result = table.run(instance_id, lambda i: (i, i.reset(task_of(task_id), None)))
            return reset_payload(instance, result)

        return await _in_thread(run, fail, inline)

    @app.post("/step", tags=["agentgym-compat"])
    async def step(request: Request) -> Any:
        try:
            body = await _json_body(request)
        except Exception as exc:
            return fail(exc)
        if openenv is not None and is_openenv_body(body, spec.id_field) and body is not None:
            return await openenv["/step"](body)
        try:
            body = _needed(body, spec.id_field, spec.action_field)
            instance_id, action = _body_field(body, spec.id_field), _body_field(body, spec.action_field, str)
        except Exception as exc:
            return fail(exc)

        def run() -> Any:
            instance, result = table.run(instance_id, lambda i: (i, i.step(action, after_done=spec.step_after_done)))
            payload = episode_payload(instance, result.observation, result.reward, result.done)
            payload.update({name: result.info[key] for name, key in spec.step_info_fields.items()})
            payload.update({name: getattr(result, name) for name in spec.step_extra_fields})
            return payload

        return await _in_thread(run, fail, inline)

    @app.get("/observation", tags=["agentgym-compat"])
    async def observation(request: Request) -> Any:
        # The query parameter is named like the id field (`?id=` or `?env_idx=`).
        try:
            given = request.query_params.getlist(spec.id_field)
            if len(given) > 1:  # a front and an app must not read different ones
                raise ServerError(422, "malformed_request",
                                  f"the query gives ?{spec.id_field}= {len(given)} times; give it once")
            raw = given[0] if given else None
            try:
                strict_id(raw)
                if raw is None:
                    raise ValueError("it is missing")
            except ValueError as exc:
                raise ServerError(422, "malformed_request",
                                  f"the query needs ?{spec.id_field}=<integer instance id>: {exc}") from None
            instance_id = int(raw)
            if spec.observation_method is None:
                return table.run(instance_id, lambda i: i.observation)

            def status(instance: Any) -> Any:
                if instance.task_id is None:
                    raise NoEpisodeError(f"instance {instance_id} has no episode yet: reset it onto a task first")
                return getattr(instance.env, spec.observation_method)()

            return table.run(instance_id, status)
        except Exception as exc:
            return fail(exc)

    @app.post("/close", tags=["agentgym-compat"])
    async def close(request: Request) -> Any:
        try:
            instance_id = _body_field(_needed(await _json_body(request), spec.id_field), spec.id_field)
        except Exception as exc:
            return fail(exc)

        def run() -> Any:
            try:
                table.close(instance_id)
            except UnknownInstanceError:  # closed before: AgentGym answers false, not an error
                return False if spec.close_answer == "bool" else {spec.id_field: instance_id, "closed": False}
            return True if spec.close_answer == "bool" else {spec.id_field: instance_id, "closed": True}

        return await _in_thread(run, fail, inline)


class _Unreadable(ServerError):
    """The body is not JSON (or not UTF-8, or nests too deeply): answered 422 as AgentGym's servers do."""


def agentgym_number(value: float) -> float | int:
    """``value`` as AgentGym's servers write it: a whole number as a JSON integer (``0``, not ``0.0``)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


async def _in_thread(fn: Any, fail: Any, inline: bool) -> Any:
    """Run a handler body in the worker threads (environments may be slow), or inline."""
    try:
        return fn() if inline else await run_in_threadpool(fn)
    except Exception as exc:
        return fail(exc)
