"""Guess a secret integer in [low, high]; the environment answers "higher" or "lower"."""

from __future__ import annotations

import random
import re

from agentgym_core import Env, EpisodeEndedError, InvalidTaskError, ResetResult, StepResult, TaskCatalog

_GUESS = re.compile(r"^guess\s+(-?\d+)$", re.IGNORECASE)
_RANGE = re.compile(r"between (-?\d+) and (-?\d+)")


class GuessEnv(Env):
    """Task ``i`` hides the number ``random.Random(i).randint(low, high)``; the seed is unused."""

    name = "guess"
    max_episode_steps = 10
    train_tasks = range(0, 900)
    test_tasks = range(900, 1000)

    def __init__(self, low: int = 1, high: int = 100) -> None:
        if low >= high:
            raise ValueError(f"low must be below high, got low={low}, high={high}")
        self.low, self.high = low, high
        self._secret: int | None = None
        self._steps = 0
        self._done = False

    @property
    def instruction(self) -> str:
        return (
            f"A secret integer between {self.low} and {self.high} is hidden. Each turn, think, then reply "
            "with one line `Action: guess N`. You are told whether the secret is higher or lower. "
            f"You have {self.max_episode_steps} guesses."
        )

    @classmethod
    def tasks(cls) -> TaskCatalog:
        train, test = list(cls.train_tasks), list(cls.test_tasks)
        return TaskCatalog(
            splits={"train": train, "test": test},
            categories={"even": [t for t in train + test if t % 2 == 0], "odd": [t for t in train + test if t % 2]},
        )

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        if not (self.train_tasks.start <= task_id < self.test_tasks.stop):
            raise InvalidTaskError(f"task ids run from 0 to {self.test_tasks.stop - 1}, got {task_id}")
        self._secret = random.Random(task_id).randint(self.low, self.high)
        self._steps, self._done = 0, False
        return ResetResult(observation=f"Guess the secret number between {self.low} and {self.high}.")

    def step(self, action: str) -> StepResult:
        if self._secret is None:
            raise InvalidTaskError("reset() onto a task before step()")
        if self._done:
            raise EpisodeEndedError("the episode has ended; reset() to play again")
        self._steps += 1
        truncated = self._steps >= self.max_episode_steps
        match = _GUESS.match(action.strip())
        if match is None:
            self._done = truncated
            return StepResult(observation=f"Invalid action {action!r}: reply `Action: guess N`.",
                              truncated=truncated, success=False if truncated else None, invalid_action=True)
        guess = int(match.group(1))
        if guess == self._secret:
            self._done = True
            return StepResult(observation=f"{guess} is correct!", reward=1.0, terminated=True, success=True,
                              invalid_action=False)
        self._done = truncated
        hint = "higher" if self._secret > guess else "lower"
        return StepResult(observation=f"The secret is {hint} than {guess}.", truncated=truncated,
                          success=False if truncated else None, invalid_action=False)

    def available_actions(self) -> list[str] | None:
        return None


def solve(env: Env, task_id: int) -> StepResult:
    """An expert: binary search through the env interface (works in-process and over HTTP), over the
    range the first observation names (an env made with other ``low``/``high`` is searched correctly)."""
    first = env.reset(task_id).observation
    bounds = _RANGE.search(first)
    low, high = (int(bounds.group(1)), int(bounds.group(2))) if bounds else (1, 100)
    while True:
        guess = (low + high) // 2
        result = env.step(f"guess {guess}")
        if result.done:
            return result
        if "higher" in result.observation:
            low = guess + 1
        else:
            high = guess - 1
