"""Parse TextCraft action strings: ``get <n> <item>``, ``craft <n> <item> using <n> <item>, ...``,
``inventory``.

Parsing is forgiving about what does not change the meaning (case, repeated spaces, a trailing
period, ``minecraft:`` ids with underscores) and strict about what does (counts are required on
every ingredient). A string that is not an action comes back as :class:`InvalidAction` with a
message that says what was expected, which the environment shows the agent verbatim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgym_env_textcraft.recipes import display_name

__all__ = ["ACTION_FORMS", "Craft", "Get", "InvalidAction", "Inventory", "TextCraftAction", "parse_action"]

ACTION_FORMS = (
    "get <count> <item>",
    "craft <count> <item> using <count> <item>, <count> <item>, ...",
    "inventory",
)
_FORMS_TEXT = " | ".join(ACTION_FORMS)


@dataclass(frozen=True)
class Get:
    """Gather `count` of a base item."""

    item: str
    count: int


@dataclass(frozen=True)
class Craft:
    """Craft `output` from `inputs` ((item, count) pairs); `count` is what the agent asked for."""

    output: str
    count: int | None
    inputs: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Inventory:
    """Show what the agent holds."""


@dataclass(frozen=True)
class InvalidAction:
    """The text was not a well-formed action; `message` tells the agent how to fix it."""

    text: str
    message: str


TextCraftAction = Get | Craft | Inventory | InvalidAction

_GET = re.compile(r"get\s+(\S+)\s+(.+)")
_CRAFT = re.compile(r"craft\s+(.+?)\s+using\s+(.+)")
_COUNTED = re.compile(r"(\d+)\s+(.+)")


def _name(text: str) -> str:
    return " ".join(display_name(text.strip()).split())


def _invalid(text: str, why: str) -> InvalidAction:
    return InvalidAction(text, f"Invalid action {text!r}: {why}. Valid actions: {_FORMS_TEXT}.")


def parse_action(text: str) -> TextCraftAction:
    """Turn one action string into a typed action (never raises)."""
    cleaned = " ".join(text.strip().split()).rstrip(".").strip()
    lowered = cleaned.lower()
    if not lowered:
        return _invalid(text, "the action is empty")
    if lowered == "inventory":
        return Inventory()
    verb = lowered.split(" ", 1)[0]
    if verb == "get":
        match = _GET.fullmatch(lowered)
        if not match or not match.group(1).isdigit():
            return _invalid(text, "'get' needs a count and an item, e.g. 'get 1 oak logs'")
        count = int(match.group(1))
        if count < 1:
            return _invalid(text, "the count must be at least 1")
        return Get(_name(match.group(2)), count)
    if verb == "craft":
        match = _CRAFT.fullmatch(lowered)
        if not match:
            return _invalid(
                text, "'craft' needs a target and ingredients, e.g. 'craft 4 oak planks using 1 oak logs'"
            )
        target = _COUNTED.fullmatch(match.group(1))
        output, count = (
            (_name(target.group(2)), int(target.group(1))) if target else (_name(match.group(1)), None)
        )
        inputs: list[tuple[str, int]] = []
        for part in match.group(2).split(","):
            if not part.strip():
                return _invalid(text, "an ingredient is empty; separate ingredients with single commas")
            counted = _COUNTED.fullmatch(part.strip())
            if not counted:
                return _invalid(text, f"ingredient {part.strip()!r} needs a count first, e.g. '2 stick'")
            if int(counted.group(1)) < 1:
                return _invalid(text, f"ingredient {part.strip()!r} needs a count of at least 1")
            inputs.append((_name(counted.group(2)), int(counted.group(1))))
        return Craft(output, count, tuple(inputs))
    return _invalid(text, f"unknown command {verb!r}")
