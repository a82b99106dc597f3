"""Actions as tool calls: any environment played through one ``act(action)`` tool instead of an ``Action:`` line.

:func:`tool_call_env` makes a subclass of an environment class that declares the tool
(:attr:`~agentgym_core.env.Env.tools`: its JSON schema in the OpenAI/Hugging Face ``tools`` shape)
and whose ``parse_action`` reads the reply's tool call. How the model is told about the tool depends
on its chat template, and the rollout engine logs which way a run goes when an environment with
tools first resets:

* **native**: the template renders ``tools=`` (Qwen 2.5/3, Hermes, Llama 3.1+, SmolLM3, ...): the
  schemas go through ``apply_chat_template(..., tools=...)``, so the model sees them as it was
  trained to, and the prompt tokens are exactly that render (``Trajectory.tools`` keeps them for
  the auditor);
* **fallback**: the template ignores ``tools=`` (or the backend cannot pass it, or the text-level
  engine talks to a chat API): :func:`describe_tools` appends the Hermes function-calling block
  (a ``<tools>`` JSON schema, calls as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``)
  to the instruction, the text Hermes-style templates write themselves.

:func:`parse_tool_call` reads the formats those templates teach: ``<tool_call>{...}</tool_call>``
(Hermes, Qwen), a bare JSON object or a one-call JSON list (Llama 3.1, Mistral, optionally in a
```` ```json ```` fence), with ``arguments`` or ``parameters``, as an object or a JSON string. A reply
whose call cannot be read (no call, JSON that does not load, another tool's name, no ``action``
argument) never reaches the environment: the step answers what was wrong, with
``invalid_action=True``, reward 0, and the episode goes on (the environment's step count does not
move; the trainer's turn budget does).

A recipe turns it on per environment with ``envs: [{name: ..., action_format: tool_call}]``: an
environment the trainer starts is wrapped on its server (whose ``/info`` then sends the schemas); one
at ``url``/``urls`` (any ``agentgym serve``, or an OpenEnv server) is wrapped on the client, which
parses the call and sends the server the plain action.

Where this departs from native tool calling: the reply stays an assistant message with text
content (the tokens the model sampled), and the environment's answer comes back as the next user
message, not a ``tool`` message.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from agentgym_core.env import Env, StepResult

__all__ = ["TOOL_NAME", "ToolCallError", "act_tool_schema", "describe_tools", "parse_tool_call", "tool_call_env"]

TOOL_NAME = "act"
EnvT = TypeVar("EnvT", bound=Env)
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.S)
_REFUSED = "\x00tool-call-refused\x00"  # prefix of parse_action's answer for a call it could not read


class ToolCallError(ValueError):
    """A reply's tool call could not be read; the message says why."""


def act_tool_schema(env_name: str) -> dict[str, Any]:
    """The JSON schema of the one tool, in the OpenAI/Hugging Face ``tools`` shape."""
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": f"Take one action in the {env_name} environment; returns what it answers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {
                        "type": "string",
                        "description": "The action, written as the instructions ask (what would follow `Action:`).",
                    }
                },
                "required": ["action"],
            },
        },
    }


def describe_tools(instruction: str, tools: list[dict[str, Any]]) -> str:
    """The instruction followed by the function-calling block Hermes-style chat templates write for ``tools``
    (the fallback for a template that does not render them)."""
    schemas = "\n".join(json.dumps(tool) for tool in tools)
    return (
        f"{instruction}\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{schemas}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def _first_call(text: str) -> Any:
    """The first tool call of a reply as loaded JSON: a ``<tool_call>`` block, else the whole reply as JSON."""
    calls = _CALL.findall(text)
    if calls:
        body = calls[0].strip()
    else:
        body = text.strip()
        fenced = _FENCE.match(body)
        body = fenced.group(1) if fenced else body
        if not body.startswith(("{", "[")):
            raise ToolCallError(f"no <tool_call> (or JSON tool call) in the reply; call the {TOOL_NAME} tool")
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"the tool call is not valid JSON ({exc.msg} at character {exc.pos})") from None
    if isinstance(call, list) and call:  # a list of calls (Mistral-style): the first one acts
        call = call[0]
    return call


def parse_tool_call(text: str) -> str:
    """The ``action`` argument of the reply's first ``act`` tool call; :class:`ToolCallError` when there is none."""
    call = _first_call(text)
    if not isinstance(call, dict) or call.get("name") != TOOL_NAME:
        name = call.get("name") if isinstance(call, dict) else None
        raise ToolCallError(f"the tool call names {name!r}; the only tool is {TOOL_NAME!r}")
    arguments = call.get("arguments", call.get("parameters", {}))  # Llama 3.1 writes "parameters"
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            raise ToolCallError("the tool call's arguments are a string that is not JSON") from None
    action = arguments.get("action") if isinstance(arguments, dict) else None
    if not isinstance(action, str) or not action.strip():
        raise ToolCallError(f"the {TOOL_NAME} call has no 'action' argument (a non-empty string)")
    return action.strip()


def tool_call_env(env_cls: type[EnvT]) -> type[EnvT]:
    """A subclass of ``env_cls`` played through the ``act`` tool (see the module docstring)."""
    if getattr(env_cls, "action_format", None) == "tool_call":
        return env_cls

    class ToolCallActions(env_cls):  # type: ignore[misc,valid-type]  # a subclass of whatever env class it gets
        action_format = "tool_call"

        @property
        def tools(self) -> list[dict[str, Any]]:
            return [act_tool_schema(self.name)]

        def parse_action(self, text: str) -> str:
            try:
                return parse_tool_call(text)
            except ToolCallError as exc:
                return f"{_REFUSED}{exc}"

        def step(self, action: str) -> StepResult:
            if action.startswith(_REFUSED):
                reason = action[len(_REFUSED) :]
                return StepResult(
                    observation=f"Invalid tool call: {reason}. Nothing happened.",
                    invalid_action=True,
                    info={"tool_call_error": reason},
                )
            return super().step(action)

    ToolCallActions.__name__ = ToolCallActions.__qualname__ = f"{env_cls.__name__}ToolCalls"
    ToolCallActions.__doc__ = f"{env_cls.__name__} played through the {TOOL_NAME!r} tool (tool_call_env)."
    return ToolCallActions
