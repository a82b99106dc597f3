"""Bring a Gymnasium-style text environment into agentgym in a few lines, without writing a plugin.

A *Gymnasium-style text environment* is any object with

* ``reset(seed=..., options=...) -> (observation: str, info: dict)``
* ``step(action: str) -> (observation: str, reward: float, terminated: bool, truncated: bool, info: dict)``
* optionally ``close()``

(the Gymnasium API with strings for observations and actions; ``gymnasium`` itself is not needed).
:func:`text_gym_env` turns a factory of such objects into an agentgym :class:`~agentgym_core.env.Env`
class::

    from agentgym_core.text_gym import text_gym_env

    WordGameEnv = text_gym_env(
        "wordgame", WordGame,
        instruction="Guess the word. Reply with `Action: guess <word>`.",
        splits={"train": range(0, 1000), "test": range(1000, 1100)},
        max_steps=12,
    )

How the pieces map:

* **task ids** are reset seeds: task ``t`` is ``reset(seed=t)`` (pass ``reset_seed`` to mix in
  agentgym's per-episode seed, or to map ids to seeds some other way). Splits name disjoint id ranges.
* **available actions** come from ``info[actions_key]`` (default ``"available_actions"``) when the
  environment puts a list of strings there, read from the latest ``reset`` or ``step`` info only: an
  info without the key makes ``available_actions()`` None until one has it again.
* **success** is ``info["success"]`` (or ``info["won"]``) when the environment reports a bool; else
  an episode that *terminated* with a positive return succeeded, and one that was truncated failed.
  Pass ``success=`` for anything else.
* **the step limit** is ``max_steps``, a constructor option of the class (its default is the
  ``max_steps`` given here); reaching it truncates the episode.
* **info** crosses HTTP, so only its JSON-friendly entries (str, int, float, bool, None, lists of
  str) are passed on.

The class is an ordinary ``Env``: register it from a plugin, check it with
:func:`agentgym_core.testing.check_env`, or serve it straight from a script with
:func:`agentgym_core.http.serve_forever` and point a recipe's ``envs`` entry at the URL
(``{name: wordgame, url: http://127.0.0.1:8000}``).
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

from agentgym_core.env import Env, EpisodeEndedError, InvalidTaskError, ResetResult, StepResult, TaskCatalog

__all__ = ["OwnGlobalRandom", "TextGymEnv", "text_gym_env"]

SuccessRule = Callable[[float, bool, bool, dict[str, Any]], "bool | None"]
"""(episode return so far, terminated, truncated, info) -> success (None while undecided)."""


InvalidRule = Callable[[str, str, dict[str, Any]], "bool | None"]
"""(action, observation, info) -> whether the environment refused the action (None: it does not say)."""


_GLOBAL_RANDOM_LOCK = threading.Lock()


class OwnGlobalRandom:
    """A private stream of Python's (and numpy's) *global* random generator for one environment instance.

    Many game libraries seed and draw from the interpreter-wide ``random`` module, so two instances
    used from two threads (the HTTP server runs env calls on worker threads) interleave their draws,
    and the seeding leaks into everything else in the process. Wrap every call into such a library
    in ``with own.active():``: it holds one process-wide lock, swaps this instance's saved states in
    and the process's back out afterwards. Calls are serialised, episodes are deterministic.
    """

    def __init__(self) -> None:
        self._python: Any = None
        self._numpy: Any = None

    def forget(self) -> None:
        """Start the next call from the process's current state (call before the library reseeds)."""
        self._python = self._numpy = None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        try:
            import numpy.random as np_random
        except ImportError:  # numpy is optional: only Python's generator then
            np_random = None
        with _GLOBAL_RANDOM_LOCK:
            outer_python = random.getstate()
            outer_numpy = np_random.get_state() if np_random is not None else None
            if self._python is not None:
                random.setstate(self._python)
                if np_random is not None and self._numpy is not None:
                    np_random.set_state(self._numpy)
            try:
                yield
            finally:
                self._python = random.getstate()
                random.setstate(outer_python)
                if np_random is not None:
                    self._numpy = np_random.get_state()
                    np_random.set_state(outer_numpy)


