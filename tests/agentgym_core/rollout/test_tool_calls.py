"""Actions as tool calls: parsing, refused calls as invalid actions, and a recipe that trains with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym_core.rl.config import load_config
from agentgym_core.rollout.tool_calls import ToolCallError, parse_tool_call, tool_call_env
from agentgym_core.testing import check_env_http

pytest.importorskip("agentgym_env_guess")
from agentgym_env_guess.env import GuessEnv  # noqa: E402

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "textarena_tool_calls_cpu.yaml"


def call(action: str) -> str:
    return f'I will guess.\n<tool_call>\n{json.dumps({"name": "act", "arguments": {"action": action}})}\n</tool_call>'


def test_a_tool_call_is_parsed_and_reaches_the_environment_in_process_and_over_http():
    env = tool_call_env(GuessEnv)()
    assert '"name": "act"' in env.instruction and "<tools>" in env.instruction
    env.reset(3)
    assert env.parse_action(call("guess 50")) == "guess 50"
    assert "The secret is" in env.step(env.parse_action(call("guess 50"))).observation
    # over HTTP the server's copy reads the call (the engine asks the environment to parse every reply)
    report = check_env_http(
        tool_call_env(GuessEnv), task_ids=[3], policy=lambda e, i, o: e.parse_action(call(f"guess {i + 1}"))
    )
    assert [step[0] for step in report.episodes[0].steps][:2] == ["guess 1", "guess 2"]
    assert all(step[6] is False for step in report.episodes[0].steps)  # every call read: valid actions


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("Action: guess 50", "no <tool_call>"),
        ('<tool_call>{"name": "act", "arguments": {"action": "guess 5"}</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "guess", "arguments": {"action": "guess 5"}}</tool_call>', "the only tool is 'act'"),
        ('<tool_call>{"name": "act", "arguments": {"number": 5}}</tool_call>', "no 'action' argument"),
    ],
)
def test_an_unreadable_call_is_an_invalid_action_that_never_reaches_the_environment(reply, reason):
    with pytest.raises(ToolCallError, match=reason):
        parse_tool_call(reply)
    env = tool_call_env(GuessEnv)()
    env.reset(3)
    refused = env.step(env.parse_action(reply))
    assert refused.invalid_action is True and reason in refused.observation and not refused.done
    assert env._steps == 0  # the guess environment never counted it


def test_arguments_written_as_a_json_string_are_read():
    reply = '<tool_call>{"name": "act", "arguments": "{\\"action\\": \\"guess 7\\"}"}</tool_call>'
    assert parse_tool_call(reply) == "guess 7"


def test_a_running_server_cannot_take_tool_calls_from_a_recipe():
    with pytest.raises(ValueError, match="action_format tool_call applies to an environment the trainer starts"):
        load_config(None, ["envs=[{name: guess, url: 'http://127.0.0.1:1', action_format: tool_call}]"])


@pytest.mark.slow
def test_the_tool_call_recipe_trains_two_steps_and_marks_unreadable_calls_invalid(tmp_path, one_rl_step):
    pytest.importorskip("textarena")
    torch = pytest.importorskip("torch")
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    torch.set_num_threads(1)
    config = load_config(RECIPE, one_rl_step(steps=2, max_total_tokens=3072))
    assert config.envs[0].action_format == "tool_call"
    model, tokenizer = tiny_chat_model(seed=0)
    manager = PluginManager(autoload=True, allow=["estimators", "transformers", "textarena"])
    train(config, plugin_manager=manager, model=model, tokenizer=tokenizer)
    run = tmp_path / "run"
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines() if '"train"' in x] == [1, 2]
    saved = [json.loads(line) for line in (run / "trajectories" / "step_000002.jsonl").read_text().splitlines()]
    assert "<tools>" in saved[0]["messages"][0]["content"]  # the tool's schema reached the prompt
    turns = [turn for record in saved for turn in record["turns"]]
    # a random model writes no readable call: each turn is refused as an invalid action, the game untouched
    assert turns and all(turn["invalid_action"] and "Invalid tool call" in turn["observation"] for turn in turns)
