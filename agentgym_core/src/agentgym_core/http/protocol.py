"""The versioned HTTP protocol between environment servers and clients (protocol version 1).

Every route lives under ``/v1``. Bodies are JSON and validated by these pydantic models on both
ends. Instance ids are random integers in ``[1, 2**53)``, never reused across server restarts. Errors always come back as ``{"error": {"code": ..., "message": ...}}`` with a status code
that says what kind of mistake it was:

========  ===================  ==================================================================
status    code                 meaning
========  ===================  ==================================================================
401       unauthorized         the server has a shared token and the request did not carry it
404       unknown_instance     the instance id does not exist (never created, closed, expired, or
                               held by a worker of ``--workers`` that was lost and restarted)
404       unknown_env          the request names an environment this server does not serve
404       not_found            no such route
405       method_not_allowed   the route exists but not for this HTTP method
409       episode_ended        step after the episode terminated or was truncated; reset first
409       no_episode           step before the instance was reset onto a task
409       request_id_reused    a create repeated a ``request_id`` with a different task, seed or env
413       body_too_large       the request body exceeds the server's limit
408       request_timeout      the client sent its headers or body too slowly (connection closed)
422       malformed_request    the body is not valid JSON (or UTF-8), nests too deeply, has a number
                               too large, or does not match the schema (types are strict: ``1.0``
                               and ``true`` are not integers)
422       invalid_task         the task id or split does not exist
500       env_error            the environment failed; the instance may be unusable
503       at_capacity          the server holds its maximum number of live instances
503       worker_lost          the worker process holding the instance stopped answering and is
                               being restarted (``--workers``); its instances are gone
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

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from agentgym_core.env import StepResult

PROTOCOL_VERSION = 1
PREFIX = f"/v{PROTOCOL_VERSION}"

MAX_ACTION_CHARS = 65_536
MAX_BATCH = 1024


MAX_REQUEST_ID_CHARS = 128
MAX_SEED = 2**63 - 1

# A server's defaults, here rather than in the server modules so that `agentgym serve --help`
# shows them without importing the web framework.
DEFAULT_MAX_INSTANCES = 256
DEFAULT_IDLE_TTL_S = 900.0
DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_WORKER_TIMEOUT_S = 10.0


def check_text(text: str) -> str:
    """Refuse text that cannot be encoded as UTF-8 (lone surrogates such as ``"\\ud800"``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text must be valid Unicode; it holds a lone surrogate at position {exc.start}") from None
    return text


Text = Annotated[str, AfterValidator(check_text)]
"""A string that can be sent back as UTF-8 (validated on every request that carries text)."""

_ID_TEXT = re.compile(r"0|[1-9][0-9]{0,19}")


def strict_id(value: Any) -> Any:
    """An instance id in a path or query: ASCII digits, no sign, space, leading zero or decimal point.

    Python's ``int()`` reads ``"+7"``, ``"07"``, ``" 7"`` and ``"7_0"`` as numbers; an id written any
    of those ways is refused instead of silently addressing instance 7.
    """
    if isinstance(value, str) and not _ID_TEXT.fullmatch(value):
        raise ValueError(f"an instance id is written in plain decimal digits (no sign, spaces, leading zeros or "
                         f"decimal point), got {value!r:.40}")
    return value


PathId = Annotated[int, BeforeValidator(strict_id)]
"""An instance id as a path parameter, read strictly (:func:`strict_id`)."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Create(_Request):
    env: Text | None = Field(default=None, max_length=256,
                             description="Environment name; optional when the server serves one.")
    task_id: int | None = Field(default=None, ge=0, description="Task to reset onto; None creates an idle instance.")
    seed: int | None = Field(default=None, ge=-MAX_SEED, le=MAX_SEED,
                             description="Seed for the task; None uses the task's default.")
    request_id: Text | None = Field(
        default=None, min_length=1, max_length=MAX_REQUEST_ID_CHARS,
        description="Client-chosen id of this create request (e.g. a UUID). A repeat with the same id answers "
                    "the instance the first one created, so a client may safely retry a create whose answer "
                    "it did not receive.")


class Reset(_Request):
    task_id: int = Field(ge=0, description="Task id from /v1/tasks.")
    seed: int | None = Field(default=None, ge=-MAX_SEED, le=MAX_SEED,
                             description="Seed for the task; None uses the task's default.")


class Step(_Request):
    action: Text = Field(max_length=MAX_ACTION_CHARS, description="The action text (already parsed).")


class ParseAction(_Request):
    text: Text = Field(max_length=MAX_ACTION_CHARS, description="A model reply to extract the action from.")


class BatchStepItem(_Request):
    instance_id: int = Field(ge=1, lt=2**53, description="An instance id from POST /v1/instances.")
    action: Text = Field(max_length=MAX_ACTION_CHARS)


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


class WorkerHealth(BaseModel):
    worker: int = Field(description="The worker's number, 0 to workers - 1.")
    status: str = Field(description="'ok', 'starting', or 'lost' (stopped answering; being restarted).")
    pid: int | None = None
    live_instances: int = 0
    max_instances: int = 0
    restarts: int = Field(0, description="Times this worker was restarted after it died or hung.")


class Health(BaseModel):
    status: str = Field("ok", description="'ok'; 'degraded' when a worker of several is lost or starting.")
    env: str
    protocol_version: int = PROTOCOL_VERSION
    server_version: str
    live_instances: int = Field(description="Live instances, summed over the workers.")
    max_instances: int = Field(description="Instances allowed at once, summed over the workers that answer.")
    workers: list[WorkerHealth] | None = Field(None, description="Each worker of `agentgym serve --workers N`.")


class EnvInfo(BaseModel):
    env: str
    instruction: str
    max_episode_steps: int | None
    split_sizes: dict[str, int]
    protocol_version: int = PROTOCOL_VERSION
    tools: list[dict[str, Any]] | None = Field(
        None, description="JSON schemas of the tools the environment is played through (Env.tools); absent or None: "
        "text actions (servers before this field sent none).")
