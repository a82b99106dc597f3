"""WebArena's action space: extracting the action from a model reply and parsing it.

The model is prompted as in WebArena (and AgentGym's WebArena client) to finish its reply with
"In summary, the next action I will perform is ```click [1234]```"; the action is the text inside
the triple backticks. WebArena takes the first fenced block; we take the last one, because a
reply that quotes an example before its own action would otherwise execute the example.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ACTION_HELP", "Action", "ActionParseError", "extract_action", "parse_action"]

ACTION_HELP = (
    "click [id] | type [id] [text] [0|1] | hover [id] | press [keys] | scroll [down|up] | new_tab | "
    "tab_focus [index] | close_tab | goto [url] | go_back | go_forward | stop [answer]"
)

_FENCED = re.compile(r"```(.*?)```", re.DOTALL)
_BRACKETS = re.compile(r"\[(.*?)\](?=\s*(?:\[|$))", re.DOTALL)

_NO_ARGUMENT = {"new_tab", "close_tab", "go_back", "go_forward"}
_KNOWN = _NO_ARGUMENT | {"click", "hover", "type", "press", "scroll", "tab_focus", "goto", "stop"}


class ActionParseError(ValueError):
    """The text is not a valid WebArena action; the message says what is expected."""


@dataclass(frozen=True)
class Action:
    """One parsed action. Fields that an action type does not use stay at their defaults."""

    kind: str
    element_id: int | None = None
    text: str = ""
    press_enter: bool = True
    direction: str = ""
    tab_index: int | None = None
    url: str = ""
    keys: str = ""
    answer: str = ""

    def describe(self) -> str:
        """The action in its canonical text form (what PREVIOUS ACTION shows)."""
        if self.kind in _NO_ARGUMENT:
            return self.kind
        if self.kind in ("click", "hover"):
            return f"{self.kind} [{self.element_id}]"
        if self.kind == "type":
            return f"type [{self.element_id}] [{self.text}] [{int(self.press_enter)}]"
        if self.kind == "press":
            return f"press [{self.keys}]"
        if self.kind == "scroll":
            return f"scroll [{self.direction}]"
        if self.kind == "tab_focus":
            return f"tab_focus [{self.tab_index}]"
        if self.kind == "goto":
            return f"goto [{self.url}]"
        return f"stop [{self.answer}]"


def extract_action(reply: str) -> str:
    """Return the action written in a model reply: the last ```fenced``` block, else the reply itself.

    A reply without backticks is passed through stripped so that a bare `click [3]` also works
    (convenient for scripted agents) and anything else is answered as an invalid action.
    """
    blocks = _FENCED.findall(reply)
    if blocks:
        return blocks[-1].strip()
    return reply.strip()


def _arguments(rest: str) -> list[str]:
    """The bracketed arguments of an action, e.g. '[12] [hello] [1]' -> ['12', 'hello', '1']."""
    rest = rest.strip()
    if not rest:
        return []
    if not rest.startswith("["):
        raise ActionParseError(f"arguments must be in square brackets, got {rest!r}")
    args = _BRACKETS.findall(rest)
    if not args:
        raise ActionParseError(f"unbalanced square brackets in {rest!r}")
    return [a.strip() for a in args]


def _element_id(value: str, action: str) -> int:
    if not value.isdigit():
        raise ActionParseError(f"{action} needs a numeric element id like `{action} [12]`, got [{value}]")
    return int(value)


def parse_action(text: str) -> Action:
    """Parse one action string (already extracted from the reply) into an `Action`.

    Raises ActionParseError with a message meant for the agent when the text is not an action.
    """
    text = text.strip()
    if not text:
        raise ActionParseError("the reply contains no action")
    head, _, rest = text.partition(" ")
    # Tolerate `click[12]` without the space.
    if "[" in head:
        head, bracket, tail = head.partition("[")
        rest = bracket + tail + (" " + rest if rest else "")
    kind = head.strip().lower()
    if kind not in _KNOWN:
        raise ActionParseError(f"unknown action {head[:40]!r} (the reply should end with one action in ```backticks```)")
    args = _arguments(rest) if kind != "stop" else []

    if kind in _NO_ARGUMENT:
        return Action(kind)
    if kind in ("click", "hover"):
        if len(args) != 1:
            raise ActionParseError(f"{kind} takes one element id: `{kind} [12]`")
        return Action(kind, element_id=_element_id(args[0], kind))
    if kind == "type":
        if len(args) not in (2, 3):
            raise ActionParseError("type takes an id, the text and optionally 0|1: `type [12] [shoes] [1]`")
        enter = True
        if len(args) == 3:
            if args[2] not in ("0", "1"):
                raise ActionParseError(f"the last argument of type must be 0 or 1, got [{args[2]}]")
            enter = args[2] == "1"
        return Action(kind, element_id=_element_id(args[0], kind), text=args[1], press_enter=enter)
    if kind == "press":
        if len(args) != 1 or not args[0]:
            raise ActionParseError("press takes one key combination: `press [Enter]` or `press [Control+a]`")
        return Action(kind, keys=args[0])
    if kind == "scroll":
        direction = args[0].lower().removeprefix("direction=") if len(args) == 1 else ""
        if direction not in ("up", "down"):
            raise ActionParseError("scroll takes a direction: `scroll [down]` or `scroll [up]`")
        return Action(kind, direction=direction)
    if kind == "tab_focus":
        if len(args) != 1 or not args[0].isdigit():
            raise ActionParseError("tab_focus takes a tab index: `tab_focus [0]`")
        return Action(kind, tab_index=int(args[0]))
    if kind == "goto":
        if len(args) != 1 or not args[0]:
            raise ActionParseError("goto takes a URL: `goto [http://example.com/page]`")
        return Action(kind, url=args[0])
    if kind == "stop":
        # The answer may itself contain brackets (a JSON list): take everything between the
        # first '[' and the last ']'.
        rest = rest.strip()
        if rest.startswith("[") and rest.endswith("]"):
            answer = rest[1:-1].strip()
        elif not rest:
            answer = ""
        else:
            raise ActionParseError("stop takes the answer in brackets: `stop [42]` (or `stop []`)")
        return Action(kind, answer=answer)
    raise AssertionError(kind)  # unreachable: every kind in _KNOWN is handled above
