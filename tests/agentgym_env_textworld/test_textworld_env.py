"""TextWorld through the adapter, with the real textworld package: games generated into a cache."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("textworld")

from agentgym_core.http.client import HTTPEnv  # noqa: E402
from agentgym_core.testing import check_env_http, serve_env  # noqa: E402
from agentgym_env_textworld import TextWorldEnv, game_file, play_walkthrough  # noqa: E402
from agentgym_env_textworld.env import typable  # noqa: E402

# What jericho's frotz reads as terminal hot keys (NUL, then seed, undo, restart, quit, debug): any of them in a
# command used to segfault the process. A sampled reply can hold them (the first RL step on TextWorld did).
HOT_KEYS = "\x00\x10\x11\x12\x13\x14"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("textworld_games"))


@pytest.mark.slow  # generates two games (a few seconds each) before checking
def test_conforms_in_process_and_over_http(cache):
    report = check_env_http(TextWorldEnv, {"cache_dir": cache}, task_ids=[1000, 1001])
    assert all(len(episode.steps) > 2 for episode in report.episodes)  # admissible commands are played


def test_the_walkthrough_expert_wins_in_process_and_over_http(cache):
    env = TextWorldEnv(cache_dir=cache, include_walkthrough=True)
    last = play_walkthrough(env, 1001)
    assert last.terminated and last.success is True and last.info["score"] == last.info["max_score"]
    with serve_env(TextWorldEnv, {"cache_dir": cache, "include_walkthrough": True}) as url:
        remote = HTTPEnv(url)
        assert play_walkthrough(remote, 1001).success is True
        remote.close()
    with pytest.raises(ValueError, match="include_walkthrough=True"):
        play_walkthrough(TextWorldEnv(cache_dir=cache), 1001)


def test_observations_are_clean_and_admissible_commands_are_the_actions(cache):
    env = TextWorldEnv(cache_dir=cache, max_steps=2)
    first = env.reset(1000)
    assert "walkthrough" not in first.info  # never shown unless asked for
    assert (
        first.observation.split()[0].isalpha()
        and "$$" not in first.observation
        and ">" not in first.observation
    )
    actions = env.available_actions()
    assert "look" in actions and "inventory" in actions
    assert first.observation.endswith("Valid commands: " + ", ".join(actions))  # shown to the agent too
    assert "Valid commands" not in TextWorldEnv(cache_dir=cache, list_commands=False).reset(1000).observation
    env.step("look")
    cut = env.step("dance wildly")  # an unknown command is answered, not raised
    assert cut.truncated and cut.success is False and cut.reward == 0.0


def test_splits_never_overlap():
    catalog = TextWorldEnv.tasks()
    assert not set(catalog.split("train")) & set(catalog.split("test"))
    assert catalog.sizes() == {"train": 1000, "test": 100}
    assert sorted(catalog.categories) == ["quest1", "quest2", "quest3", "quest4"]


@pytest.mark.slow
def test_a_task_id_is_the_same_game_in_another_cache(cache, tmp_path):
    here = game_file(1001, cache)
    there = game_file(1001, tmp_path)
    assert here.read_bytes() == there.read_bytes()


def test_a_command_is_cut_to_what_a_player_could_type():
    assert typable("  take\x10 key\x00") == "take key"
    assert typable("go east\n") == "go east"
    assert typable("t\u00e0ke \ufffd apple") == "t ke apple"
    assert typable("\x14") == ""


def test_hot_key_characters_in_a_command_are_answered_not_a_crash(cache):
    game_file(1000, cache)  # generated here, so the child only plays
    # In a child process: before the fix the interpreter took the whole process (and a test run) down.
    child = f"""
import sys
from agentgym_env_textworld import TextWorldEnv
env = TextWorldEnv(cache_dir=sys.argv[1], max_steps=20)
env.reset(1000)
for key in {HOT_KEYS!r}:
    print(env.step("lo" + key + "ok").observation.splitlines()[0], flush=True)
print(env.step("look").observation.splitlines()[0])
"""
    run = subprocess.run([sys.executable, "-c", child, cache], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"the process died (exit {run.returncode}): {run.stderr[-1500:]}"
    answers = run.stdout.splitlines()
    assert len(answers) == len(HOT_KEYS) + 1
    assert all("not a verb" in line for line in answers[:-1]), answers  # "lo ok": answered as a bad command
    assert answers[-1].startswith("-=")  # and the game still plays: "look" shows the room
