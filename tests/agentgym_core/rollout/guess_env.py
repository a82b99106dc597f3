"""A real (small) environment for rollout tests: guess the secret number.

Task ``i`` hides ``1 + (7 * i) % 20``. The agent answers ``Action: guess N``; the environment says
higher/lower. Each guess costs 0.05 and the right one pays 1.0. Optional faults make it fail or
stall for the engine's error and timeout paths (a real slow/broken env, not a mock).
"""

from __future__ import annotations

import re
import threading
import time

from agentgym_core.env import Env, EpisodeEndedError, InvalidTaskError, ResetResult, StepResult, TaskCatalog

_NUMBER = re.compile(r"-?\d+")


class GuessEnv(Env):
    name = "guess"
    max_episode_steps = 6
    created = 0  # instances made, across threads (the engine creates at most M)
    _lock = threading.Lock()

    def __init__(self, fail_on_step: int | None = None, fail_on_reset: bool = False, step_delay: float = 0.0,
                 slow_tasks: list[int] | None = None) -> None:
        self.fail_on_step, self.fail_on_reset, self.step_delay = fail_on_step, fail_on_reset, step_delay
        self.slow_tasks = slow_tasks
        self.task_id = -1
        self.secret: int | None = None
        self.steps = 0
        self.done = False
        self.closed = False
        with GuessEnv._lock:
            GuessEnv.created += 1

    @property
    def instruction(self) -> str:
        return "Guess the secret number between 1 and 20. Reply with Thought: ... then Action: guess N"

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskCatalog(splits={"train": list(range(0, 40)), "test": list(range(40, 50))},
                           categories={"low": [i for i in range(50) if i % 2 == 0], "high": [i for i in range(50) if i % 2]})

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        if self.fail_on_reset:
            raise ConnectionError("guess server went away during reset")
        if not 0 <= task_id < 50:
            raise InvalidTaskError(f"task {task_id} out of range 0..49")
        self.secret, self.steps, self.done = 1 + (7 * task_id) % 20, 0, False
        self.task_id = task_id
        return ResetResult(observation="I picked a number between 1 and 20. Your first guess?")

    def step(self, action: str) -> StepResult:
        if self.done:
            raise EpisodeEndedError("the episode ended; call reset")
        self.steps += 1
        if self.fail_on_step is not None and self.steps >= self.fail_on_step:
            raise RuntimeError(f"guess env crashed on step {self.steps}")
        if self.step_delay and (self.slow_tasks is None or self.task_id in self.slow_tasks):
            time.sleep(self.step_delay)
        match = _NUMBER.search(action)
        truncated = self.steps >= self.max_episode_steps
        if match is None:
            self.done = truncated
            return StepResult(observation="Invalid action: write 'Action: guess N'.", truncated=truncated)
        guess = int(match.group())
        if guess == self.secret:
            self.done = True
            return StepResult(observation="Correct!", reward=1.0, terminated=True, success=True)
        self.done = truncated
        hint = "higher" if guess < self.secret else "lower"
        return StepResult(observation=f"No, the number is {hint} than {guess}.", reward=-0.05, truncated=truncated,
                          success=False if truncated else None)

    def close(self) -> None:
        self.closed = True
