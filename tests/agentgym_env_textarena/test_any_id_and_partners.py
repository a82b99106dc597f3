"""TextArena by any id: difficulty variants, and two-player games against a frozen partner."""

from __future__ import annotations

import pytest

pytest.importorskip("textarena")

from agentgym_core.testing import check_env  # noqa: E402
from agentgym_env_textarena import TextArenaEnv, task_id_of, textarena_ids  # noqa: E402
from agentgym_env_textarena.partners import listed_moves  # noqa: E402

TICTACTOE = ["TicTacToe-v0"]


def center_or_first(observation: str, player_id: int) -> str:
    """A scripted partner named by ``module:function``: the centre when free, else the first listed move."""
    moves = listed_moves(observation)
    return "[4]" if "[4]" in moves else moves[0]


def test_every_registered_id_has_a_catalog_and_variants_play_their_own_settings():
    ids = textarena_ids()
    assert len(ids) == 475 and "Sudoku-v0-easy" in ids and not any(i.endswith("-raw") for i in ids)
    both = TextArenaEnv.configured(games=["Sudoku-v0", "Sudoku-v0-easy"])
    assert both.tasks().sizes() == {"train": 1600, "test": 400}
    assert task_id_of("Sudoku-v0", 5) != task_id_of("Sudoku-v0-easy", 5)
    env = both(games=["Sudoku-v0", "Sudoku-v0-easy"])
    default = env.reset(task_id_of("Sudoku-v0", 5)).observation
    easy = env.reset(task_id_of("Sudoku-v0-easy", 5)).observation
    assert easy.count(".") > 0 and easy != default
    assert easy.count(".") < default.count(".")  # the easy variant leaves fewer cells to fill


def test_an_unknown_id_is_refused_with_a_suggestion():
    with pytest.raises(ValueError, match="did you mean TicTacToe-v0"):
        TextArenaEnv(games=["TicTacToe-v9"])


def test_a_two_player_game_conforms_and_the_partner_plays_inside_the_environment():
    tasks = [task_id_of("TicTacToe-v0", 800), task_id_of("KuhnPoker-v0", 801)]
    env_cls = TextArenaEnv.configured(games=["TicTacToe-v0", "KuhnPoker-v0"])
    report = check_env(env_cls, tasks, policy=lambda e, i, o: (listed_moves(o) or ["[check]"])[0])
    assert all(episode.steps for episode in report.episodes)
    env = env_cls(games=["TicTacToe-v0", "KuhnPoker-v0"])
    second_seat = env.reset(task_id_of("TicTacToe-v0", 801))
    assert second_seat.info["seat"] == 1 and len(second_seat.info["partner_moves"]) == 1
    assert "Player 0 placed their symbol" in second_seat.observation  # the partner's opening, as env text
    first_seat = env.reset(task_id_of("TicTacToe-v0", 800))
    assert first_seat.info["seat"] == 0 and first_seat.info["partner_moves"] == []
    step = env.step("[4]")
    (move,) = step.info["partner_moves"]
    cell = move.strip("[]")
    assert f"Player 1 placed their symbol (X) in cell {cell}" in step.observation


def test_a_loss_to_the_partner_pays_the_games_reward_on_the_policys_last_step():
    env = TextArenaEnv(games=TICTACTOE, partner=f"{__name__}:center_or_first", seat=1)
    assert env.reset(task_id_of("TicTacToe-v0", 800)).info["partner_moves"] == ["[4]"]
    for action in ("[8]", "[1]", "[3]"):  # the partner answers [0], [2], [5]: it then threatens 2-4-6
        assert not env.step(action).done
    lost = env.step("[7]")
    assert lost.info["partner_moves"] == ["[6]"] and "Player 0 has won" in lost.observation
    assert lost.terminated and lost.reward == -1.0 and lost.success is False


def test_the_same_task_replays_the_same_partner_moves():
    def moves(env: TextArenaEnv) -> list[str]:
        played = env.reset(task_id_of("TicTacToe-v0", 800)).info["partner_moves"]
        for action in ("[4]", "[0]", "[8]"):
            result = env.step(action)
            played += result.info["partner_moves"]
            if result.done:
                break
        return played

    assert moves(TextArenaEnv(games=TICTACTOE)) == moves(TextArenaEnv(games=TICTACTOE))


def test_a_frozen_model_partner_from_a_local_folder(tiny_model_dir):
    pytest.importorskip("transformers")
    env = TextArenaEnv(games=TICTACTOE, partner={"model": str(tiny_model_dir), "max_new_tokens": 8}, seat=1)
    first = env.reset(task_id_of("TicTacToe-v0", 800))
    # the model moved first; a refused move of the random-weight model was replaced, so the game goes on
    assert len(first.info["partner_moves"]) == 1 and "Player 0 placed their symbol" in first.observation
    with pytest.raises(ValueError, match="unknown keys"):
        TextArenaEnv(games=TICTACTOE, partner={"model": str(tiny_model_dir), "temperature": 1.0})
    with pytest.raises(ValueError, match="not a partner"):
        TextArenaEnv(games=TICTACTOE, partner="greedy")
