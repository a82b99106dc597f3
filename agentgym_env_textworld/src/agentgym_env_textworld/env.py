"""TextWorld's generated text adventures as an agentgym environment.

Task ``t`` is the game TextWorld generates from seed ``t`` with a quest of ``1 + t % 4`` steps
(``quest_length``; ``quest_length + 2`` rooms and ``2 * quest_length + 2`` objects). Games are
generated and compiled at first use into a cache folder (a few seconds each) and reused after; the
same textworld version makes the same game from the same seed, so a task id names one game
everywhere. Tasks 0-999 are the train split and 1000-1099 the test split; categories ``quest1`` to
``quest4``.

Per step: ``available_actions`` are TextWorld's admissible commands; the reward is the rise in the
game's score divided by its maximum (an episode's rewards sum to the share of the quest done);
winning terminates with ``success=True``, losing terminates with ``success=False``, and
``max_steps`` commands truncate. A command reaches the interpreter cut to printable ASCII
(:func:`typable`): a sampled reply may hold control characters, some of which crash it. Built with
``include_walkthrough=True`` the reset info carries the game's walkthrough (``info["walkthrough"]``),
which :func:`agentgym_env_textworld.expert.play_walkthrough` replays as the expert.

Other games: ``challenge="tw-cooking"`` (or ``tw-coin_collector``, ``tw-treasure_hunter``,
``tw-simple``) with ``challenge_settings`` generates TextWorld's challenge family instead, task ``t``
from seed ``t`` over the same id ranges, cached per challenge and settings; ``game_files=[...]`` (and
``test_game_files``) plays compiled games of your own (``tw-make`` output with its ``.json``): task
``i`` is the ``i``-th file, the train files first.

Rewards: ``reward="score"`` (default) is the rise in the game's score over its maximum; the generated
quests score only at their end, so it pays 0 until the win. ``reward="progress"`` grades every step by
TextWorld's own winning policy from the current state: the drop in the number of commands still
needed, over their number at the start (a step towards the goal pays ``1/n``, a step away costs as
much; a win has summed to 1).
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from agentgym_core.env import Env, EpisodeEndedError, InvalidTaskError, ResetResult, StepResult, TaskCatalog

__all__ = [
    "CHALLENGES",
    "QUEST_LENGTHS",
    "TEST_TASKS",
    "TRAIN_TASKS",
    "TextWorldEnv",
    "challenge_game_file",
    "default_cache_dir",
    "game_file",
]

TRAIN_TASKS = range(0, 1000)
TEST_TASKS = range(1000, 1100)
QUEST_LENGTHS = (1, 2, 3, 4)
CHALLENGES = ("tw-coin_collector", "tw-treasure_hunter", "tw-simple", "tw-cooking")
"""TextWorld's challenge families (``textworld.challenges.CHALLENGES``), all generated offline."""
REWARDS = ("score", "progress")

INSTRUCTION = (
    "You play a text adventure. The first observation states your objective and where you are. Each turn, "
    "think, then reply with one line `Action: <command>`, a command such as `go east`, `take key`, `open "
    "chest`, `unlock door with key`, `put apple on table`, `inventory` or `look`. You score points as you "
    "complete the objective's steps."
)
LISTED = " The valid commands of the moment are listed after each observation; choose one of them."

# textworld is not thread-safe: its logic parser is one module-level tatsu parser (generating a game on
# one thread while loading another on a second corrupts it). Every call into textworld (generation and
# play) holds this lock. (The process crash once put down to two jericho interpreters stepped at once was
# a hot-key character in a command: see _NOT_TYPABLE. Each interpreter loads its own copy of frotz.)
_TEXTWORLD_LOCK = threading.RLock()
_BANNER_LINE = re.compile(r"^[\s_|\\$/<>]*$")
_PROMPT = re.compile(r"\n\s*>.*\Z", re.S)
_RESTART = re.compile(r"\s*Would you like to RESTART.*\Z", re.S)
# Characters a command may carry into the interpreter: printable ASCII. Jericho's frotz reads some control
# characters (NUL and 0x10-0x14, its "hot keys" for seed, undo, restart, quit and debug) as requests to
# the terminal it does not have and segfaults the whole process; a sampled reply can hold any of them.
_NOT_TYPABLE = re.compile(r"[^\x20-\x7e]+")


