"""Grading with webarena-verified's own evaluators, for its 812 tasks and for ours alike.

`WebArenaVerified` insists on its 812-task file, so we call its evaluator with a ready
`TaskEvalContext` instead: same evaluator classes, same normalisation, any task file.

WebArena's original action `stop [answer]` carries a plain string, while webarena-verified grades
a JSON object ``{task_type, status, retrieved_data, error_details}``. In "legacy" answer mode the
plain answer is wrapped: task_type is the task's own (the original WebArena never asked agents to
classify tasks), "N/A" becomes a failure status (WebArena's convention for "cannot be done"), and
a retrieve task's answer becomes ``retrieved_data`` (a JSON list is taken as the list, anything
else as one item). An answer that already is such a JSON object is graded as written.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from webarena_verified.api.internal.evaluator import WebArenaVerifiedEvaluator
from webarena_verified.types.config import EnvironmentConfig, WebArenaVerifiedConfig
from webarena_verified.types.eval import TaskEvalContext
from webarena_verified.types.task import WebArenaSite, WebArenaVerifiedTask
from webarena_verified.types.tracing import NetworkTrace

__all__ = ["GradeResult", "agent_response", "grade"]

# webarena-verified logs every evaluation at INFO; a training run grades thousands.
logging.getLogger("webarena_verified").setLevel(logging.WARNING)

_NOT_APPLICABLE = {"n/a", "na", "none", "not applicable", "impossible"}


def agent_response(task: WebArenaVerifiedTask, answer: str, answer_format: str) -> dict[str, Any] | str:
    """The response webarena-verified grades, built from the text of `stop [answer]`."""
    text = answer.strip()
    try:
        parsed = json.loads(text) if text else None
    except json.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    if answer_format == "json":
        return text  # graded as written: not JSON, so it scores 0 with a clear evaluator message
    expected = task.expected_agent_response
    task_type = str(expected.task_type).upper()
    if text.lower().strip(" .\"'") in _NOT_APPLICABLE:
        status = expected.status if expected.status != "SUCCESS" else "NOT_FOUND_ERROR"
        return {"task_type": task_type, "status": status, "retrieved_data": None, "error_details": text}
    data: list[Any] | None = None
    if task.is_retrieve_task:
        data = parsed if isinstance(parsed, list) else [text]
    return {"task_type": task_type, "status": "SUCCESS", "retrieved_data": data, "error_details": None}


class GradeResult(dict):
    """`score` (0.0 or 1.0), `status`, and per-evaluator details; a plain JSON-ready dict."""


def grade(
    task: WebArenaVerifiedTask,
    response: dict[str, Any] | str,
    trace: list[dict[str, Any]],
    sites: dict[str, str],
) -> GradeResult:
    """Score `response` and the episode's network `trace` with the task's evaluators."""
    environments = {WebArenaSite(name): EnvironmentConfig(urls=[url]) for name, url in sites.items()}
    config = WebArenaVerifiedConfig(environments=environments)
    if not trace:
        # The evaluator refuses an empty trace outright; a response-only task must still be graded.
        trace = [_placeholder_entry(task, sites)]
    context = TaskEvalContext(
        task=task,
        agent_response_raw=response if isinstance(response, str) else json.dumps(response),
        network_trace=NetworkTrace.from_content(trace),
        config=config,
    )
    result = WebArenaVerifiedEvaluator(config=config, reader=None).evaluate_task(context=context)  # type: ignore[arg-type]
    details = []
    for item in result.evaluators_results:
        failed = [a.assertion_name for a in item.assertions or () if not a.is_success]
        details.append(
            {"evaluator": item.evaluator_name, "score": item.score, "status": str(item.status), "failed": failed}
            | ({"error": item.error_msg} if item.error_msg else {})
        )
    out = GradeResult(score=float(result.score), status=str(result.status), evaluators=details)
    if result.error_msg:
        out["error"] = result.error_msg
    return out


def _placeholder_entry(task: WebArenaVerifiedTask, sites: dict[str, str]) -> dict[str, Any]:
    """A non-navigation request to the task's first site: satisfies the trace parser, matches nothing."""
    base = sites.get(task.sites[0].value, "http://localhost")
    return {
        "request": {"method": "HEAD", "url": f"{base}/__agentgym_no_traffic__", "headers": []},
        "response": {"status": 204, "headers": [], "redirectURL": "", "cookies": []},
    }
