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
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, ClassVar

from agentgym_core.env import Env, EpisodeEndedError, InvalidTaskError, ResetResult, StepResult, TaskCatalog

__all__ = ["QUEST_LENGTHS", "TEST_TASKS", "TRAIN_TASKS", "TextWorldEnv", "default_cache_dir", "game_file"]

TRAIN_TASKS = range(0, 1000)
TEST_TASKS = range(1000, 1100)
QUEST_LENGTHS = (1, 2, 3, 4)

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
    path = folder / f"task_{task_id:05d}.z8"
    if path.is_file():
        return path
    import textworld
    from textworld.generator import compile_game, make_game

    with _TEXTWORLD_LOCK:
        if path.is_file():
            return path
        folder.mkdir(parents=True, exist_ok=True)
        length = quest_length_of(task_id)
        options = textworld.GameOptions()
        options.seeds = task_id
        options.nb_rooms = length + 2
        options.nb_objects = 2 * length + 2
        options.quest_length = length
        options.file_ext = ".z8"
        # Compile into a private folder, then move into place: another process may be generating the
        # same game, and a reader must never see half a file.
        with tempfile.TemporaryDirectory(dir=folder, prefix=".gen-") as scratch:
            options.path = str(Path(scratch) / path.name)
            compiled = Path(compile_game(make_game(options), options))
            os.replace(compiled.with_suffix(".json"), path.with_suffix(".json"))
            os.replace(compiled, path)
    return path


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
    """

    name = "textworld"
    max_episode_steps = 30
    # Not thread-safe (see _TEXTWORLD_LOCK): the calls serialise on that lock until the server reads this flag.
    thread_safe: ClassVar[bool] = False

    def __init__(
        self,
        max_steps: int = 30,
        cache_dir: str | None = None,
        include_walkthrough: bool = False,
        list_commands: bool = True,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
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
    def tasks(cls) -> TaskCatalog:
        ids = [*TRAIN_TASKS, *TEST_TASKS]
        return TaskCatalog(
            splits={"train": list(TRAIN_TASKS), "test": list(TEST_TASKS)},
            categories={f"quest{n}": [t for t in ids if quest_length_of(t) == n] for n in QUEST_LENGTHS},
        )

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        if task_id not in TRAIN_TASKS and task_id not in TEST_TASKS:
            raise InvalidTaskError(
                f"textworld: task ids are {TRAIN_TASKS.start}-{TEST_TASKS.stop - 1}, got {task_id}"
            )
        import textworld

        path = game_file(task_id, self.cache_dir)
        self._close_game()
        infos = textworld.EnvInfos(
            admissible_commands=True, score=True, max_score=True, won=True, lost=True, extras=["walkthrough"]
        )
        with (
            _TEXTWORLD_LOCK,
            warnings.catch_warnings(),
        ):  # jericho: "not fully supported" (TextWorld keeps the score)
            warnings.simplefilter("ignore")
            self._game = textworld.start(str(path), request_infos=infos)
            self._state = self._game.reset()
        self._score, self._steps, self._done = 0, 0, False
        info: dict[str, Any] = {
            "max_score": int(self._state.max_score),
            "quest_length": quest_length_of(task_id),
        }
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
        invalid = None if admissible is None else action.strip().lower() not in {a.lower() for a in admissible}
        with _TEXTWORLD_LOCK:
            self._state, _, game_over = self._game.step(typable(action))
        self._steps += 1
        score = int(self._state.score)
        reward = (score - self._score) / max(1, int(self._state.max_score))
        self._score = score
        won, lost = bool(self._state.won), bool(self._state.lost)
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