def default_cache_dir() -> Path:
    """Where generated games are kept: ``$AGENTGYM_TEXTWORLD_CACHE``, else ``~/.cache/agentgym/textworld``."""
    root = os.environ.get("AGENTGYM_TEXTWORLD_CACHE") or Path.home() / ".cache" / "agentgym" / "textworld"
    import textworld

    return Path(root) / textworld.__version__


def quest_length_of(task_id: int) -> int:
    return QUEST_LENGTHS[task_id % len(QUEST_LENGTHS)]


def game_file(task_id: int, cache_dir: Path | None = None) -> Path:
    """The compiled game of ``task_id``, generated into ``cache_dir`` first if it is not there yet."""
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()

    def make(options: Any) -> Any:
        from textworld.generator import make_game

        length = quest_length_of(task_id)
        options.nb_rooms = length + 2
        options.nb_objects = 2 * length + 2
        options.quest_length = length
        return make_game(options)

    return _compiled_once(folder / f"task_{task_id:05d}.z8", task_id, make)


def challenge_game_file(
    challenge: str, settings: dict[str, Any], task_id: int, cache_dir: Path | None = None
) -> Path:
    """The compiled game of ``task_id`` in ``challenge`` with ``settings`` (generated from seed ``task_id``)."""
    import hashlib
    import json

    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    folder = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / challenge / key

    def make(options: Any) -> Any:
        import textworld.challenges

        return textworld.challenges.CHALLENGES[challenge][1](dict(settings), options)

    return _compiled_once(folder / f"task_{task_id:05d}.z8", task_id, make)


def _compiled_once(path: Path, seed: int, make: Callable[[Any], Any]) -> Path:
    """``path``, the game ``make(options)`` builds from ``seed`` compiled there unless it already is."""
    if path.is_file():
        return path
    import textworld
    from textworld.generator import compile_game

    with _TEXTWORLD_LOCK:
        if path.is_file():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        options = textworld.GameOptions()
        options.seeds = seed
        options.file_ext = ".z8"
        # Compile into a private folder, then move into place: another process may be generating the
        # same game, and a reader must never see half a file.
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".gen-") as scratch:
            options.path = str(Path(scratch) / path.name)
            compiled = Path(compile_game(make(options), options))
            os.replace(compiled.with_suffix(".json"), path.with_suffix(".json"))
            os.replace(compiled, path)
    return path


