"""TextArena's offline single-player games through the adapter, with the real textarena package."""

from __future__ import annotations

import random
import threading

import pytest

pytest.importorskip("textarena")

from agentgym_core.testing import check_env, check_env_http  # noqa: E402
from agentgym_env_textarena import GAMES, TextArenaEnv, task_id_of  # noqa: E402

HANOI_3 = ["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]", "[A C]"]


def test_conforms_in_process_and_over_http():
    report = check_env_http(
        TextArenaEnv, task_ids=[task_id_of("2048-v0", 800), task_id_of("Sokoban-v0", 801)]
    )
    assert all(len(episode.steps) > 2 for episode in report.episodes)  # real moves, from the rules' examples


def test_splits_never_overlap_and_every_game_is_a_category():
    catalog = TextArenaEnv.tasks()
    train, test = set(catalog.split("train")), set(catalog.split("test"))
    assert not train & test
    assert catalog.sizes() == {"train": 800 * len(GAMES), "test": 200 * len(GAMES)}
    assert sorted(catalog.categories) == sorted(GAMES)
    only = TextArenaEnv.configured(games=["Sudoku-v0"])
    assert only.tasks().sizes() == {"train": 800, "test": 200}
    assert "Sudoku-v0" in only(games=["Sudoku-v0"]).instruction


def test_a_win_pays_the_games_reward_and_succeeds():
    env = TextArenaEnv()
    first = env.reset(task_id_of("TowerOfHanoi-v0", 800))
    assert "Tower of Hanoi" in first.observation  # the rules come with the board
    report = check_env(TextArenaEnv, [task_id_of("TowerOfHanoi-v0", 800)], policy=lambda e, i, o: HANOI_3[i])
    *_, last = report.episodes[0].steps
    assert last[3] and last[5] is True and last[2] == 1.0 and len(report.episodes[0].steps) == 7


def test_the_second_invalid_move_loses_and_the_step_limit_truncates():
    env = TextArenaEnv()
    env.reset(task_id_of("TowerOfHanoi-v0", 800))
    warned = env.step("[Z Z]")
    assert not warned.done and "invalid move" in warned.observation.lower()
    lost = env.step("[Z Z]")
    assert lost.terminated and lost.success is False and lost.info["invalid_move"] is True

    short = TextArenaEnv(max_steps=2)
    short.reset(task_id_of("TowerOfHanoi-v0", 800))
    short.step("[A C]")
    cut = short.step("[A B]")
    assert cut.truncated and not cut.terminated and cut.success is False


def test_swapped_reward_and_reason_of_some_games_are_put_back():
    env = TextArenaEnv()
    env.reset(task_id_of("Countdown-v0", 800))
    env.step("nonsense")
    lost = env.step("nonsense")
    assert (
        lost.terminated
        and 0.0 <= lost.reward <= 1.0
        and lost.info["reason"].startswith("Invalid Move: Invalid")
    )


def test_resets_on_threads_give_the_sequential_boards_and_leave_global_random_alone():
    tasks = [
        task_id_of(game, 800 + k) for game in ("Sudoku-v0", "Minesweeper-v0", "2048-v0") for k in range(3)
    ]
    expected = {task: TextArenaEnv().reset(task).observation for task in tasks}
    random.seed(123)
    outside = random.random()
    random.seed(123)
    seen: dict[int, str] = {}

    def play(task: int) -> None:
        seen[task] = TextArenaEnv().reset(task).observation

    threads = [threading.Thread(target=play, args=(task,)) for task in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == expected
    assert random.random() == outside  # TextArena's reseeding did not leak into the process's stream
