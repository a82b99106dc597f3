"""TextArena's single-player games that run offline, as one agentgym environment with a task family per game.

Task ids: game ``g`` (its index in :data:`GAMES`) instance ``k`` is task ``g * 1000 + k``; instances
0-799 are the train split and 800-999 the test split, and instance ``k`` is TextArena's
``reset(seed=k)``, so a task id is the same board everywhere. Categories are the game ids.

End states (TextArena reports the reward only when the game is over, in ``close()``):

* a win: ``terminated``, ``success=True``, the game's reward (1.0);
* a loss, including the second invalid move in a row (TextArena allows one and warns), and the
  game's own turn limit (it counts only valid moves): ``terminated``, ``success=False``, the game's
  reward (most games pay the share of the puzzle solved; an invalid-move loss may pay -1);
* this adapter's ``max_steps`` (every reply counts, invalid ones too): ``truncated``,
  ``success=False``, reward 0.

Not thread-safe by design of TextArena: its ``reset`` reseeds Python's global ``random`` and the
games draw from it while they play. Every call into TextArena here holds one process-wide lock and runs on
the instance's own saved random state (swapped in and out of ``random`` and ``numpy.random``), so
episodes are deterministic and other code in the process keeps its random stream.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
from typing import Any, ClassVar

import numpy as np

from agentgym_core.env import Env, EpisodeEndedError, InvalidTaskError, ResetResult, StepResult, TaskCatalog
from agentgym_core.text_gym import OwnGlobalRandom

__all__ = ["GAMES", "INSTANCES_PER_GAME", "TEST_FROM", "TextArenaEnv", "task_id_of"]

GAMES: tuple[str, ...] = (
    "2048-v0", "Bandit-v0", "Blackjack-v0", "Countdown-v0", "Crosswords-v0", "Cryptarithm-v0",
    "FifteenPuzzle-v0", "FrozenLake-v0", "GuessTheNumber-v0", "LightsOut-v0", "LogicPuzzle-v0",
    "Mastermind-v0", "Minesweeper-v0", "PegJump-v0", "RushHour-v0", "Secretary-v0", "Set-v0",
    "Slitherlink-v0", "Sokoban-v0", "Sudoku-v0", "ThreeCardMonte-v0", "TowerOfHanoi-v0",
)  # fmt: skip
"""TextArena's single-player games that reset and play with no network (the index is part of the task id).

Left out: Hangman, WordLadder, WordSearch and Wordle (they download NLTK corpora when first made),
GuessWho and TwentyQuestions (an LLM behind an OpenRouter API key), and every multi-player game."""

INSTANCES_PER_GAME = 1000
TEST_FROM = 800
"""Instances ``TEST_FROM`` to ``INSTANCES_PER_GAME - 1`` of every game are the test split."""

INSTRUCTION = (
    "You play a single-player puzzle or game from TextArena. The first observation states the game's rules, "
    "the move syntax and the board. Each turn, think, then reply with one line `Action: <move>`, the move "
    "written exactly as the rules show it (most games use square brackets, e.g. `Action: [Up]`). An invalid "
    "move is answered with the reason; a second invalid move in a row loses the game."
)

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE]-?\d+)?")


def task_id_of(game: str, instance: int) -> int:
    """The task id of ``instance`` of ``game`` (e.g. ``task_id_of("Sudoku-v0", 800)``, a test task)."""
    if game not in GAMES:
        raise InvalidTaskError(
            f"unknown TextArena game {game!r}; the offline single-player games: {', '.join(GAMES)}"
        )
    if not 0 <= instance < INSTANCES_PER_GAME:
        raise InvalidTaskError(f"instance must be in 0..{INSTANCES_PER_GAME - 1}, got {instance}")
    return GAMES.index(game) * INSTANCES_PER_GAME + instance


def _catalog(games: tuple[str, ...]) -> TaskCatalog:
    train: list[int] = []
    test: list[int] = []
    categories: dict[str, list[int]] = {}
    for game in games:
        base = GAMES.index(game) * INSTANCES_PER_GAME
        train.extend(range(base, base + TEST_FROM))
        test.extend(range(base + TEST_FROM, base + INSTANCES_PER_GAME))
        categories[game] = list(range(base, base + INSTANCES_PER_GAME))
    return TaskCatalog(splits={"train": train, "test": test}, categories=categories)


def _render(messages: list[Any]) -> str:
    """TextArena's observation list ``[(from_id, text, type), ...]`` as one text."""
    return "\n\n".join(str(message[1]).strip() for message in messages if str(message[1]).strip())