def default_invalid(action: str, observation: str, info: dict[str, Any]) -> bool | None:
    """The env's own flag when its ``info`` has one (``invalid_action`` or ``invalid_move``), else None."""
    for key in ("invalid_action", "invalid_move"):
        if isinstance(info.get(key), bool):
            return info[key]
    return None


def default_success(
    episode_return: float, terminated: bool, truncated: bool, info: dict[str, Any]
) -> bool | None:
    """The env's own verdict when it reports one, else a positive return at termination."""
    for key in ("success", "won"):
        if isinstance(info.get(key), bool):
            return info[key]
    if terminated:
        return episode_return > 0
    return False if truncated else None


def _jsonable(info: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, (str, bool, int, type(None))) or (
            isinstance(value, float) and math.isfinite(value)
        ):
            kept[str(key)] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            kept[str(key)] = list(value)
    return kept


class TextGymEnv(Env):
    """An agentgym ``Env`` over a Gymnasium-style text environment; made by :func:`text_gym_env`.

    Constructor options: ``max_steps`` (the step limit of this instance; None for the class default)
    and ``env_kwargs`` (keyword arguments of the wrapped environment's factory).
    """

    make_gym: ClassVar[Callable[..., Any]]
    instruction_text: ClassVar[str] = ""
    split_ids: ClassVar[dict[str, list[int]]] = {}
    category_ids: ClassVar[dict[str, list[int]]] = {}
    actions_key: ClassVar[str] = "available_actions"
    success_rule: ClassVar[SuccessRule] = staticmethod(default_success)
    invalid_rule: ClassVar[InvalidRule] = staticmethod(default_invalid)
    reset_seed: ClassVar[Callable[[int, int | None], int]] = staticmethod(lambda task_id, seed: task_id)
    uses_global_random: ClassVar[bool] = False

    def __init__(self, max_steps: int | None = None, env_kwargs: dict[str, Any] | None = None) -> None:
        if max_steps is not None and max_steps < 1:
            raise ValueError(
                f"max_steps must be at least 1 (or None for {type(self).max_episode_steps}), got {max_steps}"
            )
        if max_steps is not None:
            self.max_episode_steps = max_steps
        self._gym = type(self).make_gym(**(env_kwargs or {}))
        self._random = OwnGlobalRandom()
        self._known = {task for ids in self.split_ids.values() for task in ids}
        self._info: dict[str, Any] = {}
        self._steps = 0
        self._return = 0.0
        self._done = True
        self._started = False

    @property
    def instruction(self) -> str:
        return self.instruction_text

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskCatalog(splits=cls.split_ids, categories=cls.category_ids)

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        if task_id not in self._known:
            raise InvalidTaskError(
                f"{self.name}: unknown task id {task_id}; `agentgym envs` lists the splits "
                f"({', '.join(f'{k}={len(v)}' for k, v in self.split_ids.items())})"
            )
        self._random.forget()
        with self._calls():
            observation, info = self._gym.reset(seed=type(self).reset_seed(task_id, seed))
        self._check_observation(observation, "reset")
        self._info = dict(info or {})
        self._steps, self._return, self._done, self._started = 0, 0.0, False, True
        return ResetResult(observation=observation, info=_jsonable(self._info))

    def step(self, action: str) -> StepResult:
        if not self._started:
            raise InvalidTaskError(f"{self.name}: reset() onto a task before step()")
        if self._done:
            raise EpisodeEndedError("the episode has ended; reset() to play again")
        with self._calls():
            observation, reward, terminated, truncated, info = self._gym.step(action)
        self._check_observation(observation, "step")
        self._info = dict(info or {})
        self._steps += 1
        reward = float(reward)
        self._return += reward
        terminated = bool(terminated)
        limit = self.max_episode_steps
        truncated = bool(truncated) or (not terminated and limit is not None and self._steps >= limit)
        self._done = terminated or truncated
        success = type(self).success_rule(self._return, terminated, truncated, self._info)
        if self._done and success is None:
            success = False
        return StepResult(
            observation=observation,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            success=success,
            invalid_action=type(self).invalid_rule(action, observation, self._info),
            info=_jsonable(self._info),
        )

    def available_actions(self) -> list[str] | None:
        actions = self._info.get(self.actions_key)
        if isinstance(actions, (list, tuple)) and all(isinstance(a, str) for a in actions):
            return list(actions)
        return None

    def close(self) -> None:
        gym, self._gym = getattr(self, "_gym", None), None
        if gym is not None and hasattr(gym, "close"):
            gym.close()

    def _calls(self) -> contextlib.AbstractContextManager[None]:
        return self._random.active() if self.uses_global_random else contextlib.nullcontext()

    def _check_observation(self, observation: Any, where: str) -> None:
        if not isinstance(observation, str):
            raise TypeError(
                f"{self.name}: the wrapped environment's {where}() returned a "
                f"{type(observation).__name__} observation; text_gym_env needs str (render it to "
                "text in your environment, or wrap it so that it returns text)"
            )


