"""Action parsing: forgiving about form, strict about counts, never raises."""

from __future__ import annotations

import pytest

from agentgym_env_textcraft.actions import Craft, Get, InvalidAction, Inventory, parse_action


def test_the_three_actions():
    assert parse_action("get 2 oak logs") == Get("oak logs", 2)
    assert parse_action("inventory") == Inventory()
    assert parse_action("craft 3 dark oak sign using 6 dark oak planks, 1 stick") == Craft(
        "dark oak sign", 3, (("dark oak planks", 6), ("stick", 1))
    )


def test_form_is_normalised():
    assert parse_action("  Get   2  Oak Logs. ") == Get("oak logs", 2)
    assert parse_action("get 1 minecraft:oak_logs") == Get("oak logs", 1)
    assert parse_action("INVENTORY") == Inventory()
    assert parse_action("craft stick using 2 oak planks") == Craft("stick", None, (("oak planks", 2),))


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("", "empty"),
        ("get oak logs", "needs a count"),
        ("get 0 oak logs", "at least 1"),
        ("craft 4 stick", "needs a target and ingredients"),
        ("craft 4 stick using oak planks", "needs a count first"),
        ("craft 4 stick using 2 oak planks,", "an ingredient is empty"),
        ("mine 3 diamonds", "unknown command"),
        ("look", "unknown command"),
    ],
)
def test_malformed_actions_explain_themselves(text, hint):
    parsed = parse_action(text)
    assert isinstance(parsed, InvalidAction)
    assert hint in parsed.message
    assert "get <count> <item>" in parsed.message and "inventory" in parsed.message
