"""Any agentgym environment as a TRL ``environment_factory``, so TRL's ``GRPOTrainer`` trains on it.

TRL's contract (``trl.GRPOTrainer(environment_factory=...)``, read from trl 1.16): the factory is a
zero-argument callable returning an environment object; TRL calls ``reset(**row)`` before each rollout
(``row`` is the dataset example, if any) and appends the string it returns to the last user message;
every other public method becomes a tool the model calls through its chat template's native tool
calls; ``get_reward()`` scores the finished rollout. TRL parses the tool calls: one it cannot parse
never reaches the environment.

:func:`trl_environment` builds such a class over a registered environment, an ``Env`` class or a
running ``agentgym serve`` (``url=``)::

    from trl import GRPOConfig, GRPOTrainer
    from agentgym_core.integrations.trl import trl_environment

    trainer = GRPOTrainer(
        model=model, args=GRPOConfig(max_steps=100, ...),
        environment_factory=trl_environment("babyai", split="train"),
    )

The model acts through one tool, ``step(action)``, whose answer is the environment's observation;
after the episode ends a call is answered "the episode has ended". The reward is the episode's return
(the sum of the environment's rewards). A dataset row with a ``task_id`` column picks the task; without
one each reset draws a task of ``split`` at random (seeded).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any, ClassVar

from agentgym_core.env import Env
from agentgym_core.http.opening import env_factory

__all__ = ["AgentgymToolEnvironment", "trl_environment"]

_INSTANCES = itertools.count()


class AgentgymToolEnvironment:
    """One agentgym episode at a time, in TRL's ``environment_factory`` shape; made by :func:`trl_environment`."""

    _make_env: ClassVar[Callable[[], Env]]  # private: TRL turns every public function into a tool
    split: ClassVar[str] = "train"
    seed: ClassVar[int] = 0

    def __init__(self) -> None:
        self._env = type(self)._make_env()
        self._tasks = list(self._env.tasks().split(self.split))
        if not self._tasks:
            raise ValueError(f"{self._env.name}: split {self.split!r} has no tasks")
        self._rng = random.Random(self.seed * 1_000_003 + next(_INSTANCES))
        self._return = 0.0
        self._done = True
        self.task_id: int | None = None
        self.success: bool | None = None

    def reset(self, **row: Any) -> str:
        """Start an episode on ``row["task_id"]`` (else a random task of the split); the prompt's addition."""
        task_id = row.get("task_id")
        self.task_id = int(task_id) if task_id is not None else self._rng.choice(self._tasks)
        first = self._env.reset(self.task_id)
        self._return, self._done, self.success = 0.0, False, None
        return (
            f"{self._env.instruction}\n\n{first.observation}\n\n"
            "Act by calling the `step` tool with your action; its answer is what the environment says next."
        )

    def step(self, action: str) -> str:
        """Take one action in the environment and read what it answers.

        Args:
            action: The action to take, written as the environment's instructions ask.
        """
        if self._done:
            return "The episode has ended; no more actions are taken."
        result = self._env.step(self._env.parse_action(action))
        self._return += result.reward
        self._done = result.done
        if result.done:
            self.success = result.success
            return f"{result.observation}\n\nThe episode has ended."
        return result.observation

    def get_reward(self) -> float:
        """The episode's return: the sum of the environment's rewards so far."""
        return self._return


def trl_environment(
    env: str | type[Env] | None = None,
    *,
    url: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    split: str = "train",
    seed: int = 0,
) -> type[AgentgymToolEnvironment]:
    """A class to pass as TRL's ``environment_factory``: each instance plays one agentgym environment.

    Args:
        env: a registered environment name (``agentgym envs``) or an ``Env`` class; omit with ``url``.
        url: a running ``agentgym serve`` to play over HTTP instead.
        env_kwargs: constructor options of the environment (local only; a server was started with its own).
        split: the catalog split whose tasks a reset draws when the row names no ``task_id``.
        seed: seeds the task draws.
    """
    if (env is None) == (url is None):
        raise ValueError("trl_environment: give an environment (a name or an Env class) or url=, exactly one")
    opened = env_factory(env, url=url, env_kwargs=env_kwargs)
    attributes = {
        "_make_env": staticmethod(opened.make),
        "split": split,
        "seed": seed,
        "__doc__": f"agentgym's {opened.label} as a TRL environment (split {split!r}).",
    }
    return type("AgentgymToolEnvironment", (AgentgymToolEnvironment,), attributes)