def text_gym_env(
    name: str,
    make: Callable[..., Any],
    *,
    instruction: str,
    splits: Mapping[str, Iterable[int]],
    max_steps: int | None = None,
    categories: Mapping[str, Iterable[int]] | None = None,
    actions_key: str = "available_actions",
    success: SuccessRule | None = None,
    invalid: InvalidRule | None = None,
    reset_seed: Callable[[int, int | None], int] | None = None,
    inline_calls: bool = False,
    global_random: bool = False,
) -> type[TextGymEnv]:
    """An agentgym ``Env`` class over the Gymnasium-style text environments ``make(**env_kwargs)`` builds.

    Args:
        name: the registry name (what ``agentgym serve`` and recipes use).
        make: a class or function returning a fresh environment (see the module docstring).
        instruction: the task-independent prompt: rules, action syntax, reply format.
        splits: split name -> task ids (reset seeds); the splits must not overlap.
        max_steps: the default step limit (None: only the environment's own ending).
        categories: category name -> task ids, for per-category metrics.
        actions_key: the ``info`` key listing the valid actions, if the environment offers one.
        success: ``(return, terminated, truncated, info) -> bool | None``; default :func:`default_success`.
        invalid: ``(action, observation, info) -> bool | None``: whether the environment refused the action
            (``StepResult.invalid_action``); default :func:`default_invalid`.
        reset_seed: ``(task_id, seed) -> reset seed``; default: the task id.
        inline_calls: True when reset and step are pure Python and take microseconds (see ``Env``).
        global_random: True when the environment seeds or draws from Python's global ``random`` (or
            numpy's): each instance then plays on its own saved stream under a process-wide lock
            (:class:`OwnGlobalRandom`), so episodes stay deterministic on the server's threads.
    """
    split_ids = {split: list(ids) for split, ids in splits.items()}
    seen: dict[int, str] = {}
    for split, ids in split_ids.items():
        for task in ids:
            if task in seen:
                raise ValueError(
                    f"text_gym_env({name!r}): task {task} is in both {seen[task]!r} and {split!r}; "
                    "splits must not overlap (a test task trained on says nothing)"
                )
            seen[task] = split
    if not instruction.strip():
        raise ValueError(f"text_gym_env({name!r}): instruction is empty; say the rules and the action syntax")
    attributes: dict[str, Any] = {
        "name": name,
        "max_episode_steps": max_steps,
        "inline_calls": inline_calls,
        "make_gym": staticmethod(make),
        "instruction_text": instruction,
        "split_ids": split_ids,
        "category_ids": {category: list(ids) for category, ids in (categories or {}).items()},
        "actions_key": actions_key,
        "uses_global_random": global_random,
        "__doc__": f"{name}: {type(make).__name__ if not isinstance(make, type) else make.__name__} "
        "through agentgym_core.text_gym.",
    }
    if success is not None:
        attributes["success_rule"] = staticmethod(success)
    if invalid is not None:
        attributes["invalid_rule"] = staticmethod(invalid)
    if reset_seed is not None:
        attributes["reset_seed"] = staticmethod(reset_seed)
    class_name = "".join(part.capitalize() for part in name.replace("-", "_").split("_")) + "Env"
    return type(class_name, (TextGymEnv,), attributes)
