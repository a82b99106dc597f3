"""TextArena's games as one agentgym environment with a task family per game id.

By default the catalog holds the 22 single-player games that run offline (:data:`GAMES`); the
``games`` option takes any TextArena id instead, its difficulty variants (``Sudoku-v0-easy``,
``2048-v0-3x3``) and its two-player games (``TicTacToe-v0``, ``KuhnPoker-v0``) included. In a
two-player game the policy plays one seat and a frozen partner (:mod:`agentgym_env_textarena.partners`)
the other, inside ``reset`` and ``step``: its moves reach the policy as observation text, never trained.

Task ids: game ``g`` instance ``k`` is task ``g * 1000 + k``, where ``g`` is the game's index in
:data:`GAMES`, or ``EXTRA_FROM`` plus its index in :func:`textarena_ids` (every registered id, sorted;
fixed by the ``textarena`` pin) for any other id. Instances 0-799 are the train split and 800-999 the
test split, and instance ``k`` is TextArena's ``reset(seed=k)``, so a task id is the same board
everywhere. Categories are the game ids. In a two-player game the policy takes seat ``k % 2`` unless
``seat`` fixes it, so it learns both sides.

Games are built bare (TextArena's observation wrappers off): a ``-train`` id plays as its base id.

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
import difflib
import functools
import importlib
import io
import random
import re
from typing import Any, ClassVar

import numpy as np

from agentgym_core.env import Env, EpisodeEndedError, InvalidTaskError, ResetResult, StepResult, TaskCatalog
from agentgym_core.text_gym import OwnGlobalRandom
from agentgym_env_textarena.partners import Partner, RandomListedMove, make_partner

__all__ = [
    "EXTRA_FROM",
    "GAMES",
    "INSTANCES_PER_GAME",
    "TEST_FROM",
    "TextArenaEnv",
    "task_id_of",
    "textarena_ids",
]

GAMES: tuple[str, ...] = (
    "2048-v0", "Bandit-v0", "Blackjack-v0", "Countdown-v0", "Crosswords-v0", "Cryptarithm-v0",
    "FifteenPuzzle-v0", "FrozenLake-v0", "GuessTheNumber-v0", "LightsOut-v0", "LogicPuzzle-v0",
    "Mastermind-v0", "Minesweeper-v0", "PegJump-v0", "RushHour-v0", "Secretary-v0", "Set-v0",
    "Slitherlink-v0", "Sokoban-v0", "Sudoku-v0", "ThreeCardMonte-v0", "TowerOfHanoi-v0",
)  # fmt: skip
"""TextArena's single-player games that reset and play with no network (the index is part of the task id).

Left out of the default catalog: Hangman, WordLadder, WordSearch and Wordle (they download NLTK corpora
when first made), GuessWho and TwentyQuestions (an LLM behind an OpenRouter API key), every difficulty
variant and every multi-player game; ``games=[...]`` names any of them."""

EXTRA_FROM = 100
"""The game index of ``textarena_ids()[0]``: ids outside :data:`GAMES` have game index ``EXTRA_FROM + i``."""

INSTANCES_PER_GAME = 1000
TEST_FROM = 800
"""Instances ``TEST_FROM`` to ``INSTANCES_PER_GAME - 1`` of every game are the test split."""

INSTRUCTION = (
    "You play a single-player puzzle or game from TextArena. The first observation states the game's rules, "
    "the move syntax and the board. Each turn, think, then reply with one line `Action: <move>`, the move "
    "written exactly as the rules show it (most games use square brackets, e.g. `Action: [Up]`). An invalid "
    "move is answered with the reason; a second invalid move in a row loses the game."
)

TWO_PLAYER_NOTE = (
    " In a two-player game a fixed partner plays the other seat; its moves appear in the observation."
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE]-?\d+)?")


@functools.lru_cache(maxsize=1)
def textarena_ids() -> tuple[str, ...]:
    """Every id TextArena registers, sorted, without its ``-raw`` twins (the adapter builds every game bare)."""
    from textarena.envs.registration import ENV_REGISTRY

    return tuple(sorted(game for game in ENV_REGISTRY if not game.endswith("-raw")))


def game_index(game: str) -> int:
    """The game part of ``game``'s task ids (see the module docstring)."""
    if game in GAMES:
        return GAMES.index(game)
    known = textarena_ids()
    if game not in known:
        close = difflib.get_close_matches(game, known, n=3)
        raise InvalidTaskError(
            f"unknown TextArena id {game!r}"
            + (f"; did you mean {', '.join(close)}?" if close else "")
            + f" ({len(known)} ids: textarena_ids() lists them)"
        )
    return EXTRA_FROM + known.index(game)


