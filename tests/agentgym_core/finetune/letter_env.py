"""A real small environment where an untrained model sometimes succeeds: reply with a given letter.

Task ``i`` wants a reply containing the letter ``LETTERS[i % 4]`` (any case); two turns at most.
A random tiny model's replies contain common letters often enough that rejection sampling has
successes to keep and failures to contrast.
"""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.env import Env, EpisodeEndedError, InvalidTaskError, ResetResult, StepResult, TaskCatalog

LETTERS = ["e", "a", "o", "t"]


class LetterEnv(Env):
    name = "letter"
    max_episode_steps = 2

    def __init__(self) -> None:
        self.target, self.steps, self.done = "", 0, True

    @property
    def instruction(self) -> str:
        return "Write a word. Reply with Thought: ... then Action: <word>"

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskCatalog(splits={"train": list(range(16)), "test": list(range(16, 24))})

    def parse_action(self, text: str) -> str:
        return text  # the whole reply counts: an untrained model never writes "Action:"

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        if not 0 <= task_id < 24:
            raise InvalidTaskError(f"task {task_id} out of range 0..23")
        self.target, self.steps, self.done = LETTERS[task_id % 4], 0, False
        return ResetResult(observation=f"Use the letter {self.target}.")

    def step(self, action: str) -> StepResult:
        if self.done:
            raise EpisodeEndedError("episode over; call reset")
        self.steps += 1
        if self.target in action.lower():
            self.done = True
            return StepResult(observation="Yes.", reward=1.0, terminated=True, success=True)
        self.done = self.steps >= self.max_episode_steps
        return StepResult(observation="No.", truncated=self.done, success=False if self.done else None)


class LetterPlugin:
    @hookimpl
    def agentgym_register_envs(self, register) -> None:
        register("letter", LetterEnv, summary="test env")
