"""OpenEnv's routes on every environment server, beside the agentgym protocol and AgentGym's routes.

OpenEnv (``openenv-core``; read by TRL, SkyRL and torchforge) speaks::

    WS   /ws        one episode per connection: {"type": "reset"|"step"|"state"|"close", "data": {...}}
    POST /reset     {"seed", "episode_id", ...}  -> {"observation": {...}, "reward", "done"}
    POST /step      {"action": {...}}            -> {"observation": {...}, "reward", "done"}
    GET  /state     -> {"episode_id", "step_count", ...}
    GET  /health, /schema, /metadata

Here an action is ``{"action": "<text>"}`` (the environment's own action text) and an observation
``{"text", "task_id", "success", "invalid_action", "truncated", "info"}``; ``/schema`` gives both
as JSON schemas. ``reset`` takes ``task_id`` (or ``split``, default the train split, and a task
picked by ``seed``, else at random). Every WebSocket connection is an instance of the server's
instance table, closed with the connection; the HTTP ``/reset``, ``/step`` and ``/state`` drive one
shared episode, as OpenEnv's single-session HTTP servers did (concurrent clients use ``/ws``).

Where this departs from ``openenv-core``'s own server: errors over HTTP have the agentgym protocol's
shape (``{"error": {"code", "message"}}``, 422 for a malformed request); a request to ``/reset`` or
``/step`` whose JSON object names the id field of AgentGym's routes is AgentGym's (see
:mod:`agentgym_core.http.compat`), every other one OpenEnv's.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from agentgym_core.env import Env, InvalidTaskError, TaskCatalog
from agentgym_core.http.errors import ServerError, error_status
from agentgym_core.http.instances import Instance, InstanceTable, UnknownInstanceError
from agentgym_core.http.protocol import MAX_ACTION_CHARS, MAX_SEED, Text

__all__ = ["OpenEnvAction", "OpenEnvObservation", "OpenEnvState", "add_openenv_routes", "is_openenv_body"]

OPENENV_PATHS = ("/reset", "/step", "/state")
"""The OpenEnv routes that act on the shared HTTP episode (one worker holds it under ``--workers``)."""


class OpenEnvAction(BaseModel):
    """An action as OpenEnv clients send it: the environment's action text."""

    model_config = ConfigDict(extra="forbid")
    action: Text = Field(max_length=MAX_ACTION_CHARS, description="The action text, as the environment's "
                        "instruction describes it (e.g. 'go forward').")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Ignored; OpenEnv's Action has it.")


class OpenEnvObservation(BaseModel):
    """An observation as OpenEnv clients read it (``reward`` and ``done`` travel beside it)."""

    text: str = Field(description="What the agent reads: the environment's observation text.")
    task_id: int | None = Field(default=None, description="The task of this episode.")
    success: bool | None = Field(default=None, description="Whether the task was accomplished; None while undecided.")
    invalid_action: bool | None = Field(default=None, description="The environment refused the action.")
    truncated: bool = Field(default=False, description="The environment's step limit ended the episode.")
    info: dict[str, Any] = Field(default_factory=dict, description="Environment-specific extras.")


class OpenEnvState(BaseModel):
    """The episode's state, as OpenEnv's ``State``: its id and step count, and agentgym's extras."""

    episode_id: str | None = Field(default=None, description="This episode's id (the client's, or a new one).")
    step_count: int = Field(default=0, description="Steps taken in this episode.")
    task_id: int | None = Field(default=None, description="The task of this episode.")
    done: bool = Field(default=False, description="Whether the episode has ended.")


class OpenEnvReset(BaseModel):
    """``/reset``'s body, or the ``data`` of a WebSocket ``reset``; unknown keys are ignored, as OpenEnv does."""

    # Strict, as /v1 reads its fields: `true` is not task 1, nor "7" seed 7.
    model_config = ConfigDict(extra="ignore", strict=True)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED,
                             description="Random seed; also picks the task when none is given.")
    episode_id: Text | None = Field(default=None, max_length=255, description="Your id for this episode.")
    task_id: int | None = Field(default=None, ge=0, description="The task to play (see /v1/tasks).")
    split: Text | None = Field(default=None, max_length=256,
                               description="Pick the task from this split (default: train).")


