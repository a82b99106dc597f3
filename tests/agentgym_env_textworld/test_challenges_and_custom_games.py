"""TextWorld's challenge families, game files of your own, and graded (progress) rewards, with real textworld."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("textworld")

from agentgym_core.testing import check_env_http  # noqa: E402
from agentgym_env_textworld import TextWorldEnv, game_file  # noqa: E402

TREASURE = {"challenge": "tw-treasure_hunter", "challenge_settings": {"level": 1}}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("textworld_games"))


def walkthrough_rewards(env: TextWorldEnv, task_id: int) -> tuple[list[float], bool | None]:
    walkthrough = env.reset(task_id).info["walkthrough"]
    results = [env.step(command) for command in walkthrough]
    assert results[-1].done
    return [round(r.reward, 4) for r in results], results[-1].success


@pytest.mark.slow  # generates a game (a few seconds)
def test_progress_rewards_grade_every_step_where_the_score_pays_only_the_win(cache):
    score, won = walkthrough_rewards(TextWorldEnv(cache_dir=cache, include_walkthrough=True), 1001)
    progress, won_too = walkthrough_rewards(
        TextWorldEnv(cache_dir=cache, include_walkthrough=True, reward="progress"), 1001
    )
    assert won and won_too and score == [0.0, 1.0]  # the quest's score comes only with the win
    assert progress == [0.5, 0.5]  # each of the two needed commands pays half
    env = TextWorldEnv(cache_dir=cache, reward="progress")
    env.reset(1001)
    assert env.step("look").reward == 0.0  # a step that brings the goal no nearer pays nothing


@pytest.mark.slow  # generates two challenge games
def test_a_challenge_family_is_generated_per_task_and_conforms(cache):
    env_cls = TextWorldEnv.configured(**TREASURE)
    assert set(env_cls.tasks().categories) == {"tw-treasure_hunter"}
    check_env_http(env_cls, {"cache_dir": cache, **TREASURE}, task_ids=[1000])
    env = env_cls(cache_dir=cache, include_walkthrough=True, reward="progress", **TREASURE)
    rewards, won = walkthrough_rewards(env, 1000)
    assert won and abs(sum(rewards) - 1.0) < 1e-6 and all(r > 0 for r in rewards)
    assert env.reset(1000).observation != env.reset(1001).observation  # one game per seed


@pytest.mark.slow
def test_game_files_of_your_own_are_the_catalog(cache, tmp_path):
    mine = []
    for task, name in ((1000, "first"), (1001, "second")):
        source = game_file(task, cache)
        shutil.copy(source, tmp_path / f"{name}.z8")
        shutil.copy(source.with_suffix(".json"), tmp_path / f"{name}.json")
        mine.append(str(tmp_path / f"{name}.z8"))
    options = {"game_files": mine[:1], "test_game_files": mine[1:]}
    env_cls = TextWorldEnv.configured(**options)
    assert env_cls.tasks().sizes() == {"train": 1, "test": 1}
    env = env_cls(cache_dir=cache, include_walkthrough=True, **options)
    _, won = walkthrough_rewards(env, 1)
    assert won and env.reset(1).observation == TextWorldEnv(cache_dir=cache).reset(1001).observation


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"challenge": "tw-castle"}, "unknown 'tw-castle'"),
        ({"challenge": "tw-coin_collector"}, r"missing required \['level'\]"),
        ({"challenge": "tw-coin_collector", "challenge_settings": {"level": 1, "size": 3}}, r"unknown \['size'\]"),
        ({"challenge": "tw-simple", "game_files": ["x.z8"]}, "not both"),
        ({"game_files": ["/nonexistent/game.z8"]}, "does not exist"),
        ({"reward": "dense"}, "reward must be one of score, progress"),
    ],
)
def test_bad_options_are_refused_when_configured(options, message):
    with pytest.raises(ValueError, match=message):
        TextWorldEnv(**options)
