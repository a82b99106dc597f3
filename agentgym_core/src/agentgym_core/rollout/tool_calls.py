"""Actions as tool calls: any environment played through one ``act(action)`` tool instead of an ``Action:`` line.

:func:`tool_call_env` makes a subclass of an environment class whose instruction declares the tool
in the Hermes/Qwen function-calling format (the block those models' chat templates write for
``tools=[...]``: a ``<tools>`` JSON schema, calls as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``)
and whose ``parse_action`` reads the reply's tool call. A reply whose call cannot be parsed (no
``<tool_call>``, JSON that does not load, another tool's name, no ``action`` argument) never reaches
the environment: the step answers what was wrong, with ``invalid_action=True``, reward 0, and the
episode goes on (the environment's step count does not move; the trainer's turn budget does).

A recipe turns it on per environment with ``envs: [{name: ..., action_format: tool_call}]``;
``agentgym serve NAME --action-format tool_call`` is not there yet, so it applies to environments the
trainer starts itself.

Where this departs from native tool calling: the schema travels in the instruction (the system
message), not through the chat template's ``tools=`` argument, because the rollout backends render
messages only; for Hermes-style models (Qwen 2.5/3, SmolLM3, Hermes) it is the text their template
would write, for others it is a format stated in the prompt. The environment's answer comes back as
the next user message, not a ``tool`` message.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentgym_core.env import Env, StepResult

__all__ = ["TOOL_NAME", "ToolCallError", "act_tool_schema", "parse_tool_call", "tool_call_env"]

TOOL_NAME = "act"
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
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


def tools_block(env_name: str) -> str:
    """The function-calling block Hermes-style chat templates put in the system message."""
    schema = json.dumps(act_tool_schema(env_name))
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{schema}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        f'{{"name": "{TOOL_NAME}", "arguments": {{"action": "<your action>"}}}}\n</tool_call>'
    )


def parse_tool_call(text: str) -> str:
    """The ``action`` argument of the reply's first ``act`` tool call; :class:`ToolCallError` when there is none."""
    calls = _CALL.findall(text)
    if not calls:
        raise ToolCallError(f"no <tool_call> in the reply; call the {TOOL_NAME} tool")
    try:
        call = json.loads(calls[0].strip())
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"the tool call is not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(call, dict) or call.get("name") != TOOL_NAME:
        name = call.get("name") if isinstance(call, dict) else None
        raise ToolCallError(f"the tool call names {name!r}; the only tool is {TOOL_NAME!r}")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            raise ToolCallError("the tool call's arguments are a string that is not JSON") from None
    action = arguments.get("action") if isinstance(arguments, dict) else None
    if not isinstance(action, str) or not action.strip():
        raise ToolCallError(f"the {TOOL_NAME} call has no 'action' argument (a non-empty string)")
    return action.strip()


def tool_call_env(env_cls: type[Env]) -> type[Env]:
    """A subclass of ``env_cls`` played through the ``act`` tool (see the module docstring)."""
    if getattr(env_cls, "action_format", None) == "tool_call":
        return env_cls

    class ToolCallActions(env_cls):  # type: ignore[misc,valid-type]  # a subclass of whatever env class it gets
        action_format = "tool_call"

        @property
        def instruction(self) -> str:
            return f"{super().instruction}\n\n{tools_block(self.name)}"

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
