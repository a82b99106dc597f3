from agentgym_env_search.protocol import format_information, parse_search_action
from agentgym_env_search.retrievers import Hit


def test_first_tag_is_the_action_and_thinking_is_ignored():
    action = parse_search_action("<think>I need facts</think>\n<search> capital of\nFrance </search> <answer>x</answer>")
    assert (action.kind, action.content) == ("search", "capital of France")
    assert parse_search_action("<ANSWER>Paris</ANSWER>").kind == "answer"


def test_missing_or_empty_tags_are_invalid():
    assert parse_search_action("I think it is Paris").kind == "invalid"
    assert parse_search_action("<search>   </search>").kind == "invalid"
    assert parse_search_action("<search>unclosed").kind == "invalid"


def test_information_block_uses_search_r1_layout():
    hits = [Hit(id="7", row=7, title="Paris", text="Capital of France.", score=2.0),
            Hit(id="9", row=9, title="Seine", text="A river.", score=1.0)]
    assert format_information(hits) == (
        "<information>Doc 1(Title: Paris) Capital of France.\nDoc 2(Title: Seine) A river.</information>")
    assert format_information([]).startswith("<information>No passage matched")
