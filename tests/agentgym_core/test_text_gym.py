"""The generic bridge: a Gymnasium text environment becomes an agentgym Env in one call.

The environment here is a real ``gymnasium.Env`` with ``Text`` spaces, written as a user would
write theirs; nothing of agentgym is in it.
"""

from __future__ import annotations

import random

import gymnasium
import pytest
from gymnasium import spaces

from agentgym_core.env import InvalidTaskError
from agentgym_core.http.client import HTTPEnv
from agentgym_core.testing import check_env, check_env_http, serve_env
from agentgym_core.text_gym import text_gym_env


class Corridor(gymnasium.Env):
    """Walk right to the end of a corridor whose length the seed picks; stepping on the trap loses."""

    def __init__(self, trap: bool = False) -> None:
        self.observation_space = spaces.Text(200)
        self.action_space = spaces.Text(20)
        self.trap = trap

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.length = random.Random(seed).randint(2, 5)
        self.position = 0
        return self._look(), {"available_actions": ["left", "right"], "debug": object()}

    def _look(self) -> str:
        return f"You are at {self.position} of a corridor ending at {self.length}."

    def step(self, action):
        if action not in ("left", "right"):
            return (
                f"Unknown move {action!r}; say left or right.",
                0.0,
                False,
                False,
                {"available_actions": ["left", "right"]},
            )
        self.position = max(0, self.position + (1 if action == "right" else -1))
        if self.trap and self.position == 1:
            return "A trap!", 0.0, True, False, {"won": False}
        won = self.position == self.length
        return self._look(), float(won), won, False, {"available_actions": ["left", "right"]}


CorridorEnv = text_gym_env(
    "corridor",
    Corridor,
    instruction="Reach the end of the corridor. Reply with `Action: left` or `Action: right`.",
    splits={"train": range(0, 50), "test": range(50, 60)},
    max_steps=8,
)


def test_a_gymnasium_text_env_passes_check_env_in_process_and_over_http():
    report = check_env_http(CorridorEnv)
    assert CorridorEnv.tasks().sizes() == {"train": 50, "test": 10}
    assert any(len(episode.steps) > 2 for episode in report.episodes)  # real moves, not just the invalid one


def test_walking_right_wins_and_info_keeps_only_json_values():
    env = CorridorEnv()
    first = env.reset(3)
    assert "debug" not in first.info and first.info["available_actions"] == ["left", "right"]
    assert env.available_actions() == ["left", "right"]
    result = env.step("right")
    while not result.done:
        result = env.step("right")
    assert result.terminated and result.success is True and result.reward == 1.0


def test_the_step_limit_is_a_constructor_option_and_the_server_reports_the_instances():
    env = CorridorEnv(max_steps=2)
    env.reset(0)
    env.step("left")
    last = env.step("left")
    assert last.truncated and not last.terminated and last.success is False
    assert CorridorEnv().max_episode_steps == 8 and CorridorEnv.max_episode_steps == 8
    with serve_env(CorridorEnv, {"max_steps": 3}) as url:
        remote = HTTPEnv(url)
        assert remote.max_episode_steps == 3
        remote.close()


def test_the_environments_own_verdict_decides_success():
    TrapEnv = text_gym_env("trap", Corridor, instruction="Mind the trap.", splits={"test": [0, 1]})
    env = TrapEnv(env_kwargs={"trap": True})
    env.reset(0)
    result = env.step("right")
    assert result.terminated and result.success is False


def test_bad_uses_fail_with_a_message_saying_what_to_fix():
    with pytest.raises(ValueError, match="task 5 is in both 'train' and 'test'"):
        text_gym_env("x", Corridor, instruction="i", splits={"train": range(10), "test": range(5, 12)})
    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        CorridorEnv(max_steps=0)
    with pytest.raises(InvalidTaskError, match="unknown task id 99"):
        CorridorEnv().reset(99)

    class Pixels(Corridor):
        def reset(self, *, seed=None, options=None):
            return [[0, 0]], {}

    with pytest.raises(TypeError, match="returned a list observation; text_gym_env needs str"):
        text_gym_env("pixels", Pixels, instruction="i", splits={"test": [0]})().reset(0)


def test_check_env_is_happy_with_the_bridge_without_listed_actions():
    """A bridged env that lists no actions still gets valid moves from check_env's default policy
    (they are named in the instruction)."""

    class Quiet(Corridor):
        def reset(self, *, seed=None, options=None):
            return super().reset(seed=seed)[0], {}

        def step(self, action):
            observation, reward, terminated, truncated, _ = super().step(action)
            return observation, reward, terminated, truncated, {}

    QuietEnv = text_gym_env(
        "quiet",
        Quiet,
        instruction="Reply with `Action: left` or `Action: right`.",
        splits={"test": [0, 1]},
        max_steps=6,
    )
    report = check_env(QuietEnv)
    assert {step[0] for episode in report.episodes for step in episode.steps} & {"left", "right"}


class Dice(gymnasium.Env):
    """Seeds and rolls Python's global random, as many game libraries do."""

    def reset(self, *, seed=None, options=None):
        random.seed(seed)
        return "Roll the die.", {}

    def step(self, action):
        return f"You rolled {random.randint(1, 6)}.", 0.0, False, False, {}


def test_global_random_gives_each_instance_its_own_stream():
    def interleaved(env_cls):
        a, b = env_cls(), env_cls()
        a.reset(0)
        b.reset(1)  # reseeds the global generator under a's feet unless streams are separate
        return [a.step("roll").observation for _ in range(5)]

    Shared = text_gym_env("dice", Dice, instruction="Say `Action: roll`.", splits={"test": [0, 1]})
    Own = text_gym_env(
        "dice", Dice, instruction="Say `Action: roll`.", splits={"test": [0, 1]}, global_random=True
    )
    solo = Own()
    solo.reset(0)
    expected = [solo.step("roll").observation for _ in range(5)]
    random.seed(5)
    outside = random.random()
    random.seed(5)
    assert interleaved(Own) == expected
    assert random.random() == outside  # the process's stream is untouched
    assert interleaved(Shared) != expected  # what goes wrong without it


def test_a_script_serves_its_class_in_the_foreground_for_a_recipe_s_url(tmp_path):
    """write-an-environment.md's script: ``serve_forever`` serves a text_gym class, no plugin, until stopped."""
    import os
    import sys
    import textwrap

    from agentgym_core.testing import start_server_process

    script = tmp_path / "echo_agentgym.py"
    script.write_text(textwrap.dedent("""
        from agentgym_core.http import serve_forever
        from agentgym_core.text_gym import text_gym_env

        class Echo:
            def reset(self, *, seed=None, options=None):
                return f"task {seed}: say done", {}

            def step(self, action):
                return "ok", 1.0, action == "done", False, {}

        EchoEnv = text_gym_env("echo", Echo, instruction="Say `Action: done`.", splits={"test": [3]})
        serve_forever(EchoEnv, port=0)
    """))
    environ = {k: v for k, v in os.environ.items() if k != "AGENTGYM_TOKEN"}
    server, url = start_server_process([sys.executable, str(script)], env=environ)  # "serving 'echo' on URL"
    try:
        assert url.startswith("http://127.0.0.1:")  # loopback unless told otherwise
        env = HTTPEnv(url)
        assert env.reset(3).observation == "task 3: say done"
        result = env.step(env.parse_action("Action: done"))
        assert result.done and result.success
        env.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
