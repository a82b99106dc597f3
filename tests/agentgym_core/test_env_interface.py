"""The environment interface's shared pieces: the task catalog and the ReAct action parser."""

from __future__ import annotations

import pytest

from agentgym_core.env import InvalidTaskError, TaskCatalog, parse_react_action


def test_spread_takes_tasks_round_robin_across_categories():
    catalog = TaskCatalog(splits={"test": [0, 1, 2, 3, 4, 5, 6]},
                          categories={"depth1": [0, 1, 2, 3], "depth2": [4, 5], "depth3": [6]})
    assert catalog.spread("test", 4) == [0, 4, 6, 1]
    assert catalog.spread("test", None) == [0, 1, 2, 3, 4, 5, 6]
    assert catalog.spread("test", 100) == [0, 4, 6, 1, 5, 2, 3]  # all, still round-robin
    with pytest.raises(InvalidTaskError, match="offers"):
        catalog.spread("dev", 2)


def test_in_categories_keeps_the_given_order_and_names_what_to_fix():
    catalog = TaskCatalog(splits={"test": [0, 1, 2, 3, 4, 5, 6]},
                          categories={"depth1": [0, 1, 2, 3], "depth2": [4, 5], "depth3": [6]})
    assert catalog.in_categories([6, 4, 0, 5, 1], ["depth2", "depth3"]) == [6, 4, 5]
    with pytest.raises(InvalidTaskError, match=r"unknown category 'depht2' \(did you mean 'depth2'\?\); this "
                                               r"environment offers depth1, depth2, depth3"):
        catalog.in_categories([0, 1], ["depth1", "depht2"])
    with pytest.raises(InvalidTaskError, match="none of the 2 test tasks is in categories depth3"):
        catalog.in_categories([0, 1], ["depth3"], what="test tasks")
    with pytest.raises(InvalidTaskError, match="no categories"):
        TaskCatalog(splits={"test": [0]}).in_categories([0], ["depth1"])


def test_react_parser_takes_the_last_action_line():
    assert parse_react_action("Thought: e.g. Action: x\nAction: go to red ball 1") == "go to red ball 1"
    assert parse_react_action("Thought: hm\naction:  `turn left` ") == "turn left"
    assert parse_react_action("  no action here ") == "no action here"
