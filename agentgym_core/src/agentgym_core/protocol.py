"""The versioned HTTP protocol between environment servers and clients (protocol version 1).

Every route lives under ``/v1``. Bodies are JSON and validated by these pydantic models on both
ends. Errors always come back as ``{"error": {"code": ..., "message": ...}}`` with a status code
that says what kind of mistake it was:

========  ===================  ==================================================================
status    code                 meaning
========  ===================  ==================================================================
404       unknown_instance     the instance id does not exist (never created, closed or expired)
404       unknown_env          the request names an environment this server does not serve
409       episode_ended        step after the episode terminated or was truncated; reset first
409       no_episode           step before the instance was reset onto a task
413       body_too_large       the request body exceeds the server's limit
422       malformed_request    the body is not valid JSON or does not match the schema
422       invalid_task         the task id or split does not exist
500       env_error            the environment failed; the instance may be unusable
503       at_capacity          the server holds its maximum number of live instances
========  ===================  ==================================================================

Routes::

    GET    /v1/health                        -> Health
    GET    /v1/info                          -> EnvInfo
    GET    /v1/tasks                         -> TaskCatalog
    POST   /v1/parse_action     ParseAction  -> ParsedAction
    POST   /v1/instances        Create       -> InstanceState      (201)
    POST   /v1/instances/{id}/reset  Reset   -> InstanceState
    POST   /v1/instances/{id}/step   Step    -> StepOutcome
    GET    /v1/instances/{id}/observation    -> InstanceState
    GET    /v1/instances/{id}/available_actions -> AvailableActions
    DELETE /v1/instances/{id}                -> Closed
    POST   /v1/step_batch       BatchStep    -> BatchStepOutcome
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentgym_core.env import StepResult

PROTOCOL_VERSION = 1
PREFIX = f"/v{PROTOCOL_VERSION}"

MAX_ACTION_CHARS = 65_536
MAX_BATCH = 1024


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Create(_Request):
    env: str | None = Field(default=None, description="Environment name; optional when the server serves one.")
    task_id: int | None = Field(default=None, description="Task to reset onto; None creates an idle instance.")
    seed: int | None = Field(default=None, description="Seed for the task; None uses the task's default.")


class Reset(_Request):
    task_id: int = Field(description="Task id from /v1/tasks.")
    seed: int | None = Field(default=None, description="Seed for the task; None uses the task's default.")


class Step(_Request):
    action: str = Field(max_length=MAX_ACTION_CHARS, description="The action text (already parsed).")


class ParseAction(_Request):
    text: str = Field(max_length=MAX_ACTION_CHARS, description="A model reply to extract the action from.")


class BatchStepItem(_Request):
    instance_id: int
    action: str = Field(max_length=MAX_ACTION_CHARS)


class BatchStep(_Request):
    steps: list[BatchStepItem] = Field(max_length=MAX_BATCH, description="Steps to apply, in order.")


class ErrorBody(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class InstanceState(BaseModel):
    instance_id: int
    task_id: int | None
    observation: str
    done: bool = False
    info: dict[str, Any] = Field(default_factory=dict)


class StepOutcome(StepResult):
    instance_id: int


class BatchItemOutcome(BaseModel):
    instance_id: int
    status: int = Field(description="HTTP status this step would have had on its own.")
    result: StepResult | None = None
    error: ErrorBody | None = None


class BatchStepOutcome(BaseModel):
    results: list[BatchItemOutcome]


class AvailableActions(BaseModel):
    instance_id: int
    actions: list[str] | None = Field(description="None when the environment cannot enumerate them.")


class ParsedAction(BaseModel):
    action: str


class Closed(BaseModel):
    instance_id: int
    closed: bool = True


class Health(BaseModel):
    status: str = "ok"
    env: str
    protocol_version: int = PROTOCOL_VERSION
    server_version: str
    live_instances: int
    max_instances: int


class EnvInfo(BaseModel):
    env: str
    instruction: str
    max_episode_steps: int | None
    split_sizes: dict[str, int]
    protocol_version: int = PROTOCOL_VERSION
