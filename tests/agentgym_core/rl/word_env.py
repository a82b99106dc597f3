"""A real small environment for trainer tests: name the task's colour word within two turns.

Task ``i`` wants the colour ``COLOURS[i % 4]``. A wrong answer earns a per-turn reward of
``0.1 * (share of the target's letters in the reply) - 0.1`` (so even a random model's replies get
different rewards) and a hint; the right one pays 1.0 and ends the episode. Two turns at most (env step limit).
"""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.env import Env, EpisodeEndedError, InvalidTaskError, ResetResult, StepResult, TaskCatalog

COLOURS = ["red", "blue", "green", "grey"]


class WordEnv(Env):
    name = "word"
    max_episode_steps = 2

    def __init__(self) -> None:
        self.target = ""
        self.steps = 0
        self.done = True

    @property
    def instruction(self) -> str:
        return "Say a colour. Reply with Thought: ... then Action: <colour>"

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskCatalog(splits={"train": list(range(16)), "test": list(range(16, 20))})

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        if not 0 <= task_id < 20:
            raise InvalidTaskError(f"task {task_id} out of range 0..19")
        self.target, self.steps, self.done = COLOURS[task_id % 4], 0, False
        return ResetResult(observation="Which colour am I thinking of?")

    def step(self, action: str) -> StepResult:
        if self.done:
            raise EpisodeEndedError("episode over; call reset")
        self.steps += 1
        if self.target in action.lower():
            self.done = True
            return StepResult(observation="Correct!", reward=1.0, terminated=True, success=True)
        self.done = self.steps >= self.max_episode_steps
        letters = set(self.target)
        shaped = 0.1 * len(letters & set(action.lower())) / len(letters) - 0.1
        return StepResult(observation=f"No. It starts with {self.target[0]}.",
                          reward=shaped, truncated=self.done, success=False if self.done else None)


class WordPlugin:
    """Registers WordEnv as ``word``."""

    @hookimpl
    def agentgym_register_envs(self, register) -> None:
        register("word", WordEnv, summary="test env")


class OtherWordEnv(WordEnv):
    """The same game under a second name, to test batches that mix environments."""

    name = "word2"


class TwoWordPlugin:
    """Registers WordEnv as ``word`` and OtherWordEnv as ``word2``."""

    @hookimpl
    def agentgym_register_envs(self, register) -> None:
        register("word", WordEnv, summary="test env")
        register("word2", OtherWordEnv, summary="test env, second name")
