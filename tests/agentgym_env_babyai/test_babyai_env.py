"""BabyAIEnv: the episode contract, macros, reward, limits, options, stdout hygiene."""

from __future__ import annotations

import json

import pytest

from agentgym_core.env import EpisodeEndedError, InvalidTaskError
from agentgym_env_babyai import BabyAIEnv, normalize_action
from agentgym_env_babyai.levels import LEVELS, make_level


@pytest.fixture
def env():
    environment = BabyAIEnv()
    yield environment
    environment.close()


def listed_actions(observation: str) -> list[str]:
    return json.loads(observation.rsplit("Available actions: ", 1)[1])


def test_reset_is_deterministic_and_anchor_shaped(env):
    first = env.reset(1)
    assert first.observation.startswith("Your goal: go to the red ball\nIn front of you in this room")
    assert listed_actions(first.observation) == env.available_actions()
    assert first.info["level"] == "GoToRedBall" and first.info["level_seed"] == 0
    env.step("turn left")
    assert env.reset(1).observation == first.observation
    assert BabyAIEnv().reset(1, seed=123).observation == first.observation  # the task id fixes the layout
    assert env.reset(41).observation != first.observation  # same level, next seed


def test_bad_task_ids_are_refused(env):
    for bad in (-1, "3", 2.0, True):
        with pytest.raises(InvalidTaskError, match="non-negative integers"):
            env.reset(bad)


def test_parse_action_and_normalisation(env):
    assert env.parse_action("Thought: the ball is left.\nAction: go to red ball 1") == "go to red ball 1"
    assert normalize_action("  Pick up  the`") == "pickup the"
    assert normalize_action('"Turn Left."') == "turn left"
    env.reset(18)  # PickupLoc: "pick up the grey key"
    result = env.step("Pick up grey key")  # alias + missing number -> the nearest one
    assert result.info["action"] == "pickup grey key 1" and result.success is True


def test_invalid_action_is_answered_without_moving(env):
    env.reset(1)
    before = env.available_actions()
    result = env.step("fly to the moon")
    assert result.observation.startswith(
        "Invalid action 'fly to the moon': 'fly to the moon' is not a valid action."
    )
    assert result.info["action_valid"] is False and result.info["steps_used"] == 0
    assert not result.done and result.reward == 0.0 and result.success is None
    assert env.available_actions() == before
    assert "There is no purple box 7 in sight." in env.step("go to purple box 7").observation
    checked = env.step("check available actions")
    assert checked.info["action_valid"] and checked.observation.startswith(
        "You can take the following actions: turn left"
    )


def test_go_to_macro_succeeds_with_minigrid_reward(env):
    env.reset(1)
    result = env.step("go to red ball 1")
    steps = result.info["primitive_steps"]
    assert steps > 1 and result.info["steps_used"] == steps
    assert result.terminated and not result.truncated and result.success is True
    assert result.reward == pytest.approx(1 - 0.9 * steps / result.info["max_steps"])
    assert result.observation.endswith("The task is completed.")
    assert env.available_actions() == []
    with pytest.raises(EpisodeEndedError):
        env.step("turn left")


def test_primitive_actions_cost_one_step_each(env):
    env.reset(1)
    for n, action in enumerate(["turn left", "turn right", "move forward"], start=1):
        result = env.step(action)
        assert result.info["primitive_steps"] == 1 and result.info["steps_used"] == n


def test_toggle_and_go_through_opens_the_door(env):
    env.reset(12)  # OpenRedDoor: "open the red door"
    result = env.step("toggle and go through red closed door 1")
    assert result.success is True and result.terminated


def test_go_through_open_door_pickup_and_drop(env):
    env.reset(11)  # Open: "open the green door"; opening the red door does not end it
    through = env.step("toggle and go through red closed door 1")
    assert not through.done
    env.step("turn left")
    back = env.step("turn left")
    assert "red open door 1" in back.observation
    returned = env.step("go through red open door 1")
    assert returned.info["action_valid"] and returned.info["primitive_steps"] >= 2

    env.reset(18)
    picked = env.step("pickup red ball 1")
    assert picked.observation.split("\n")[0].endswith("You are carrying a red ball.")
    assert "drop" in env.available_actions()
    dropped = env.step("drop")
    assert "You are not carrying anything." in dropped.observation


def test_truncation_at_the_level_step_limit(env):
    env.reset(1)
    max_steps = env.game.max_steps
    for _ in range(max_steps - 1):
        assert not env.step("turn left").done
    last = env.step("turn left")
    assert last.truncated and not last.terminated and last.success is False and last.reward == 0.0
    assert "ran out of steps" in last.observation
    with pytest.raises(EpisodeEndedError):
        env.step("turn left")


def test_max_turns_option_counts_invalid_actions_too():
    env = BabyAIEnv(max_turns=2)
    env.reset(1)
    assert not env.step("nonsense").done
    assert env.step("turn left").truncated


