"""Incremental chat templating: the tokens a new turn appends, derived from the model's template.

Re-rendering the whole history every turn (and re-encoding the model's replies) is how the
anchor drifts away from the tokens it sampled. Instead, :class:`ChatFormat` renders small probe
conversations once and takes differences of the renders:

* ``reply_suffix``: what the template writes after an assistant message's content (ChatML:
  ``<|im_end|>\\n``). When the model ended its reply with the end-of-turn token, only the part of
  the suffix after that token's text is appended (ChatML: the newline).
* ``user_prefix`` / ``user_suffix``: what surrounds a user message's content, the suffix
  including the generation prompt (ChatML: ``<|im_start|>user\\n`` and
  ``<|im_end|>\\n<|im_start|>assistant\\n``).

A turn then appends ``encode(closing + user_prefix + observation + user_suffix)``. An environment
with tools (``Env.tools``) is rendered with ``tools=`` throughout when :attr:`ChatFormat.renders_tools`
(the template writes a probe tool's schema), and its probes are taken with the same tools. The auditor
(:func:`agentgym_core.testing.check_trajectory`) checks that the concatenation equals the full
render of the same messages, or explains the difference.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_core.rollout.backend import RolloutBackend

__all__ = ["ChatFormat", "ChatTemplateError"]

_REPLY = "\x00REPLY\x00"
_OBS = "\x00OBS\x00"
_PROBE_TOOL = {"type": "function", "function": {
    "name": "agentgym_probe_tool", "description": "Probe.",
    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}

Tools = Sequence[Mapping[str, Any]] | None


class ChatTemplateError(ValueError):
    """The model's chat template cannot be rendered incrementally."""


@dataclass(frozen=True)
class _Probe:
    reply_prefix: str
    reply_suffix: str
    user_prefix: str
    user_suffix: str


class ChatFormat:
    """Turns messages and observations into prompt tokens for one backend's chat template."""

    def __init__(self, backend: RolloutBackend) -> None:
        self.backend = backend
        self._probes: dict[tuple[bool, str | None], _Probe] = {}
        self._renders_tools: bool | None = None
        self.tools_fallback_reason = ""  # why renders_tools is False, for the run's log

    @property
    def renders_tools(self) -> bool:
        """True when the backend passes ``tools=`` to a chat template that writes them (native tool calls);
        False when it cannot (an ``apply_chat_template`` without ``tools``) or the template ignores them."""
        if self._renders_tools is None:
            self._renders_tools, self.tools_fallback_reason = self._probe_tools()
        return self._renders_tools

    def _probe_tools(self) -> tuple[bool, str]:
        if "tools" not in inspect.signature(self.backend.apply_chat_template).parameters:
            return False, f"the {type(self.backend).__name__} backend's apply_chat_template takes no tools"
        try:
            rendered = self.backend.apply_chat_template(  # type: ignore[call-arg]
                [{"role": "user", "content": "U"}], add_generation_prompt=True, tools=[_PROBE_TOOL])
        except Exception as exc:  # noqa: BLE001 - a template may refuse tools in any way it likes (raise_exception)
            return False, f"the chat template refused tools=: {exc}"
        if _PROBE_TOOL["function"]["name"] not in rendered:
            return False, "the chat template does not render tools="
        return True, ""

    def render(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool, tools: Tools = None) -> str:
        """The template's text for ``messages``; ``tools`` are passed only when given (a backend may not take them)."""
        if tools:
            return self.backend.apply_chat_template(  # type: ignore[call-arg]
                messages, add_generation_prompt=add_generation_prompt, tools=[dict(t) for t in tools])
        return self.backend.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)

    def probe(self, with_system: bool, tools: Tools = None) -> _Probe:
        """The template pieces for conversations with/without a system message, rendered with ``tools`` (cached)."""
        key = (with_system, json.dumps(tools, sort_keys=True) if tools else None)
        if key not in self._probes:
            self._probes[key] = self._make_probe(with_system, tools)
        return self._probes[key]

    def _make_probe(self, with_system: bool, tools: Tools) -> _Probe:
        def render(messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
            return self.render(messages, add_generation_prompt=add_generation_prompt, tools=tools)

        head = [{"role": "system", "content": "S"}] if with_system else []
        head.append({"role": "user", "content": "U"})
        base = render(head, add_generation_prompt=True)
        replied = render([*head, {"role": "assistant", "content": _REPLY}], add_generation_prompt=False)
        observed = render(
            [*head, {"role": "assistant", "content": _REPLY}, {"role": "user", "content": _OBS}],
            add_generation_prompt=True,
        )
        if not replied.startswith(base) or _REPLY not in replied[len(base):]:
            raise ChatTemplateError(
                "the chat template does not render an assistant reply as a continuation of the "
                "generation prompt, so turns cannot be appended incrementally; got\n"
                f"  prompt: {base!r}\n  with reply: {replied!r}"
            )
        if not observed.startswith(replied) or _OBS not in observed[len(replied):]:
            raise ChatTemplateError(
                "the chat template re-renders earlier messages when a new user message follows a "
                f"reply; got\n  with reply: {replied!r}\n  with next message: {observed!r}"
            )
        reply_prefix, reply_suffix = replied[len(base):].split(_REPLY)
        user_prefix, user_suffix = observed[len(replied):].split(_OBS)
        return _Probe(reply_prefix, reply_suffix, user_prefix, user_suffix)

    # -- what the engine calls ---------------------------------------------------------------
    def prompt_ids(self, messages: Sequence[Mapping[str, str]], tools: Tools = None) -> list[int]:
        """Tokens of the first prompt (system + first user message + generation prompt), rendered with ``tools``."""
        return self.backend.encode(self.render(messages, add_generation_prompt=True, tools=tools))

    def closing_text(self, reply_ids: Sequence[int], *, with_system: bool, tools: Tools = None) -> str:
        """Template text that closes a reply after the tokens the model sampled."""
        suffix = self.probe(with_system, tools).reply_suffix
        if reply_ids and reply_ids[-1] in self.backend.eos_token_ids:
            eos_text = self.backend.decode([reply_ids[-1]])
            if eos_text and suffix.startswith(eos_text):
                return suffix[len(eos_text):]
        return suffix

    def turn_ids(self, reply_ids: Sequence[int], observation: str, *, with_system: bool, tools: Tools = None) -> list[int]:
        """Tokens appended after a reply: the reply's closing, the observation, the generation prompt."""
        probe = self.probe(with_system, tools)
        text = self.closing_text(reply_ids, with_system=with_system, tools=tools)
        return self.backend.encode(text + probe.user_prefix + observation + probe.user_suffix)

    def reply_content(self, reply_ids: Sequence[int]) -> str:
        """The reply as message content: decoded, without the end-of-turn token (display only)."""
        ids = list(reply_ids)
        if ids and ids[-1] in self.backend.eos_token_ids:
            ids = ids[:-1]
        return self.backend.decode(ids)
