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

A turn then appends ``encode(closing + user_prefix + observation + user_suffix)``. The auditor
(:func:`agentgym_core.testing.check_trajectory`) checks that the concatenation equals the full
render of the same messages, or explains the difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentgym_core.rollout.backend import RolloutBackend

__all__ = ["ChatFormat", "ChatTemplateError"]

_REPLY = "\x00REPLY\x00"
_OBS = "\x00OBS\x00"


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
        self._probes: dict[bool, _Probe] = {}

    def probe(self, with_system: bool) -> _Probe:
        """The template pieces for conversations with/without a system message (cached)."""
        if with_system not in self._probes:
            self._probes[with_system] = self._make_probe(with_system)
        return self._probes[with_system]

    def _make_probe(self, with_system: bool) -> _Probe:
        render = self.backend.apply_chat_template
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
    def prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Tokens of the first prompt (system + first user message + generation prompt)."""
        return self.backend.encode(self.backend.apply_chat_template(messages, add_generation_prompt=True))

    def closing_text(self, reply_ids: Sequence[int], *, with_system: bool) -> str:
        """Template text that closes a reply after the tokens the model sampled."""
        suffix = self.probe(with_system).reply_suffix
        if reply_ids and reply_ids[-1] in self.backend.eos_token_ids:
            eos_text = self.backend.decode([reply_ids[-1]])
            if eos_text and suffix.startswith(eos_text):
                return suffix[len(eos_text):]
        return suffix

    def turn_ids(self, reply_ids: Sequence[int], observation: str, *, with_system: bool) -> list[int]:
        """Tokens appended after a reply: the reply's closing, the observation, the generation prompt."""
        probe = self.probe(with_system)
        text = self.closing_text(reply_ids, with_system=with_system)
        return self.backend.encode(text + probe.user_prefix + observation + probe.user_suffix)

    def reply_content(self, reply_ids: Sequence[int]) -> str:
        """The reply as message content: decoded, without the end-of-turn token (display only)."""
        ids = list(reply_ids)
        if ids and ids[-1] in self.backend.eos_token_ids:
            ids = ids[:-1]
        return self.backend.decode(ids)