class _Episode:
    """One OpenEnv session: an instance of the table and its episode's id and step count."""

    def __init__(self) -> None:
        self.instance_id: int | None = None
        self.episode_id: str | None = None
        self.step_count = 0


def is_openenv_body(body: Any, id_field: str | None) -> bool:
    """Whether a ``/reset`` or ``/step`` body is OpenEnv's: anything but a JSON object naming ``id_field``."""
    return id_field is None or not (isinstance(body, dict) and id_field in body)


def _malformed(exc: ValidationError) -> ServerError:
    problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
    return ServerError(422, "malformed_request", problems or "malformed request")


class OpenEnvFace:
    """OpenEnv's operations on the server's instance table (shared by the HTTP and WebSocket routes)."""

    def __init__(self, table: InstanceTable, catalog: TaskCatalog, env_name: str, *, inline: bool) -> None:
        self.table, self.catalog, self.env_name, self.inline = table, catalog, env_name, inline
        self.http_episode = _Episode()
        self.http_lock = threading.Lock()  # one HTTP call at a time on the shared episode

    async def call(self, fn: Callable[[], Any]) -> Any:
        return fn() if self.inline else await run_in_threadpool(fn)

    def pick_task(self, request: OpenEnvReset) -> int:
        if request.task_id is not None:
            return request.task_id
        splits = self.catalog.splits
        split = request.split or ("train" if "train" in splits else next(iter(splits), None))
        if split is None:
            raise InvalidTaskError(f"{self.env_name} offers no tasks")
        ids = self.catalog.split(split)
        if not ids:
            raise InvalidTaskError(f"split {split!r} of {self.env_name} has no tasks")
        return ids[request.seed % len(ids)] if request.seed is not None else secrets.choice(ids)

    def reset(self, episode: _Episode, data: Any) -> dict[str, Any]:
        try:
            request = OpenEnvReset.model_validate({} if data is None else data)
        except ValidationError as exc:
            raise _malformed(exc) from None
        task_id = self.pick_task(request)
        if episode.instance_id is not None:
            try:
                result = self.table.run(episode.instance_id, lambda i: i.reset(task_id, request.seed))
            except UnknownInstanceError:  # expired while idle: start afresh
                episode.instance_id = None
        if episode.instance_id is None:
            instance, result = self.table.create(lambda i: i.reset(task_id, request.seed))
            episode.instance_id = instance.instance_id
        episode.episode_id = request.episode_id or uuid.uuid4().hex
        episode.step_count = 0
        observation = OpenEnvObservation(text=result.observation, task_id=task_id, info=result.info)
        return {"observation": observation.model_dump(), "reward": None, "done": False}

    def step(self, episode: _Episode, data: Any) -> dict[str, Any]:
        try:
            action = OpenEnvAction.model_validate(data)
        except ValidationError as exc:
            raise _malformed(exc) from None
        if episode.instance_id is None:
            raise ServerError(409, "no_episode", "no episode yet: reset first")

        def act(instance: Instance) -> tuple[Any, int | None]:
            return instance.step(action.action), instance.task_id

        result, task_id = self.table.run(episode.instance_id, act)
        episode.step_count += 1
        observation = OpenEnvObservation(text=result.observation, task_id=task_id, success=result.success,
                                         invalid_action=result.invalid_action, truncated=result.truncated,
                                         info=result.info)
        return {"observation": observation.model_dump(), "reward": result.reward, "done": result.done}

    def state(self, episode: _Episode) -> dict[str, Any]:
        task_id, done = None, False
        if episode.instance_id is not None:
            try:
                task_id, done = self.table.run(episode.instance_id, lambda i: (i.task_id, i.done))
            except UnknownInstanceError:
                episode.instance_id = None
        return OpenEnvState(episode_id=episode.episode_id, step_count=episode.step_count, task_id=task_id,
                            done=done).model_dump()

    def close(self, episode: _Episode) -> None:
        if episode.instance_id is not None:
            with contextlib.suppress(UnknownInstanceError):  # expired or closed already
                self.table.close(episode.instance_id)
            episode.instance_id = None

    # The shared HTTP episode, one call at a time.

    def http_reset(self, body: Any) -> dict[str, Any]:
        with self.http_lock:
            return self.reset(self.http_episode, body)

    def http_step(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("action"), dict):
            raise ServerError(422, "malformed_request", 'the body must be {"action": {"action": "<text>"}}')
        with self.http_lock:
            return self.step(self.http_episode, body["action"])


