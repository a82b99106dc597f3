"""The environment: observations, rewards, invalid actions, step limit, determinism, no state leak."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from agentgym_core import EnvError, EpisodeEndedError, InvalidTaskError
from agentgym_core.testing import check_env
from agentgym_env_textcraft import TextCraftEnv, goal_of
from agentgym_env_textcraft.personality import AgentGymTextCraftEnv
from agentgym_env_textcraft.tasks import goals


def _task(item: str) -> int:
    return next(g.task_id for g in goals() if g.item == item)


@pytest.fixture
def env():
    environment = TextCraftEnv()
    yield environment
    environment.close()


def test_first_observation_lists_commands_then_goal(env):
    task = _task("dark oak sign")
    result = env.reset(task, seed=0)
    lines = result.observation.splitlines()
    assert lines[0] == "Crafting commands:"
    assert lines[-1] == "Goal: craft dark oak sign." and lines[-2] == ""
    commands = lines[1:-2]
    assert "craft 3 dark oak sign using 6 dark oak planks, 1 stick" in commands
    assert len(commands) == len(set(commands))
    assert result.info == {"task_id": task, "goal": "dark oak sign", "depth": 2, "category": "depth2",
                           "state_key": "empty"}  # nothing in the inventory yet


def test_distractor_count_is_configurable():
    task = _task("dark oak sign")
    plain = TextCraftEnv(max_distractors=0).reset(task).observation.splitlines()
    noisy = TextCraftEnv(max_distractors=10).reset(task).observation.splitlines()
    assert len(noisy) - len(plain) == 10


def test_crafting_the_goal_wins(env):
    env.reset(_task("dark oak sign"), seed=3)
    script = [
        ("get 2 dark oak logs", "Got 2 dark oak logs"),
        ("craft 4 dark oak planks using 1 dark oak logs", "Crafted 4 dark oak planks"),
        ("craft 4 dark oak planks using 1 dark oak logs", "Crafted 4 dark oak planks"),
        ("craft 4 stick using 2 dark oak planks", "Crafted 4 stick"),
        ("inventory", "Inventory: [dark oak planks] (6) [stick] (4)"),
    ]
    for action, expected in script:
        result = env.step(action)
        assert result.observation == expected
        assert (result.reward, result.terminated, result.truncated, result.success) == (
            0.0,
            False,
            False,
            None,
        )
    final = env.step("craft 3 dark oak sign using 6 dark oak planks, 1 stick")
    assert final.observation == "Crafted 3 dark oak sign"
    assert (final.reward, final.terminated, final.truncated, final.success) == (1.0, True, False, True)
    with pytest.raises(EpisodeEndedError):
        env.step("inventory")


def test_intermediate_reward_pays_each_item_of_the_recipe_tree_once():
    env = TextCraftEnv(intermediate_reward=0.1)
    env.reset(_task("dark oak sign"), seed=3)
    rewards = [env.step(action).reward for action in (
        "get 2 dark oak logs",  # a raw material: no credit
        "craft 4 dark oak planks using 1 dark oak logs",  # on the way to the goal: credit
        "craft 4 dark oak planks using 1 dark oak logs",  # the same item again: none
        "craft 4 stick using 2 dark oak planks",  # the goal's other ingredient: credit
        "inventory",
    )]
    assert rewards == [0.0, 0.1, 0.0, 0.1, 0.0]
    final = env.step("craft 3 dark oak sign using 6 dark oak planks, 1 stick")
    assert (final.reward, final.success) == (1.0, True)  # the goal pays 1, as without partial credit
    env.reset(_task("dark oak sign"), seed=3)  # a new episode pays again
    env.step("get 1 dark oak logs")
    assert env.step("craft 4 dark oak planks using 1 dark oak logs").reward == 0.1
    env.close()


def test_intermediate_reward_pays_nothing_off_the_goal_s_tree_and_nothing_by_default(env):
    env.reset(_task("dark oak sign"), seed=3)
    env.step("get 1 dark oak logs")
    assert env.step("craft 4 dark oak planks using 1 dark oak logs").reward == 0.0  # the default: goal only
    other = TextCraftEnv(intermediate_reward=0.1)
    other.reset(_task("dark oak sign"), seed=3)
    other.step("get 1 ink sac")
    dye = other.step("craft 1 black dye using 1 ink sac")
    assert (dye.observation, dye.reward) == ("Crafted 1 black dye", 0.0)  # black dye: not in this tree
    other.step("get 2 oak logs")  # any planks make the sign's stick: oak planks supply "planks", once
    assert [other.step("craft 4 oak planks using 1 oak logs").reward for _ in range(2)] == [0.1, 0.0]
    other.step("get 1 spruce logs")
    assert other.step("craft 4 spruce planks using 1 spruce logs").reward == 0.0  # "planks" already paid
    other.step("get 1 dark oak logs")  # the sign names dark oak planks itself: a slot of their own
    assert other.step("craft 4 dark oak planks using 1 dark oak logs").reward == 0.1
    with pytest.raises(ValueError, match="intermediate_reward is not part of AgentGym's TextCraft server"):
        AgentGymTextCraftEnv(intermediate_reward=0.1)
    other.close()


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("get 1 oak planks", "Could not get oak planks: it is not a raw material; craft it instead."),
        ("get 1 planks", "Could not get planks: it is a generic ingredient"),
        ("get 1 unobtainium", "Could not find unobtainium: there is no such item."),
        ("craft 4 stick using 2 oak planks", "Could not craft stick: you need 2 oak planks but have 0."),
        (
            "craft 1 oak logs using 1 oak planks",
            "Could not craft oak logs: it is a raw material; get it instead.",
        ),
        ("craft 4 planks using 1 oak logs", "Could not craft planks: name a specific kind"),
        ("craft 4 stick using 2 planks", "Could not craft stick: planks is a generic ingredient"),
        ("dance", "Invalid action 'dance': unknown command 'dance'."),
    ],
)
def test_refused_actions_are_answered_not_raised(env, action, expected):
    env.reset(_task("dark oak sign"))
    result = env.step(action)
    assert result.observation.startswith(expected)
    assert (result.reward, result.terminated, result.truncated) == (0.0, False, False)
    assert result.info["valid"] is False


def test_wrong_ingredient_counts_are_refused_and_inventory_kept(env):
    env.reset(_task("dark oak sign"))
    env.step("get 3 oak logs")
    refused = env.step("craft 8 oak planks using 2 oak logs")
    assert "no recipe takes exactly these ingredients" in refused.observation
    assert env.step("inventory").observation == "Inventory: [oak logs] (3)"


def test_white_wool_is_not_in_the_wool_group(env):
    """A quirk of the data kept for comparability: only dyed wool counts as generic 'wool'."""
    env.reset(_task("painting"))
    for action in [
        "get 2 oak logs",
        "craft 4 oak planks using 1 oak logs",
        "craft 4 oak planks using 1 oak logs",
        "craft 4 stick using 2 oak planks",
        "craft 4 stick using 2 oak planks",
        "get 4 string",
        "craft 1 white wool using 4 string",
    ]:
        assert not env.step(action).observation.startswith("Could not")
    refused = env.step("craft 1 painting using 8 stick, 1 white wool")
    assert refused.observation.startswith("Could not craft painting")
    for action in [
        "get 1 ink sac",
        "craft 1 black dye using 1 ink sac",
        "craft 1 black wool using 1 black dye, 1 white wool",
    ]:
        assert not env.step(action).observation.startswith("Could not"), action
    assert env.step("craft 1 painting using 8 stick, 1 black wool").success is True


def test_step_limit_truncates():
    env = TextCraftEnv(max_steps=3)
    env.reset(_task("dark oak sign"))
    assert not env.step("inventory").done
    assert not env.step("get 1 oak logs").done
    last = env.step("inventory")
    assert (last.truncated, last.terminated, last.success, last.info["steps"]) == (True, False, False, 3)
    with pytest.raises(EpisodeEndedError):
        env.step("inventory")


def test_errors_for_misuse():
    with pytest.raises(ValidationError, match="max_step"):
        TextCraftEnv(max_step=10)
    env = TextCraftEnv()
    with pytest.raises(EnvError, match="reset"):
        env.step("inventory")
    for bad in (-1, 544, 10**6):
        with pytest.raises(InvalidTaskError, match="0..543"):
            env.reset(bad)


def test_reset_is_deterministic_and_seed_changes_the_shuffle(env):
    task = _task("beacon")
    first = env.reset(task, seed=5).observation
    assert TextCraftEnv().reset(task, seed=5).observation == first
    assert env.reset(task, seed=6).observation != first
    assert env.reset(task).observation == env.reset(task, seed=None).observation
    # Same commands whatever the seed, only their order and the distractors change.
    assert first.splitlines()[-1] == env.reset(task, seed=6).observation.splitlines()[-1]


def test_no_state_leaks_across_200_resets():
    """The package's reset grew its recipe table on every call; ours stays identical and fast."""
    env = TextCraftEnv()
    tasks = [goal_of(t).task_id for t in range(0, 544, 27)]
    reference = {t: env.reset(t, seed=1).observation for t in tasks}
    actions = ["get 1 oak logs", "inventory", "craft 4 oak planks using 1 oak logs", "inventory"]
    episode = None
    start = time.perf_counter()
    for i in range(200):
        task = tasks[i % len(tasks)]
        assert env.reset(task, seed=1).observation == reference[task]
        steps = [env.step(a).observation for a in actions]
        episode = episode or steps
        assert steps == episode, "an episode replayed after other episodes must not change"
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, f"200 resets + 800 steps took {elapsed:.2f} s"


def test_check_env_in_process():
    report = check_env(TextCraftEnv)
    assert len(report.episodes) == 2


def test_state_key_is_the_inventory():
    from agentgym_env_textcraft.env import TextCraftEnv

    env = TextCraftEnv()
    start = env.reset(0).info["state_key"]
    assert env.step("inventory").info["state_key"] == start  # looking changes nothing
    got = env.step("get 1 oak logs").info["state_key"]
    assert got != start and "oak logs=1" in got