def _reward_and_reason(reward: Any, reason: Any) -> tuple[float, str]:
    """The game's final reward and its reason.

    Some games (Countdown, Cryptarithm, Slitherlink, ThreeCardMonte in 0.7.4) pass the two to
    ``set_invalid_move`` swapped: the reward slot holds the text and the reason reads
    ``"Invalid Move: <number>"``.
    """
    if isinstance(reward, str):
        number = _NUMBER.search(str(reason or ""))
        return (float(number.group(0)) if number else 0.0), f"Invalid Move: {reward}"
    return float(reward), str(reason or "")


class TextArenaEnv(Env):
    """One TextArena single-player game at a time; which one follows from the task id.

    Args:
        games: play only these game ids (a subset of :data:`GAMES`); the task catalog shrinks to them.
        max_steps: replies per episode before it is truncated (invalid ones count); None: only the
            game's own rules end it.
    """

    name = "textarena"
    max_episode_steps = 60
    # Not thread-safe: TextArena reseeds Python's global `random` on every reset and its games draw from
    # it. Until the server reads this flag (and serialises the instances itself), the calls below
    # serialise on the process-wide lock of agentgym_core.text_gym.OwnGlobalRandom.
    thread_safe: ClassVar[bool] = False
    games: ClassVar[tuple[str, ...]] = GAMES

    def __init__(self, games: list[str] | None = None, max_steps: int | None = 60) -> None:
        if games is not None:
            unknown = [g for g in games if g not in GAMES]
            if unknown or not games:
                raise ValueError(
                    f"games: unknown or empty {unknown or games!r}; choose from {', '.join(GAMES)}"
                )
            if type(self).games != tuple(games):
                self.games = tuple(games)  # type: ignore[misc]  # this instance's subset
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 or None, got {max_steps}")
        self.max_episode_steps = max_steps
        self._game: Any = None
        self._random = OwnGlobalRandom()
        self._steps = 0
        self._done = True

    @classmethod
    def configured(cls, **options: Any) -> type[Env]:
        games = options.get("games")
        if not games:
            return cls
        return type(cls.__name__, (cls,), {"games": tuple(games)})

    @property
    def instruction(self) -> str:
        if len(self.games) == 1:
            return f"{INSTRUCTION} The game is TextArena's {self.games[0]}."
        return INSTRUCTION

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return _catalog(cls.games)

    # -- calls into TextArena -------------------------------------------------------------------
    @contextlib.contextmanager
    def _own_random(self) -> Any:
        """This instance's random stream, under the process-wide lock, with TextArena's prints muted."""
        with self._random.active(), contextlib.redirect_stdout(io.StringIO()):  # some games print progress
            yield

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        game_index, instance = divmod(task_id, INSTANCES_PER_GAME)
        if not (0 <= game_index < len(GAMES) and GAMES[game_index] in self.games and task_id >= 0):
            raise InvalidTaskError(
                f"textarena: task {task_id} is not in this environment's games "
                f"({', '.join(self.games)}); task ids are game_index * 1000 + instance"
            )
        import textarena

        game_id = GAMES[game_index]
        self._random.forget()  # TextArena seeds the game itself
        with self._own_random():
            random.seed(instance)
            np.random.seed(instance)
            game = textarena.make(f"{game_id}-raw")
            game.reset(num_players=1, seed=instance)
            _, messages = game.get_observation()
        self._game, self._steps, self._done = game, 0, False
        return ResetResult(observation=_render(messages), info={"game": game_id, "instance": instance})

    def step(self, action: str) -> StepResult:
        if self._game is None:
            raise InvalidTaskError("textarena: reset() onto a task before step()")
        if self._done:
            raise EpisodeEndedError("the episode has ended; reset() to play again")
        self._steps += 1
        with self._own_random():
            done, _ = self._game.step(action)
            _, messages = self._game.get_observation()
            outcome = self._game.close() if done else None
        observation = _render(messages) or "(no answer)"
        if outcome is not None:
            rewards, game_info = outcome
            info = (game_info or {}).get(0, {})
            reward, reason = _reward_and_reason((rewards or {}).get(0, 0.0), info.get("reason"))
            if reason and reason not in observation:
                observation = f"{observation}\n\n{reason}".strip()
            self._done = True
            invalid = bool(info.get("invalid_move", False))
            return StepResult(
                observation=observation,
                reward=reward,
                terminated=True,
                success=reward >= 1.0,
                invalid_action=invalid,
                info={"reason": reason, "invalid_move": invalid},
            )
        # A refused move within the game's error allowance leaves its error count above 0 (a valid move
        # resets it); TextArena clears its own invalid-move flag before step() returns.
        invalid = getattr(self._game.state, "error_count", 0) > 0
        limit = self.max_episode_steps
        if limit is not None and self._steps >= limit:
            self._done = True
            return StepResult(observation=observation, truncated=True, success=False, invalid_action=invalid)
        return StepResult(observation=observation, invalid_action=invalid)

    def close(self) -> None:
        self._game = None