def add_openenv_routes(app: FastAPI, table: InstanceTable, env_cls: type[Env], *, env_name: str,
                       description: str, version: str, inline: bool, max_message_bytes: int,
                       body_of: Callable[[Any], Any]) -> dict[str, Callable[[Any], Any]]:
    """Add OpenEnv's routes to ``app``; returns the handlers of ``/reset`` and ``/step`` (which take
    the parsed JSON body), for the caller to serve where AgentGym's routes share those paths.

    ``body_of`` reads a request's JSON body (None when empty), raising a 422 ``ServerError``.
    """
    face = OpenEnvFace(table, env_cls.tasks(), env_name, inline=inline)
    app.state.openenv = face

    async def reset(body: Any) -> Any:
        return await face.call(lambda: face.http_reset(body))

    async def step(body: Any) -> Any:
        return await face.call(lambda: face.http_step(body))

    @app.get("/health", tags=["openenv"])
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.get("/metadata", tags=["openenv"])
    def metadata() -> dict[str, Any]:
        return {"name": env_name, "description": description, "readme_content": None, "version": version,
                "author": None, "documentation_url": None}

    @app.get("/schema", tags=["openenv"])
    def schema() -> dict[str, Any]:
        return {"action": OpenEnvAction.model_json_schema(), "observation": OpenEnvObservation.model_json_schema(),
                "state": OpenEnvState.model_json_schema()}

    @app.get("/state", tags=["openenv"])
    def state() -> dict[str, Any]:
        with face.http_lock:
            return face.state(face.http_episode)

    @app.websocket("/ws")
    async def session(websocket: WebSocket) -> None:
        await websocket.accept()
        episode = _Episode()
        try:
            while True:
                raw = await websocket.receive_text()
                answer = await _answer(face, episode, raw, max_message_bytes)
                if answer is None:  # the client said close
                    break
                await websocket.send_text(json.dumps(answer))
        except WebSocketDisconnect:
            pass
        finally:
            await face.call(lambda: face.close(episode))
        with contextlib.suppress(RuntimeError):  # already closed by the client
            await websocket.close()

    if getattr(env_cls, "agentgym_compat", None) is None:  # no AgentGym routes on these paths: serve them here
        @app.post("/reset", tags=["openenv"])
        async def reset_route(request: Request) -> Any:
            return await reset(await body_of(request))

        @app.post("/step", tags=["openenv"])
        async def step_route(request: Request) -> Any:
            return await step(await body_of(request))

    return {"/reset": reset, "/step": step}


async def _answer(face: OpenEnvFace, episode: _Episode, raw: str, limit: int) -> dict[str, Any] | None:
    """The answer to one WebSocket message (None for ``close``), errors in OpenEnv's shape."""
    if len(raw) > limit:
        return _ws_error("VALIDATION_ERROR", f"the message exceeds the server's limit of {limit} bytes")
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return _ws_error("INVALID_JSON", f"Invalid JSON: {exc}")
    kind = message.get("type") if isinstance(message, dict) else None
    data = message.get("data") if isinstance(message, dict) else None
    try:
        if kind == "reset":
            return {"type": "observation", "data": await face.call(lambda: face.reset(episode, data or {}))}
        if kind == "step":
            return {"type": "observation", "data": await face.call(lambda: face.step(episode, data))}
        if kind == "state":
            return {"type": "state", "data": await face.call(lambda: face.state(episode))}
        if kind == "close":
            return None
        return _ws_error("UNKNOWN_TYPE", f"Unknown message type: {kind}")
    except Exception as exc:
        error = error_status(exc)
        code = {"malformed_request": "VALIDATION_ERROR", "at_capacity": "CAPACITY_REACHED"}.get(error.code,
                                                                                             "EXECUTION_ERROR")
        return _ws_error(code, error.message)


def _ws_error(code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code}}