def challenge_settings_of(challenge: str, settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` over the defaults ``tw-make <challenge>`` would use; the settings it requires must be given."""
    import argparse

    import textworld.challenges

    parser = argparse.ArgumentParser(prog=f"tw-make {challenge}", add_help=False)
    textworld.challenges.CHALLENGES[challenge][2](parser)
    required = sorted(a.dest for a in parser._actions if a.required)
    for action in parser._actions:
        action.required = False
    known = vars(parser.parse_args([]))
    unknown = sorted(set(settings) - set(known))
    missing = [name for name in required if name not in settings]
    if unknown or missing:
        raise ValueError(
            f"challenge_settings for {challenge}: "
            + (f"unknown {unknown} " if unknown else "")
            + (f"missing required {missing} " if missing else "")
            + f"(its settings: {', '.join(sorted(known))}; `tw-make {challenge} --help` explains them)"
        )
    return {**known, **settings}


def _check_challenge(challenge: str, settings: dict[str, Any]) -> None:
    """Fail at configuration, not at the first reset: an unknown family, or settings its maker refuses."""
    if challenge not in CHALLENGES:
        raise ValueError(
            f"challenge: unknown {challenge!r}; TextWorld's families are {', '.join(CHALLENGES)}"
        )
    import textworld
    import textworld.challenges

    options = textworld.GameOptions()
    options.seeds = 0
    try:
        with _TEXTWORLD_LOCK:
            textworld.challenges.CHALLENGES[challenge][1](dict(settings), options)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"challenge_settings {settings} do not make a {challenge} game ({type(exc).__name__}: {exc}); "
            f"`tw-make {challenge} --help` lists its settings"
        ) from None


def clean(text: str) -> str:
    """TextWorld's output without the title banner, the ``>`` prompt and the status line."""
    text = _RESTART.sub("", _PROMPT.sub("", text))
    lines = text.splitlines()
    while lines and _BANNER_LINE.match(lines[0]):
        lines.pop(0)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(line.strip() for line in lines)).strip()


def typable(action: str) -> str:
    """``action`` as a player could type it: characters outside printable ASCII (see ``_NOT_TYPABLE``)
    become spaces, and runs of spaces one."""
    return " ".join(_NOT_TYPABLE.sub(" ", action).split())


class TextWorldEnv(Env):
    """A TextWorld game per task, generated at first use (see the module docstring).

    Args:
        max_steps: commands per episode before it is truncated.
        cache_dir: where generated games are kept (default :func:`default_cache_dir`).
        include_walkthrough: put the game's walkthrough in the reset info (for the expert; keep it off
            for agents).
        list_commands: end every observation with the admissible commands (``Valid commands: ...``),
            as ALFWorld-style prompts do; False leaves them to ``available_actions()`` only.
        reward: ``"score"`` (the score's rise over its maximum) or ``"progress"`` (graded by the commands
            still needed to win; see the module docstring).
        challenge: a TextWorld challenge family (:data:`CHALLENGES`) instead of the default quests.
        challenge_settings: its settings (``tw-make <challenge> --help``), e.g. ``{"level": 5}``.
        game_files: compiled games of your own instead (train split); ``test_game_files`` the test split.
    """

    name = "textworld"
    max_episode_steps = 30
    # Not thread-safe (see _TEXTWORLD_LOCK): the calls serialise on that lock until the server reads this flag.
    thread_safe: ClassVar[bool] = False
    challenge: ClassVar[str | None] = None
    game_files: ClassVar[tuple[str, ...]] = ()
    test_game_files: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        max_steps: int = 30,
        cache_dir: str | None = None,
        include_walkthrough: bool = False,
        list_commands: bool = True,
        reward: str = "score",
        challenge: str | None = None,
        challenge_settings: dict[str, Any] | None = None,
        game_files: list[str] | None = None,
        test_game_files: list[str] | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        source = _source(challenge, challenge_settings, game_files, test_game_files)
        if source != _source_of(type(self)):
            self.challenge, self.game_files, self.test_game_files = source[0], source[2], source[3]  # type: ignore[misc]
        self.challenge_settings = dict(source[1])
        self.reward_kind = reward
        self.max_episode_steps = max_steps
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.include_walkthrough = include_walkthrough
        self.list_commands = list_commands
        self._game: Any = None
        self._state: Any = None
        self._score = 0
        self._steps = 0
        self._done = True

    @property
    def instruction(self) -> str:
        return INSTRUCTION + LISTED if self.list_commands else INSTRUCTION

    def _shown(self, text: str) -> str:
        """The observation as the agent reads it: with the valid commands when ``list_commands``."""
        commands = self.available_actions() if self.list_commands else None
        return f"{text}\n\nValid commands: {', '.join(commands)}" if commands else text

    @classmethod
    def configured(cls, **options: Any) -> type[Env]:
        source = _source(
            options.get("challenge"), options.get("challenge_settings"), options.get("game_files"),
            options.get("test_game_files"),
        )  # fmt: skip
        if source == _source_of(cls):
            return cls
        attributes = {"challenge": source[0], "game_files": source[2], "test_game_files": source[3]}
        return type(cls.__name__, (cls,), attributes)

    @classmethod
    def tasks(cls) -> TaskCatalog:
        if cls.game_files:
            train = list(range(len(cls.game_files)))
            test = list(range(len(train), len(train) + len(cls.test_game_files)))
            return TaskCatalog(splits={"train": train, "test": test}, categories={"custom": train + test})
        ids = [*TRAIN_TASKS, *TEST_TASKS]
        if cls.challenge:
            return TaskCatalog(
                splits={"train": list(TRAIN_TASKS), "test": list(TEST_TASKS)}, categories={cls.challenge: ids}
            )
        return TaskCatalog(
            splits={"train": list(TRAIN_TASKS), "test": list(TEST_TASKS)},
            categories={f"quest{n}": [t for t in ids if quest_length_of(t) == n] for n in QUEST_LENGTHS},
        )

    def _path(self, task_id: int) -> Path:
        if self.game_files:
            files = [*self.game_files, *self.test_game_files]
            if not 0 <= task_id < len(files):
                raise InvalidTaskError(
                    f"textworld: task ids are 0-{len(files) - 1} (one per game file), got {task_id}"
                )
            return Path(files[task_id])
        if task_id not in TRAIN_TASKS and task_id not in TEST_TASKS:
            raise InvalidTaskError(
                f"textworld: task ids are {TRAIN_TASKS.start}-{TEST_TASKS.stop - 1}, got {task_id}"
            )
        if self.challenge:
            return challenge_game_file(self.challenge, self.challenge_settings, task_id, self.cache_dir)
        return game_file(task_id, self.cache_dir)

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        import textworld

        path = self._path(task_id)
        self._close_game()
        infos = textworld.EnvInfos(
            admissible_commands=True, score=True, max_score=True, won=True, lost=True, extras=["walkthrough"],
            policy_commands=self.reward_kind == "progress",
        )  # fmt: skip
        with (
            _TEXTWORLD_LOCK,
            warnings.catch_warnings(),
        ):  # jericho: "not fully supported" (TextWorld keeps the score)
            warnings.simplefilter("ignore")
            self._game = textworld.start(str(path), request_infos=infos)
            self._state = self._game.reset()
        self._score, self._steps, self._done = 0, 0, False
        self._needed = self._needed_at_start = self._commands_to_win()
        info: dict[str, Any] = {"max_score": int(self._state.max_score)}
        if not self.challenge and not self.game_files:
            info["quest_length"] = quest_length_of(task_id)
        if self.include_walkthrough:
            info["walkthrough"] = list(self._state.get("extra.walkthrough") or [])
        return ResetResult(observation=self._shown(clean(self._state.feedback)), info=info)

    def step(self, action: str) -> StepResult:
        if self._game is None:
            raise InvalidTaskError("textworld: reset() onto a task before step()")
        if self._done:
            raise EpisodeEndedError("the episode has ended; reset() to play again")
        # Refused: a command outside the game's admissible ones (TextWorld answers it with a complaint
        # and changes nothing).
        admissible = self._state.get("admissible_commands") if self._state is not None else None
        invalid = (
            None if admissible is None else action.strip().lower() not in {a.lower() for a in admissible}
        )
        with _TEXTWORLD_LOCK:
            self._state, _, game_over = self._game.step(typable(action))
        self._steps += 1
        score = int(self._state.score)
        won, lost = bool(self._state.won), bool(self._state.lost)
        if self.reward_kind == "progress":
            needed = 0 if won else self._commands_to_win() if not lost else self._needed
            reward = (self._needed - needed) / max(1, self._needed_at_start)
            self._needed = needed
        else:
            reward = (score - self._score) / max(1, int(self._state.max_score))
        self._score = score
        terminated = won or lost or bool(game_over)
        truncated = not terminated and self._steps >= self.max_episode_steps
        self._done = terminated or truncated
        success = won if self._done else None
        return StepResult(
            observation=self._shown(clean(self._state.feedback) or "Nothing happens."),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            success=success,
            invalid_action=invalid,
            info={"score": score, "max_score": int(self._state.max_score)},
        )

    def _commands_to_win(self) -> int:
        """How many commands TextWorld's winning policy still needs from here (0 when not asked for)."""
        commands = self._state.get("policy_commands") if self.reward_kind == "progress" else None
        return len(commands or [])

    def available_actions(self) -> list[str] | None:
        if self._state is None or self._done:
            return None
        return sorted(self._state.admissible_commands or [])

    def _close_game(self) -> None:
        game, self._game = self._game, None
        if game is not None:
            with _TEXTWORLD_LOCK:
                game.close()

    def close(self) -> None:
        self._close_game()
        self._state = None


_Source = tuple[str | None, tuple[tuple[str, Any], ...], tuple[str, ...], tuple[str, ...]]


def _source(
    challenge: str | None,
    settings: dict[str, Any] | None,
    game_files: list[str] | None,
    test_game_files: list[str] | None,
) -> _Source:
    """Where the games come from, checked: the default quests, a challenge family, or game files."""
    if challenge and game_files:
        raise ValueError("textworld: give challenge= or game_files=, not both")
    if settings and not challenge:
        raise ValueError("textworld: challenge_settings need a challenge")
    if test_game_files and not game_files:
        raise ValueError("textworld: test_game_files need game_files (the train split)")
    if challenge:
        if challenge not in CHALLENGES:
            raise ValueError(
                f"challenge: unknown {challenge!r}; TextWorld's families are {', '.join(CHALLENGES)}"
            )
        settings = challenge_settings_of(challenge, dict(settings or {}))
        _check_challenge(challenge, settings)
    files = tuple(str(Path(f).resolve()) for f in (game_files or []))
    test_files = tuple(str(Path(f).resolve()) for f in (test_game_files or []))
    for f in (*files, *test_files):
        if not Path(f).is_file():
            raise ValueError(f"textworld: game file {f} does not exist")
    return challenge, tuple(sorted((settings or {}).items())), files, test_files


def _source_of(cls: type[TextWorldEnv]) -> _Source:
    return cls.challenge, (), cls.game_files, cls.test_game_files
