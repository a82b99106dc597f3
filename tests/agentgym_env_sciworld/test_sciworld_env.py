"""The in-process environment on a real JVM: contract, observations, reward and episode ends."""

from __future__ import annotations

import pytest
from sciworld_helpers import requires_java

from agentgym_core import EpisodeEndedError, InvalidTaskError
from agentgym_core.testing import check_env
from agentgym_env_sciworld import ACTION_TEMPLATES, INSTRUCTION, SciWorldEnv, task_catalog

pytestmark = [pytest.mark.java, requires_java]


def test_check_env_passes_in_process():
    report = check_env(SciWorldEnv)
    assert [e.task_id for e in report.episodes] == task_catalog().split("test")[:2]


def test_instruction_lists_the_25_templates_and_the_reply_format():
    assert len(ACTION_TEMPLATES) == 25
    for template, _ in ACTION_TEMPLATES:
        assert f"- {template}:" in INSTRUCTION
    assert "reset task" not in INSTRUCTION
    assert "Thought:" in INSTRUCTION and "Action:" in INSTRUCTION


def test_first_observation_is_task_description_then_room(env):
    first = env.reset(0)
    description, room = first.observation.split("\n", 1)
    assert description.startswith("Your task is to boil water.")
    assert room.startswith("This room is called the")
    assert first.info["task_description"] == description and first.info["room"] == room
    assert first.info["task_name"] == "boil" and first.info["variation"] == 0
    assert first.info["category"] == "Matter/boil"


def test_invalid_and_reserved_actions_get_a_clear_answer_and_cost_a_step(env):
    env.reset(0)
    result = env.step("fly to the moon")
    assert result.observation.startswith("Invalid action 'fly to the moon': No known action matches")
    assert "pick up OBJ" in result.observation and result.info["valid_action"] is False
    assert not result.done and result.reward == 0.0 and result.info["steps"] == 1
    # 'reset task' would let an agent erase its own failure; it is refused like any unknown input
    assert env.step("reset task").observation.startswith("Invalid action 'reset task'")
    assert env.step("look around").info["valid_action"] is True


def test_unknown_task_raises(env):
    with pytest.raises(InvalidTaskError):
        env.reset(99_999)


def test_wrong_focus_fails_the_task_with_score_zero_and_no_success(env):
    env.reset(0)  # boil water: focusing on air declares the wrong substance
    result = env.step("focus on air")
    assert result.terminated and result.success is False
    assert result.info["task_failed"] and result.info["raw_score"] < 0 and result.info["score"] == 0
    with pytest.raises(EpisodeEndedError):
        env.step("look around")


def test_step_limit_truncates():
    env = SciWorldEnv(max_steps=3)
    try:
        env.reset(0)
        results = [env.step("look around") for _ in range(3)]
        assert [r.truncated for r in results] == [False, False, True]
        assert results[-1].success is False and not results[-1].terminated
    finally:
        env.close()


def test_rewards_are_score_deltas_and_success_only_at_100():
    env = SciWorldEnv(include_gold_path=True)
    try:
        first = env.reset(task_catalog().split("test")[0])
        total, last = 0.0, None
        for action in first.info["gold_actions"]:
            last = env.step(action)
            total += last.reward
            assert last.info["score"] == total  # the return so far is the current score
            assert last.info["reward_normalized"] == pytest.approx(last.reward / 100)
            assert last.success is (True if last.info["score"] == 100 else None if not last.done else False)
            if last.done:
                break
        assert last is not None and last.success and total == 100.0
        assert last.info["score_normalized"] == 1.0
    finally:
        env.close()


def test_available_actions_are_computed_on_demand(env):
    assert env.available_actions() is None  # nothing loaded yet
    env.reset(0)
    actions = env.available_actions()
    assert "look around" in actions and "open door to kitchen" in actions
    assert not any(a.startswith("reset task") for a in actions)