def _game_at(index: int) -> str | None:
    if 0 <= index < len(GAMES):
        return GAMES[index]
    if EXTRA_FROM <= index < EXTRA_FROM + len(textarena_ids()):
        return textarena_ids()[index - EXTRA_FROM]
    return None


def task_id_of(game: str, instance: int) -> int:
    """The task id of ``instance`` of ``game`` (e.g. ``task_id_of("Sudoku-v0", 800)``, a test task)."""
    if not 0 <= instance < INSTANCES_PER_GAME:
        raise InvalidTaskError(f"instance must be in 0..{INSTANCES_PER_GAME - 1}, got {instance}")
    return game_index(game) * INSTANCES_PER_GAME + instance


def _make_bare(game: str) -> Any:
    """TextArena's game ``game`` without its observation wrappers (what its ``<id>-raw`` twin builds)."""
    from textarena.envs.registration import ENV_REGISTRY

    spec = ENV_REGISTRY[game]
    entry_point = spec.entry_point
    if isinstance(entry_point, str):
        module, name = entry_point.split(":")
        entry_point = getattr(importlib.import_module(module), name)
    built = entry_point(**spec.kwargs)
    built.env_id = game
    return built


def _catalog(games: tuple[str, ...]) -> TaskCatalog:
    train: list[int] = []
    test: list[int] = []
    categories: dict[str, list[int]] = {}
    for game in games:
        base = game_index(game) * INSTANCES_PER_GAME
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
    """One TextArena game at a time; which one follows from the task id.

    Args:
        games: play these TextArena ids (any registered id, variants and two-player games included);
            default :data:`GAMES`. The task catalog is theirs.
        max_steps: the policy's replies per episode before it is truncated (invalid ones count); None:
            only the game's own rules end it.
        partner: who plays the other seat of a two-player game: ``"random"``, ``"module:function"`` or
            ``{"model": folder}`` (see :mod:`agentgym_env_textarena.partners`).
        seat: the policy's player id in a two-player game; None: ``instance % 2``.
    """

    name = "textarena"
    max_episode_steps = 60
    # Not thread-safe: TextArena reseeds Python's global `random` on every reset and its games draw from
    # it. Until the server reads this flag (and serialises the instances itself), the calls below
    # serialise on the process-wide lock of agentgym_core.text_gym.OwnGlobalRandom.
    thread_safe: ClassVar[bool] = False
    games: ClassVar[tuple[str, ...]] = GAMES

    def __init__(
        self,
        games: list[str] | None = None,
        max_steps: int | None = 60,
        partner: str | dict[str, Any] = "random",
        seat: int | None = None,
    ) -> None:
        if games is not None:
            _check_games(games)
            if type(self).games != tuple(games):
                self.games = tuple(games)  # type: ignore[misc]  # this instance's subset
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 or None, got {max_steps}")
        if seat not in (None, 0, 1):
            raise ValueError(f"seat must be 0, 1 or None (alternate by instance), got {seat!r}")
        self.max_episode_steps = max_steps
        self._partner: Partner = make_partner(partner)
        self._fallback = RandomListedMove()
        self._partner_refused = 0
        self._seat_option = seat
        self._seat = 0
        self._game: Any = None
        self._random = OwnGlobalRandom()
        self._steps = 0
        self._done = True

    @classmethod
    def configured(cls, **options: Any) -> type[Env]:
        games = options.get("games")
        if not games:
            return cls
        _check_games(games)
        return type(cls.__name__, (cls,), {"games": tuple(games)})

    @property
    def instruction(self) -> str:
        text = INSTRUCTION
        if any(game not in GAMES for game in self.games):  # variants and two-player games
            text = text.replace("a single-player puzzle or game", "a puzzle or game") + TWO_PLAYER_NOTE
        if len(self.games) == 1:
            return f"{text} The game is TextArena's {self.games[0]}."
        return text

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
        index, instance = divmod(task_id, INSTANCES_PER_GAME)
        game_id = _game_at(index) if task_id >= 0 else None
        if game_id is None or game_id not in self.games:
            raise InvalidTaskError(
                f"textarena: task {task_id} is not in this environment's games "
                f"({', '.join(self.games)}); task ids are game_index * 1000 + instance (task_id_of names one)"
            )
        self._random.forget()  # TextArena seeds the game itself
        with self._own_random():
            game, players = _started(game_id, instance)
            self._game, self._steps, self._done = game, 0, False
            self._seat = (
                0 if players == 1 else (instance % 2 if self._seat_option is None else self._seat_option)
            )
            self._partner.start(instance)
            self._fallback.start(instance)
            self._partner_refused = 0
            ended, partner_moves = self._partner_turns()
            messages = self._agent_messages()
        if ended:
            raise InvalidTaskError(
                f"textarena: {game_id} instance {instance} ended before the policy's first move"
            )
        info: dict[str, Any] = {"game": game_id, "instance": instance, "players": players}
        if players > 1:
            info.update(seat=self._seat, partner_moves=partner_moves, partner_refused=self._partner_refused)
        return ResetResult(observation=_render(messages), info=info)

    def _partner_turns(self) -> tuple[bool, list[str]]:
        """The partner plays until it is the policy's turn or the game ends: (ended, its accepted moves).

        A move the game refuses is replaced by a random listed move (:class:`RandomListedMove`), so a
        partner that cannot play legally does not forfeit: a free win would teach the policy nothing.
        """
        moves: list[str] = []
        done = False
        tries = 0
        while not done and self._game.state.current_player_id != self._seat:
            tries += 1
            if tries > _MAX_PARTNER_MOVES:
                raise RuntimeError(f"textarena: the partner tried {tries} moves without the game moving on")
            player, messages = self._game.get_observation()
            seen = _render(messages)
            refused = getattr(self._game.state, "error_count", 0) > 0
            move = (self._fallback if refused else self._partner).act(seen, player)
            self._partner_refused += int(refused)
            done, _ = self._game.step(move)
            if getattr(self._game.state, "error_count", 0) == 0 or done:
                moves.append(move)
        return done, moves

    def _agent_messages(self) -> list[Any]:
        """What the game has told the policy's seat since its last turn (taken, as TextArena's own reader does)."""
        observations = self._game.state.observations
        messages = list(observations.get(self._seat, []))
        observations[self._seat] = []
        return messages

    def step(self, action: str) -> StepResult:
        if self._game is None:
            raise InvalidTaskError("textarena: reset() onto a task before step()")
        if self._done:
            raise EpisodeEndedError("the episode has ended; reset() to play again")
        self._steps += 1
        two_player = self._game.state.num_players > 1
        with self._own_random():
            done, _ = self._game.step(action)
            # A refused move within the game's error allowance leaves its error count above 0 (a valid move
            # resets it); TextArena clears its own invalid-move flag before step() returns.
            invalid = getattr(self._game.state, "error_count", 0) > 0
            partner_moves: list[str] = []
            if not done and two_player:
                done, partner_moves = self._partner_turns()
            messages = self._agent_messages()
            outcome = self._game.close() if done else None
        observation = _render(messages) or "(no answer)"
        extra: dict[str, Any] = (
            {"partner_moves": partner_moves, "partner_refused": self._partner_refused} if two_player else {}
        )
        if outcome is not None:
            rewards, game_info = outcome
            info = (game_info or {}).get(self._seat, {})
            reward, reason = _reward_and_reason((rewards or {}).get(self._seat, 0.0), info.get("reason"))
            if reason and reason not in observation:
                observation = f"{observation}\n\n{reason}".strip()
            self._done = True
            invalid = invalid or bool(info.get("invalid_move", False))
            return StepResult(
                observation=observation,
                reward=reward,
                terminated=True,
                success=reward >= 1.0,
                invalid_action=invalid,
                info={"reason": reason, "invalid_move": invalid, **extra},
            )
        limit = self.max_episode_steps
        if limit is not None and self._steps >= limit:
            self._done = True
            return StepResult(
                observation=observation, truncated=True, success=False, invalid_action=invalid, info=extra
            )
        return StepResult(observation=observation, invalid_action=invalid, info=extra)

    def close(self) -> None:
        self._game = None


_MAX_PARTNER_MOVES = 200
_PLAYERS: dict[str, int] = {}
"""Game id -> how many players it was started with (TextArena declares no player count: learnt by trying)."""


def _check_games(games: list[str] | tuple[str, ...]) -> None:
    if not games:
        raise ValueError(f"games: empty; name TextArena ids, e.g. {', '.join(GAMES[:3])}")
    for game in games:
        try:
            game_index(game)
        except InvalidTaskError as exc:
            raise ValueError(f"games: {exc}") from None


def _started(game_id: str, instance: int) -> tuple[Any, int]:
    """A fresh bare game reset onto ``instance``, as a single-player game when it can be one, else for two."""
    tries = [_PLAYERS[game_id]] if game_id in _PLAYERS else [1, 2]
    first_error: Exception | None = None
    for players in tries:
        random.seed(instance)
        np.random.seed(instance)
        game = _make_bare(game_id)
        try:
            game.reset(num_players=players, seed=instance)
        except (AssertionError, ValueError) as exc:  # TextArena asserts its player count
            first_error = first_error or exc
            continue
        _PLAYERS[game_id] = players
        return game, players
    raise InvalidTaskError(f"textarena: {game_id} does not start with one or two players: {first_error}")
