"""reasoning-gym through the adapter, with the real reasoning_gym package."""

from __future__ import annotations

import pytest

pytest.importorskip("reasoning_gym")

from agentgym_core.testing import check_env, check_env_http  # noqa: E402
from agentgym_env_reasoning_gym import (  # noqa: E402
    LEVELS,
    ReasoningGymEnv,
    gold_answer,
    play_gold_answer,
    task_id_of,
)


def answering(task: int):
    """A check_env policy that replies with the generator's own answer to ``task``."""
    return lambda env, step, observation: f"<answer>{gold_answer(task)}</answer>"


def test_conforms_in_process_and_over_http():
    check_env_http(ReasoningGymEnv)


def test_the_generators_own_answer_scores_one_over_http():
    tasks = [
        task_id_of("chain_sum", 2, 100),
        task_id_of("maze", 1, 101),
        task_id_of("tower_of_hanoi", 0, 110),
    ]
    for task in tasks:
        report = check_env_http(ReasoningGymEnv, task_ids=[task], policy=answering(task))
        answer = f"<answer>{gold_answer(task)}</answer>"
        assert report.episodes[0].steps == [(answer, "Correct.", 1.0, True, False, True, False)]  # a valid reply


@pytest.mark.slow
def test_every_offered_generator_scores_its_gold_answer_one_at_every_level():
    env = ReasoningGymEnv()
    failed = [
        (name, level)
        for name, levels in LEVELS.items()
        for level in range(levels)
        if not play_gold_answer(env, task_id_of(name, level, 100)).success
    ]
    assert failed == []


def test_splits_never_overlap_and_levels_are_categories():
    catalog = ReasoningGymEnv.tasks()
    assert not set(catalog.split("train")) & set(catalog.split("test"))
    assert catalog.sizes() == {"train": 100 * sum(LEVELS.values()), "test": 20 * sum(LEVELS.values())}
    assert {"chain_sum/L0", "chain_sum/L1", "chain_sum/L2", "acre/L0"} <= set(catalog.categories)
    only = ReasoningGymEnv.configured(generators=["gcd", "lcm"])
    assert only.tasks().sizes() == {"train": 600, "test": 120}
    with pytest.raises(ValueError, match="unknown or empty"):
        ReasoningGymEnv(generators=["sokobann"])


def test_a_tagged_reply_parsed_as_the_rollout_parses_it_is_valid_and_scored_over_http():
    # The rollout steps with env.parse_action(reply), not the reply: the answer tags must survive it,
    # or every reply, right ones included, counts as breaking the format.
    task = task_id_of("chain_sum", 0, 100)
    reply = f"Thought: add them\n<answer> {gold_answer(task)} </answer>"
    report = check_env_http(ReasoningGymEnv, task_ids=[task], policy=lambda env, step, obs: env.parse_action(reply))
    action, _, reward, _, _, success, invalid = report.episodes[0].steps[0]
    assert (reward, success, invalid) == (1.0, True, False)
    untagged = check_env(ReasoningGymEnv, task_ids=[task], policy=lambda env, step, obs: env.parse_action(
        f"Thought: add them\nAction: {gold_answer(task)}"))
    assert untagged.episodes[0].steps[0][5:] == (True, True)  # scored, but not in the asked format


def test_attempts_give_a_wrong_answer_its_score_and_another_try():
    env = ReasoningGymEnv(attempts=2)
    task = task_id_of("gcd", 0, 100)
    env.reset(task)
    wrong = env.step("<answer>-1</answer>")
    assert not wrong.done and wrong.reward == 0.0 and "Try again" in wrong.observation
    right = env.step(f"Thought: now I see\n<answer>{gold_answer(task)}</answer>")
    assert right.terminated and right.success is True and right.reward == 1.0


def test_answers_are_read_from_the_answer_tags_whole():
    env = ReasoningGymEnv()
    assert (
        env.parse_action("Thought: hm <answer>1 2\n3 4</answer> then <answer>5 6\n7 8</answer>")
        == "<answer>5 6\n7 8</answer>"
    )
    assert env.parse_action("Thought: hm\nAction: 12") == "12"
    task = task_id_of("rotate_matrix", 0, 100)
    assert "\n" in gold_answer(task)
    report = check_env(ReasoningGymEnv, task_ids=[task], policy=answering(task))
    assert report.episodes[0].steps[0][5] is True  # a multi-line answer scored whole
