"""Protocol errors of the environment server, and how exceptions map onto them.

Kept apart from :mod:`agentgym_core.http.server` so that the server and its AgentGym-compatible routes
(:mod:`agentgym_core.http.compat`) both use one mapping without importing each other.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from agentgym_core.env import EnvError, EpisodeEndedError, InvalidTaskError
from agentgym_core.http import protocol as p
from agentgym_core.http.instances import (
    AtCapacityError,
    NoEpisodeError,
    RequestIdReusedError,
    UnknownInstanceError,
)

__all__ = ["ServerError", "error_status", "parse_json_body"]

log = logging.getLogger(__name__)

MAX_JSON_DEPTH = 32


class ServerError(Exception):
    """An error with an HTTP status and a protocol error code."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details

    def body(self) -> dict[str, Any]:
        """The protocol's error body, ``{"error": {"code", "message", "details"}}``."""
        return p.ErrorResponse(error=p.ErrorBody(code=self.code, message=self.message, details=self.details)).model_dump()


# Exceptions the protocol names, in the order they are tried: (class, HTTP status, error code).
_PROTOCOL_ERRORS: tuple[tuple[type[BaseException], int, str], ...] = (
    (UnknownInstanceError, 404, "unknown_instance"),
    (EpisodeEndedError, 409, "episode_ended"),
    (RequestIdReusedError, 409, "request_id_reused"),
    (NoEpisodeError, 409, "no_episode"),
    (InvalidTaskError, 422, "invalid_task"),
    (AtCapacityError, 503, "at_capacity"),
)


def error_status(exc: BaseException) -> ServerError:
    """Map an exception raised while serving a request to its protocol error."""
    if isinstance(exc, ServerError):
        return exc
    for cls, status, code in _PROTOCOL_ERRORS:
        if isinstance(exc, cls):
            return ServerError(status, code, str(exc))
    if isinstance(exc, EnvError):
        return ServerError(500, "env_error", f"{type(exc).__name__}: {exc}")
    log.exception("environment raised while serving a request", exc_info=exc)
    return ServerError(500, "env_error", f"the environment raised {type(exc).__name__}: {exc}")


def malformed(message: str) -> ServerError:
    return ServerError(422, "malformed_request", message)


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, without recursion (deep input must not crash the checker)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def parse_json_body(raw: bytes) -> Any:
    """Decode a request body as JSON, or raise a 422 ``malformed_request`` that says why."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise malformed(f"the body is not UTF-8 (byte {exc.start}); send JSON encoded as UTF-8") from None
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except RecursionError:
        raise malformed(f"the body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, and integers longer than Python's digit limit
        raise malformed(f"the body is not valid JSON: {exc}") from None
    # Nesting past the limit takes an opening and a closing bracket per level: short bodies cannot.
    if len(raw) > 2 * MAX_JSON_DEPTH and _depth(value) > MAX_JSON_DEPTH:
        raise malformed(f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    return value
