"""GEM through the adapter (gem.make behind agentgym's Env), with the real gem-llm package."""

from __future__ import annotations

import random
import threading

import pytest

pytest.importorskip("gem")

from agentgym_core.testing import check_env_http  # noqa: E402
from agentgym_env_gem import ENV_IDS, GemEnv, task_id_of  # noqa: E402

HANOI_3 = ["A C", "A B", "C B", "A C", "B A", "B C", "A C"]


def test_conforms_in_process_and_over_http():
    check_env_http(GemEnv)


def test_a_solved_game_succeeds_over_http_with_the_board_in_every_observation():
    task = task_id_of("game:TowerofHanoi-v0-easy", 100)
    report = check_env_http(GemEnv, task_ids=[task], policy=lambda env, i, obs: f"\\boxed{{{HANOI_3[i]}}}")
    episode = report.episodes[0]
    assert "A: [3, 2, 1]" in episode.first_observation  # the board from info["suffix"]
    assert len(episode.steps) == 7 and all("tower" in step[1] for step in episode.steps)
    *_, last = episode.steps
    assert last[3] and last[5] is True and last[2] == 1.0


def test_a_wrong_reasoning_gym_answer_ends_the_episode_unsolved():
    env = GemEnv(env_ids=["rg:gcd"])
    env.reset(task_id_of("rg:gcd", 100))
    result = env.step("\\boxed{-1}")
    assert result.terminated and result.success is False


def test_splits_never_overlap_and_ids_are_categories():
    catalog = GemEnv.tasks()
    assert not set(catalog.split("train")) & set(catalog.split("test"))
    assert catalog.sizes() == {"train": 100 * len(ENV_IDS), "test": 20 * len(ENV_IDS)}
    assert GemEnv.configured(env_ids=["rg:gcd"]).tasks().sizes() == {"train": 100, "test": 20}
    with pytest.raises(ValueError, match="unknown or empty"):
        GemEnv(env_ids=["math:GSM8K"])  # downloads data: not offered


def test_resets_on_threads_give_the_sequential_boards_and_leave_global_random_alone():
    tasks = [
        task_id_of(env_id, 100 + k)
        for env_id in ("game:Sudoku-v0-easy", "game:Minesweeper-v0-easy")
        for k in range(3)
    ]
    expected = {task: GemEnv().reset(task).observation for task in tasks}
    random.seed(9)
    outside = random.random()
    random.seed(9)
    seen: dict[int, str] = {}
    threads = [
        threading.Thread(target=lambda t=task: seen.__setitem__(t, GemEnv().reset(t).observation))
        for task in tasks
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == expected
    assert random.random() == outside
