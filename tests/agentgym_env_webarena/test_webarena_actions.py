"""Parsing WebArena actions from model replies (no browser needed)."""

from __future__ import annotations

import pytest

from agentgym_env_webarena import ActionParseError, extract_action, parse_action


def test_action_is_taken_from_the_last_fenced_block():
    reply = "Like ```click [1]``` in the example. In summary, the next action I will perform is ```type [7] [olive lamp] [0]```"
    assert extract_action(reply) == "type [7] [olive lamp] [0]"
    assert extract_action("  click [3] ") == "click [3]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("click [12]", "click [12]"),
        ("click[12]", "click [12]"),
        ("hover [3]", "hover [3]"),
        ("type [7] [red shoes]", "type [7] [red shoes] [1]"),
        ("type [7] [red shoes] [0]", "type [7] [red shoes] [0]"),
        ("press [Control+a]", "press [Control+a]"),
        ("scroll [down]", "scroll [down]"),
        ("scroll [direction=up]", "scroll [up]"),
        ("new_tab", "new_tab"),
        ("tab_focus [1]", "tab_focus [1]"),
        ("close_tab", "close_tab"),
        ("goto [http://127.0.0.1:1/a?b=[c]]", "goto [http://127.0.0.1:1/a?b=[c]]"),
        ("go_back", "go_back"),
        ("go_forward", "go_forward"),
        ("stop [$118.99]", "stop [$118.99]"),
        ("stop []", "stop []"),
        ('stop [["a", "b"]]', 'stop [["a", "b"]]'),
    ],
)
def test_every_webarena_action_parses_and_round_trips(text, expected):
    assert parse_action(text).describe() == expected


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("", "no action"),
        ("jump [3]", "unknown action"),
        ("click [abc]", "numeric element id"),
        ("click 3", "square brackets"),
        ("type [3]", "type takes"),
        ("type [3] [x] [2]", "0 or 1"),
        ("scroll [left]", "direction"),
        ("tab_focus [x]", "tab index"),
        ("stop 42", "brackets"),
    ],
)
def test_invalid_actions_explain_what_is_expected(text, hint):
    with pytest.raises(ActionParseError, match=hint):
        parse_action(text)
