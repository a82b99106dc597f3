"""AgentGym's legacy routes, so existing AgentGym clients and scripts run against our servers.

AgentGym (github.com/WooooDyy/AgentGym) gives every environment server the same small set of
routes, with field names that differ per environment::

    POST /create                      -> {"id": 0}
    POST /reset  {"id", "data_idx"}   -> {"observation", "reward", "score", "done", ...}
    POST /step   {"id", "action"}     -> {"observation", "reward", "score", "done"}
    GET  /observation?id=0            -> "observation text"
    POST /close  {"id"}               -> {"id", "closed"}

and answers errors with HTTP 200 and ``{"error": "message"}``. An Env class opts in by setting
``agentgym_compat = AgentGymCompat(...)``; the knobs cover the per-environment differences. These
routes share the instance table of the ``/v1`` protocol, so both can be used on one server.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Body, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from agentgym_core.env import Env
from agentgym_core.instances import InstanceTable

__all__ = ["AgentGymCompat", "add_agentgym_routes"]


class AgentGymCompat(BaseModel):
    """How one environment's AgentGym server names things."""

    id_field: str = Field(default="id", description="Instance id in requests and in /create's answer.")
    task_field: str = Field(default="data_idx", description="Task index field of /reset (and /create).")
    action_field: str = Field(default="action", description="Action text field of /step.")
    done_field: str = Field(default="done", description="Episode-ended flag in /reset and /step answers.")
    include_score: bool = Field(default=True, description="Answers carry 'score', the cumulative reward.")
    errors_as_200: bool = Field(default=True, description="Errors answer HTTP 200 {'error': msg} as AgentGym does.")
    create_resets: bool = Field(
        default=False,
        description="/create resets the new instance and answers with the first observation: onto the body's "
                    "task field, or, when absent, onto task index = the new instance id (AgentGym's TextCraft).",
    )
    wrap_task_index: bool = Field(
        default=False, description="Task indices wrap modulo the number of tasks (AgentGym's TextCraft does)."
    )
    create_answer: Literal["object", "bare_id"] = Field(
        default="object", description="/create answers {id_field: n} ('object') or the bare number (searchqa)."
    )
    reset_answer: Literal["episode", "observation", "text"] = Field(
        default="episode",
        description="/reset answers {observation, reward, done, ...} ('episode'), {'observation'} alone "
                    "('observation', WebArena) or the bare observation string ('text', searchqa).",
    )
    close_answer: Literal["object", "bool"] = Field(
        default="object", description="/close answers {id_field, 'closed'} or a bare true (searchqa)."
    )
    reset_observation_key: str | None = Field(
        default=None, description="Reset-info key whose value is /reset's 'observation' (default: the observation)."
    )
    reset_info_fields: dict[str, str] = Field(
        default_factory=dict, description="Extra /reset answer fields: answer field -> reset-info key."
    )
    step_extra_fields: tuple[str, ...] = Field(
        default=(), description="StepResult fields added to /step answers, e.g. ('truncated', 'info')."
    )


def add_agentgym_routes(app: FastAPI, table: InstanceTable, env_cls: type[Env]) -> None:
    """Add the legacy routes when ``env_cls.agentgym_compat`` is set (no-op otherwise)."""
    spec: AgentGymCompat | None = getattr(env_cls, "agentgym_compat", None)
    if spec is None:
        return
    from agentgym_core.server import ServerError, error_status  # avoid an import cycle at module load

    def fail(exc: Exception) -> JSONResponse:
        error = error_status(exc)
        return JSONResponse({"error": error.message}, status_code=200 if spec.errors_as_200 else error.status)

    def field(body: dict[str, Any], name: str, kind: type = int) -> Any:
        if not isinstance(body, dict) or name not in body:
            got = sorted(body) if isinstance(body, dict) else type(body).__name__
            raise ServerError(422, "malformed_request", f"request body needs the field {name!r}; got {got}")
        try:
            return kind(body[name])
        except (TypeError, ValueError):
            raise ServerError(422, "malformed_request",
                              f"field {name!r} must be {kind.__name__}, got {body[name]!r}") from None

    all_tasks = sorted({t for ids in env_cls.tasks().splits.values() for t in ids})

    def task_of(index: int) -> int:
        return all_tasks[index % len(all_tasks)] if spec.wrap_task_index else index

    def episode_payload(instance: Any, observation: str, reward: float, done: bool) -> dict[str, Any]:
        payload = {"observation": observation, "reward": reward, spec.done_field: done}
        if spec.include_score:
            payload["score"] = instance.score
        return payload

    def reset_payload(instance: Any, result: Any) -> Any:
        info = result.info
        observation = info.get(spec.reset_observation_key, result.observation) if spec.reset_observation_key \
            else result.observation
        if spec.reset_answer == "text":
            return observation
        if spec.reset_answer == "observation":
            return {"observation": observation}
        payload = {answer: info.get(key) for answer, key in spec.reset_info_fields.items()}
        payload.update(episode_payload(instance, observation, 0.0, False))
        return payload

    @app.get("/", include_in_schema=False)
    def hello() -> str:
        return f"This is environment {app.state.env_name} (agentgym server; protocol at /v1, docs at /docs)."

    @app.post("/create", tags=["agentgym-compat"])
    def create(body: dict[str, Any] | None = Body(default=None)) -> Any:  # noqa: B008 - FastAPI idiom
        try:
            instance = table.create()
            if spec.create_answer == "bare_id" and not spec.create_resets:
                return instance.instance_id
            answer: dict[str, Any] = {spec.id_field: instance.instance_id}
            if spec.create_resets:
                index = field(body, spec.task_field) if body and spec.task_field in body else instance.instance_id
                try:
                    result = table.run(instance.instance_id, lambda i: i.reset(task_of(index), None))
                except Exception:
                    table.close(instance.instance_id)  # a failed first reset must not leak the slot
                    raise
                answer.update(reset_payload(instance, result))
            return answer
        except Exception as exc:
            return fail(exc)

    @app.post("/reset", tags=["agentgym-compat"])
    def reset(body: dict[str, Any] = Body(...)) -> Any:  # noqa: B008
        try:
            instance_id, task_id = field(body, spec.id_field), field(body, spec.task_field)
            instance, result = table.run(instance_id, lambda i: (i, i.reset(task_of(task_id), None)))
            return reset_payload(instance, result)
        except Exception as exc:
            return fail(exc)

    @app.post("/step", tags=["agentgym-compat"])
    def step(body: dict[str, Any] = Body(...)) -> Any:  # noqa: B008
        try:
            instance_id, action = field(body, spec.id_field), field(body, spec.action_field, str)
            instance, result = table.run(instance_id, lambda i: (i, i.step(action)))
            payload = episode_payload(instance, result.observation, result.reward, result.done)
            payload.update({name: getattr(result, name) for name in spec.step_extra_fields})
            return payload
        except Exception as exc:
            return fail(exc)

    @app.get("/observation", tags=["agentgym-compat"])
    def observation(request: Request) -> Any:
        # The query parameter is named like the id field (`?id=` or `?env_idx=`).
        try:
            instance_id = field(dict(request.query_params), spec.id_field)
            return table.run(instance_id, lambda i: i.observation)
        except Exception as exc:
            return fail(exc)

    @app.post("/close", tags=["agentgym-compat"])
    def close(body: dict[str, Any] = Body(...)) -> Any:  # noqa: B008
        try:
            instance_id = field(body, spec.id_field)
            table.close(instance_id)
            return True if spec.close_answer == "bool" else {spec.id_field: instance_id, "closed": True}
        except Exception as exc:
            return fail(exc)
