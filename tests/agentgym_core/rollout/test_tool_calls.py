"""Actions as tool calls: native chat-template tools or the system-message fallback, the formats parsed,
refused calls as invalid actions, remote servers played through tool calls, and a recipe that trains with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym_core.rl.config import EnvConfig, load_config
from agentgym_core.rollout.tool_calls import ToolCallError, act_tool_schema, parse_tool_call, tool_call_env
from agentgym_core.testing import check_env_http, serve_env
from agentgym_core.testing.tiny_model import CHATML_TEMPLATE

pytest.importorskip("agentgym_env_guess")
from agentgym_env_guess.env import GuessEnv  # noqa: E402

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "textarena_tool_calls_cpu.yaml"

# ChatML that lists the tools in a system turn of their own when given any.
TOOLS_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\n# Tools\n' }}{% for tool in tools %}{{ tool | tojson }}{{ '\n' }}"
    "{% endfor %}{{ '<|im_end|>\n' }}{% endif %}" + CHATML_TEMPLATE
)
# ChatML that writes the tools into the system message after its content, as Qwen's and Hermes' templates do.
MERGED_TOOLS_TEMPLATE = (
    "{% set rest = messages %}"
    "{% if tools %}{{ '<|im_start|>system\n' }}"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\n\n' }}{% set rest = messages[1:] %}"
    "{% endif %}{{ '# Tools\n<tools>\n' }}{% for tool in tools %}{{ tool | tojson }}{{ '\n' }}{% endfor %}"
    "{{ '</tools><|im_end|>\n' }}{% endif %}"
    "{% for message in rest %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def call(action: str) -> str:
    return f'I will guess.\n<tool_call>\n{json.dumps({"name": "act", "arguments": {"action": action}})}\n</tool_call>'


def test_a_tool_call_is_parsed_and_reaches_the_environment_in_process_and_over_http():
    env = tool_call_env(GuessEnv)()
    assert env.tools == [act_tool_schema("guess")] and env.instruction == GuessEnv().instruction
    env.reset(3)
    assert env.parse_action(call("guess 50")) == "guess 50"
    assert "The secret is" in env.step(env.parse_action(call("guess 50"))).observation
    # over HTTP the server's copy reads the call (the engine asks the environment to parse every reply)
    report = check_env_http(
        tool_call_env(GuessEnv), task_ids=[3], policy=lambda e, i, o: e.parse_action(call(f"guess {i + 1}"))
    )
    assert [step[0] for step in report.episodes[0].steps][:2] == ["guess 1", "guess 2"]
    assert all(step[6] is False for step in report.episodes[0].steps)  # every call read: valid actions
    assert report.tools == [act_tool_schema("guess")]  # the served /info sends the class's schema


def test_check_env_refuses_tools_a_chat_template_could_not_take():
    from agentgym_core.testing.env_check import EnvContractError, check_env

    class NamelessTool(GuessEnv):
        tools = [{"type": "function", "function": {"description": "no name"}}]

    with pytest.raises(EnvContractError, match="each tool must be"):
        check_env(NamelessTool, task_ids=[3])


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("Action: guess 50", "no <tool_call>"),
        ('{"name": "act", "arguments": {"action": "guess 5"}', "not valid JSON"),  # a bare call, cut short
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


@pytest.mark.parametrize("reply", [
    '<tool_call>{"name": "act", "arguments": "{\\"action\\": \\"guess 7\\"}"}</tool_call>',  # arguments as a string
    '{"name": "act", "arguments": {"action": "guess 7"}}',  # a bare JSON object
    '```json\n{"name": "act", "arguments": {"action": "guess 7"}}\n```',  # fenced
    '{"name": "act", "parameters": {"action": "guess 7"}}',  # Llama 3.1's key
    '[{"name": "act", "arguments": {"action": "guess 7"}}, {"name": "act", "arguments": {"action": "guess 9"}}]',
])
def test_the_tool_call_formats_chat_templates_teach_are_read(reply):
    assert parse_tool_call(reply) == "guess 7"


def _tiny_backend(chat_template: str):
    pytest.importorskip("agentgym_backend_transformers")
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0, chat_template=chat_template)
    return TransformersBackend(model, tokenizer), tokenizer


def _roll_out(backend, make_env, tasks=(3, 4)):
    from agentgym_core.rollout import EngineConfig, EpisodeSpec, RolloutEngine, SamplingParams

    config = EngineConfig(max_turns=2, max_total_tokens=2048, sampling=SamplingParams(max_new_tokens=12, seed=0))
    with RolloutEngine(backend, make_env, num_envs=2, config=config) as engine:
        return engine.run([EpisodeSpec(task_id=t) for t in tasks])


def _prompt_render(tokenizer, traj, **tools):
    text = tokenizer.apply_chat_template(traj.messages[:2], tokenize=False, add_generation_prompt=True, **tools)
    return tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("template", [TOOLS_TEMPLATE, MERGED_TOOLS_TEMPLATE], ids=["own_turn", "in_system"])
def test_a_template_that_renders_tools_gets_the_schema_through_tools_and_its_exact_tokens(template, caplog):
    from agentgym_core.rollout.chat import ChatFormat
    from agentgym_core.testing.trajectory import check_trajectory

    backend, tokenizer = _tiny_backend(template)
    assert ChatFormat(backend).renders_tools
    with caplog.at_level("INFO", logger="agentgym_core.rollout.engine"):
        trajs = _roll_out(backend, tool_call_env(GuessEnv))
    assert "guess: tool calls are native" in caplog.text
    for traj in trajs:
        assert not traj.failed and traj.num_turns >= 1
        assert traj.tools == [act_tool_schema("guess")]
        assert traj.messages[0]["content"] == GuessEnv().instruction  # no text description of the tool
        prompt = traj.token_ids[:traj.prompt_length]
        assert prompt == _prompt_render(tokenizer, traj, tools=traj.tools)  # exactly the template's render
        assert '"name": "act"' in tokenizer.decode(prompt)
        check_trajectory(traj, backend)  # every later turn is the full render with the tools too
        # the random model writes no readable call: refused as an invalid action
        assert all(turn.invalid_action for turn in traj.turns)


def test_a_rollout_log_of_native_tool_calls_is_tokenised_for_sft_with_its_tools(tmp_path):
    from agentgym_core.finetune.data import TokenizerChat, load_examples
    from agentgym_core.rollout.chat import ChatFormat
    from agentgym_core.rollout.logs import RolloutLogWriter

    backend, tokenizer = _tiny_backend(TOOLS_TEMPLATE)
    traj = _roll_out(backend, tool_call_env(GuessEnv), tasks=(3,))[0]
    with RolloutLogWriter(tmp_path / "log.jsonl") as log:  # messages only, no token ids
        log.write(traj)
    assert json.loads((tmp_path / "log.jsonl").read_text())["tools"] == [act_tool_schema("guess")]
    (example,) = load_examples(tmp_path / "log.jsonl", chat=ChatFormat(TokenizerChat(tokenizer)))
    assert example.token_ids[:traj.prompt_length] == traj.token_ids[:traj.prompt_length]  # the schema is in the prompt


def test_a_template_that_ignores_tools_gets_them_described_in_the_system_message(caplog):
    from agentgym_core.rollout.chat import ChatFormat
    from agentgym_core.testing.trajectory import check_trajectory

    backend, tokenizer = _tiny_backend(CHATML_TEMPLATE)
    assert not ChatFormat(backend).renders_tools
    with caplog.at_level("INFO", logger="agentgym_core.rollout.engine"):
        trajs = _roll_out(backend, tool_call_env(GuessEnv))
    assert "guess: tool calls fall back to the system message (the chat template does not render tools=)" in caplog.text
    for traj in trajs:
        system = traj.messages[0]["content"]
        assert traj.tools is None and system.startswith(GuessEnv().instruction)
        assert "<tools>" in system and json.dumps(act_tool_schema("guess")) in system
        assert traj.token_ids[:traj.prompt_length] == _prompt_render(tokenizer, traj)
        check_trajectory(traj, backend)


def test_a_backend_that_cannot_pass_tools_or_a_template_that_refuses_them_falls_back():
    from agentgym_core.rollout.chat import ChatFormat

    backend, _ = _tiny_backend(TOOLS_TEMPLATE)

    class MessagesOnly:  # a third-party backend written before apply_chat_template took tools
        eos_token_ids = backend.eos_token_ids

        def apply_chat_template(self, messages, *, add_generation_prompt):
            return backend.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)

    assert ChatFormat(backend).renders_tools and not ChatFormat(MessagesOnly()).renders_tools
    backend.tokenizer.chat_template = "{% if tools %}{{ raise_exception('no tools here') }}{% endif %}" + CHATML_TEMPLATE
    refusing = ChatFormat(backend)
    assert not refusing.renders_tools and "no tools here" in refusing.tools_fallback_reason


def test_a_server_sends_its_tools_and_a_text_server_is_played_through_tool_calls_from_the_client(tiny_backend):
    from agentgym_core.http.client import HTTPEnv
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.envs import open_envs

    with serve_env(GuessEnv) as text_url, serve_env(tool_call_env(GuessEnv)) as tool_url:
        # /info: a server of a tool-call environment sends the schemas; a text one sends none
        assert HTTPEnv(tool_url, env="guess").tools == [act_tool_schema("guess")]
        assert HTTPEnv(text_url, env="guess").tools is None
        recipe_entry = EnvConfig(name="guess", url=text_url, action_format="tool_call", max_concurrency=2)
        with open_envs(PluginManager(autoload=False), [recipe_entry]) as (handle,):
            env = handle.make_env()
            assert env.tools == [act_tool_schema("guess")]
            env.reset(3)
            assert "The secret is" in env.step(env.parse_action(call("guess 50"))).observation
            refused = env.step(env.parse_action("Action: guess 50"))
            assert refused.invalid_action is True and "no <tool_call>" in refused.observation
            env.close()
            trajs = _roll_out(tiny_backend, handle.make_env, tasks=(5,))
    assert not trajs[0].failed and "<tools>" in trajs[0].messages[0]["content"]  # ChatML: the fallback


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