def test_step_before_reset_and_options_errors():
    with pytest.raises(EpisodeEndedError, match="call reset"):
        BabyAIEnv().step("turn left")
    with pytest.raises(ValueError, match="did you mean 'max_turns'"):
        BabyAIEnv(max_turn=3)
    plain = BabyAIEnv(list_actions=False).reset(1).observation
    assert "Available actions" not in plain


def test_strict_ordered_mission_is_solvable_but_still_strict():
    # OpenDoorsOrderN4Debug, an ordered mission: minigrid 3.2 fails it as soon as the first door opens.
    task = next(t for t in range(15, 4000, 40) if ", then " in BabyAIEnv().reset(t).info["mission"])
    mission = BabyAIEnv().reset(task).info["mission"]
    first, second = (part.split(" ")[-2] for part in mission.split(", then "))

    def open_door(env, color):
        for _ in range(4):  # look around until the door is in sight
            door = next(
                (a for a in env.available_actions() if a.startswith(f"toggle and go through {color} ")), None
            )
            if door:
                return env.step(door)
            env.step("turn left")
        pytest.skip(f"the {color} door is not visible from the start of task {task}")

    repaired = BabyAIEnv()
    repaired.reset(task)
    assert not open_door(repaired, first).done  # the first door no longer fails the mission
    raw = BabyAIEnv(repair_strict_order=False)
    raw.reset(task)
    failed = open_door(raw, first)
    assert failed.terminated and failed.success is False  # minigrid's bug, reproduced on request
    wrong = BabyAIEnv()
    wrong.reset(task)
    opened_wrong = open_door(wrong, second)
    assert opened_wrong.terminated and opened_wrong.success is False  # strictness itself is kept


def test_sampling_rejections_do_not_reach_stdout(capfd):
    level = make_level("BabyAI-PutNextLocalS6N4-v0")
    for seed in range(40):
        level.reset(seed=seed)
    env = BabyAIEnv()
    for task in range(21, 21 + 40 * 20, 40):
        env.reset(task)
    assert capfd.readouterr().out == ""


def test_every_level_builds():
    assert len(LEVELS) == 40
    for level in LEVELS:
        game = make_level(level)
        game.reset(seed=0)
        assert game.max_steps > 0 and game.mission


def test_state_key_names_the_exact_world_state():
    """Turning left then right comes back to the reset's state (same key); moving changes it."""
    from agentgym_env_babyai.env import BabyAIEnv

    env = BabyAIEnv()
    start = env.reset(0).info["state_key"]
    left = env.step("turn left").info["state_key"]
    back = env.step("turn right").info["state_key"]
    assert left != start and back == start
    other = BabyAIEnv()
    assert other.reset(0).info["state_key"] == start  # same task, same state, another instance
    assert other.reset(1).info["state_key"] != start


def test_state_key_follows_pickups_and_toggles():
    """The grid's digest is kept between steps and retaken only after pickup/drop/toggle: it must
    still equal a fresh digest after every step, grid-changing ones included."""
    from agentgym_env_babyai.env import BabyAIEnv, grid_digest, state_key

    env, changing = BabyAIEnv(), 0
    for task in range(30):
        env.reset(task)
        for _ in range(6):
            actions = env.available_actions() or ["turn left"]
            grid_actions = [a for a in actions if a.startswith(("pickup", "drop", "toggle"))]
            result = env.step(grid_actions[0] if grid_actions else actions[0])
            changing += bool(grid_actions)
            assert result.info["state_key"] == state_key(env._game, grid_digest(env._game)), task
            if result.terminated or result.truncated:
                break
    assert changing > 20  # the loop did exercise grid-changing primitives


@pytest.mark.parametrize("refuse", [False, True])
def test_a_go_to_the_object_already_faced_is_listed_by_default_and_refused_on_request(refuse):
    env = BabyAIEnv(refuse_no_op_go_to=refuse)
    env.reset(11)  # Open: "open the green door"; going to the red door does not end it
    there = env.step("go to red closed door 1")
    assert there.info["action_valid"] and there.info["primitive_steps"] > 0 and not there.done
    assert ("go to red closed door 1" in listed_actions(there.observation)) is not refuse
    assert ("go to red closed door 1" in env.available_actions()) is not refuse
    assert "toggle" in env.available_actions()  # what the agent can do there instead

    again = env.step("go to red closed door 1")
    assert again.info["primitive_steps"] == 0 and again.info["state_key"] == there.info["state_key"]
    assert again.invalid_action is refuse and again.info["action_valid"] is not refuse
    if refuse:
        assert again.observation.startswith("Invalid action 'go to red closed door 1': You are already facing "
                                            "the red closed door 1: going to it would do nothing.")
    else:
        assert again.observation.startswith("You are already facing the red closed door 1.")
    env.close()
