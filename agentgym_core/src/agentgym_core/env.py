"""The environment interface every agentgym environment implements.

An environment is a text game: `reset` puts it on a task and returns the first observation,
`step` takes one action string and returns what happened. The same interface is implemented
in-process by environment plugins and remotely by :class:`agentgym_core.http.client.HTTPEnv`, so the
rollout engine cannot tell the two apart.

Conventions (checked by :func:`agentgym_core.testing.check_env`):

* ``reset(task_id, seed)`` with the same arguments always yields the same observation.
* ``terminated`` means the task reached an end state (won or lost); ``truncated`` means the
  environment's own step limit cut the episode short. Both end the episode; stepping again
  raises :class:`EpisodeEndedError` until the next ``reset``.
* ``reward`` is the environment's raw score for the step; ``success`` is a separate boolean
  (``None`` while undecided) because many environments score partial progress.
* ``close`` is idempotent.
* An environment that can name its exact state puts a string under ``info["state_key"]``
  (:data:`STATE_KEY`) of its reset and step results: equal keys within a task mean the same state
  (everything the outcome of the next action depends on). Step-level advantage estimators (``gigpo``)
  compare the turns of a task's samples that act in the same state. Optional: without it those
  estimators fall back to episode-level credit.
* ``invalid_action`` of a step result says whether the environment **refused** the action: it did
  not parse, or it does not apply in the current state, so the world did not change (the
  observation says why). ``True``: refused; ``False``: accepted; ``None`` (the default): the
  environment does not say. An environment with a notion of invalid actions sets it on every step;
  the trainer and ``agentgym eval`` report the share of refused turns (``invalid_action_rate``),
  and ``algorithm.invalid_action_penalty`` can charge for each one.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
import threading
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, Field

__all__ = [
    "STATE_KEY",
    "Env",
    "EnvError",
    "EpisodeEndedError",
    "InvalidTaskError",
    "ResetResult",
    "StepResult",
    "TaskCatalog",
    "check_env_options",
    "parse_react_action",
]


STATE_KEY = "state_key"
"""The ``info`` key under which an environment names the state it is in (see the module docstring)."""


class ResetResult(BaseModel):
    """What `Env.reset` returns: the first observation of an episode."""

    observation: str = Field(description="The text the agent reads first (goal + what it sees).")
    info: dict[str, Any] = Field(default_factory=dict, description="Environment-specific extras.")


class StepResult(BaseModel):
    """What `Env.step` returns after one action."""

    observation: str = Field(description="The environment's answer to the action.")
    reward: float = Field(default=0.0, description="Raw reward of this step.")
    terminated: bool = Field(default=False, description="The task reached an end state.")
    truncated: bool = Field(default=False, description="The environment's step limit ended it.")
    success: bool | None = Field(
        default=None, description="Whether the task was accomplished; None while undecided."
    )
    invalid_action: bool | None = Field(
        default=None, description="The environment refused the action (unparsable or not applicable now); "
        "None when the environment does not say.")
    info: dict[str, Any] = Field(default_factory=dict, description="Environment-specific extras.")

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class TaskCatalog(BaseModel):
    """The task ids an environment offers, by split and by category."""

    splits: dict[str, list[int]] = Field(
        description="Split name ('train', 'test', ...) -> task ids. Splits are disjoint."
    )
    categories: dict[str, list[int]] = Field(
        default_factory=dict,
        description="Category name (level, depth, site, ...) -> task ids, for per-category metrics.",
    )

    def split(self, name: str) -> list[int]:
        try:
            return self.splits[name]
        except KeyError:
            raise InvalidTaskError(
                f"unknown split {name!r}; this environment offers {sorted(self.splits)}"
            ) from None

    def spread(self, split: str, n: int | None) -> list[int]:
        """``n`` task ids of ``split`` taken round-robin across categories (all, in split order, when ``n`` is None).

        A small evaluation then covers every category instead of the first one only (TextCraft's
        test ids, for instance, are ordered by crafting depth). Deterministic; keeps split order
        within each category.
        """
        ids = self.split(split)
        if n is None:
            return list(ids)
        n = min(n, len(ids))  # all of them, in round-robin order
        index = self.category_index()
        queues: dict[str | None, list[int]] = {}
        for task in ids:
            queues.setdefault(index.get(task), []).append(task)
        chosen: list[int] = []
        while len(chosen) < n:
            for queue in queues.values():
                if queue and len(chosen) < n:
                    chosen.append(queue.pop(0))
        return chosen

    def category_index(self) -> dict[int, str]:
        """Task id -> category name (tasks without a category are absent)."""
        return {task: name for name, tasks in self.categories.items() for task in tasks}

    def in_categories(self, task_ids: list[int], names: list[str], *, what: str = "tasks") -> list[int]:
        """The ids of ``task_ids`` whose category is one of ``names``, in their order.

        Raises :class:`InvalidTaskError` naming what to fix: a name the catalog does not offer (with the
        closest one), a catalog without categories, or a choice that leaves none of ``what``.
        """
        if not self.categories:
            raise InvalidTaskError("this environment's catalog has no categories to choose from; drop categories")
        unknown = [name for name in names if name not in self.categories]
        if unknown:
            close = difflib.get_close_matches(unknown[0], list(self.categories), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidTaskError(f"unknown category {unknown[0]!r}{hint}; this environment offers "
                                   f"{', '.join(self.categories)}")
        wanted = {task for name in names for task in self.categories[name]}
        kept = [task for task in task_ids if task in wanted]
        if not kept:
            raise InvalidTaskError(f"none of the {len(task_ids)} {what} is in categories {', '.join(names)}")
        return kept

    def sizes(self) -> dict[str, int]:
        return {name: len(ids) for name, ids in self.splits.items()}


class EnvError(Exception):
    """Base class of errors an environment raises on bad use; the server maps them to HTTP."""


class InvalidTaskError(EnvError, ValueError):
    """The task id or split does not exist."""


class EpisodeEndedError(EnvError, RuntimeError):
    """`step` was called after the episode terminated or was truncated."""


_ACTION_LINE = re.compile(r"^\s*Action\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_react_action(text: str) -> str:
    """Return the action of a ReAct reply (`Thought: ...` then `Action: ...`).

    The last `Action:` line wins (models sometimes restate an example first). A reply without one
    is returned stripped, so the environment answers it as an invalid action instead of the
    agent's turn vanishing.
    """
    matches = _ACTION_LINE.findall(text)
    if matches:
        return matches[-1].strip().strip("`").strip()
    return text.strip()


class Env(ABC):
    """One live environment instance. Subclass it and register the class through a plugin.

    Class attributes:
        name: the registry name (`agentgym envs` lists it).
        max_episode_steps: the environment's own step limit; reaching it sets ``truncated``. The
            class value is the default; an instance may set its own in ``__init__`` (from a
            constructor option such as ``max_steps``), and the server reports the instance's.
        inline_calls: True when reset/step take microseconds and never block (pure Python games):
            the HTTP server then calls them on its event loop instead of handing each call to a
            worker thread, which costs more than such a step. Leave False for anything that waits
            (a JVM, a browser, a retriever).
        thread_safe: False when two instances must never run at the same time (the environment
            touches process-wide state: Python's global ``random``, a shared engine, a C library
            that is not reentrant). Servers and the rollout engine call environments from several
            threads; with False, every call into any instance of the class (the constructor,
            ``reset``, ``step``, ``close`` and the other public methods) holds one lock per class,
            so calls run one at a time wherever they come from. Calls on one instance are always
            serialised by the server, whatever this says.
    """

    name: ClassVar[str] = ""
    max_episode_steps: int | None = None  # not a ClassVar: an instance may override it (see above)
    inline_calls: ClassVar[bool] = False
    thread_safe: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.thread_safe:
            _serialise_calls(cls)

    # -- what the agent is told -------------------------------------------------------------
    @property
    @abstractmethod
    def instruction(self) -> str:
        """The task-independent instruction prompt (rules, action syntax, reply format)."""

    def parse_action(self, text: str) -> str:
        """Extract the action string from a model reply. Default: ReAct `Action:` line."""
        return parse_react_action(text)

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """JSON schemas (the OpenAI/Hugging Face ``tools`` shape) of the tools the model acts through, or None
        when it acts in text. The rollout engine hands them to the chat template's ``tools=`` where the
        template renders them, else describes them in the system message (``agentgym_core.rollout.tool_calls``)."""
        return None

    # -- tasks --------------------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def tasks(cls) -> TaskCatalog:
        """The task ids this environment offers, by split and category (no instance needed)."""

    @classmethod
    def configured(cls, **options: Any) -> type[Env]:
        """The class to use with these constructor options (default: this class).

        Override when ``tasks()`` depends on constructor options (which dataset files to load, say):
        return a subclass whose ``tasks()`` reflects them. The server, ``agentgym eval`` and
        ``agentgym train`` call ``EnvClass.configured(**options)`` before anything else.
        """
        return cls

    # -- the episode ---------------------------------------------------------------------------
    @abstractmethod
    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        """Start task `task_id`; the same (task_id, seed) must give the same episode."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one action. Invalid actions are answered in the observation, never raised."""

    def available_actions(self) -> list[str] | None:
        """The actions valid now, if the environment can enumerate them; else None."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, default is a no-op
        """Free resources. Must be idempotent."""


def _serialise_calls(cls: type[Env]) -> None:
    """Make every public method of ``cls`` (its own and inherited ones) hold its class-wide lock.

    See ``Env.thread_safe``. The lock is shared with subclasses (``configured()`` returns one), and
    reentrant, so a method that calls another (``reset`` calling ``close``, a subclass calling
    ``super().step``) does not wait on itself.
    """
    lock = getattr(cls, "_agentgym_calls_lock", None)
    if lock is None:
        lock = threading.RLock()
        cls._agentgym_calls_lock = lock  # type: ignore[attr-defined]

    def hold(fn: Any) -> Any:
        if getattr(fn, "_agentgym_calls_lock", None) is lock:
            return fn

        @functools.wraps(fn)
        def one_at_a_time(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return fn(*args, **kwargs)

        one_at_a_time._agentgym_calls_lock = lock  # type: ignore[attr-defined]
        return one_at_a_time

    names = {name for klass in cls.__mro__ if klass is not object for name in vars(klass)}
    for attr in sorted(names):
        if attr.startswith("_") and attr != "__init__":
            continue
        value = inspect.getattr_static(cls, attr)
        if inspect.isfunction(value):
            wrapped = hold(value)
            if wrapped is not value:
                setattr(cls, attr, wrapped)
        elif isinstance(value, property) and value.fget is not None:
            getter = hold(value.fget)
            if getter is not value.fget:
                setattr(cls, attr, property(getter, value.fset, value.fdel, value.__doc__))


def check_env_options(env_cls: type[Env], options: dict[str, Any], *, where: str = "env_kwargs") -> None:
    """Raise ValueError before any episode when ``options`` do not fit ``env_cls``'s constructor.

    An unknown name gets "did you mean"; a missing required argument is named. Then, when options
    are given, the constructor is called once with them (and the instance closed), so a value it
    rejects (or a ``**options`` constructor's own check) fails here instead of in every episode. ``where`` names the setting in the message
    (``--env-kwargs``, ``envs[0].env_kwargs``).
    """
    if not isinstance(options, dict):
        raise ValueError(f"{where} must be a JSON/YAML object of constructor options, got {options!r}")
    label = getattr(env_cls, "name", "") or env_cls.__name__
    try:
        params = inspect.signature(env_cls).parameters
    except (TypeError, ValueError):  # no signature to read: let the constructor judge
        params = None
    if params is not None and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        accepted = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        for key in options:
            if key not in accepted:
                close = difflib.get_close_matches(str(key), accepted, n=1, cutoff=0.5)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"{where}: environment {label!r} takes no option {key!r}.{hint} "
                                 f"Its options: {', '.join(accepted) or 'none'}.")
        missing = [n for n in accepted if params[n].default is inspect.Parameter.empty and n not in options]
        if missing:
            raise ValueError(f"{where}: environment {label!r} needs the option {missing[0]!r}; add it")
    if options:  # the values: only the constructor knows what it accepts
        try:
            probe = env_cls(**options)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        probe.close()
