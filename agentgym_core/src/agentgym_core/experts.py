"""What an expert policy is, for the environments that offer one (the spec only; no torch here).

An expert is a function ``play(env, task_id) -> Any`` that plays one episode of ``env`` only
through ``env.reset`` / ``env.step`` (so it works in-process and over
:class:`agentgym_core.http.client.HTTPEnv`); what it returns is ignored, because every step is recorded
on the way (:mod:`agentgym_core.finetune.experts` turns the recording into a trajectory).

An environment package offers one through the ``agentgym_register_experts`` hook, keyed by the
environment's registered name::

    @hookimpl
    def agentgym_register_experts(register):
        register("myenv", ExpertSpec(play=solve), summary="breadth-first search over the map")

``agentgym collect --policy expert`` and a recipe's ``warm_start.expert`` then use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ExpertSpec", "NoExpertError", "lazy_player"]


class NoExpertError(LookupError):
    """The environment has no expert policy; the message says how to give it one."""

    def __str__(self) -> str:  # LookupError would repr() the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class ExpertSpec:
    """How to play an environment expertly: the player, and constructor options it needs."""

    play: Callable[[Any, int], Any]
    """``play(env, task_id)``: one episode through ``env.reset``/``env.step``."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor options the expert needs from the environment (e.g. a gold path)."""
    thought: Callable[[Any, str], str] | None = None
    """``thought(reset_result, action)``: the thought written before ``action``; None: ``I will <action>.``"""


def lazy_player(module: str, attribute: str) -> Callable[[Any, int], Any]:
    """A player imported on first use, so registering an expert costs no import of its solver (and the
    player pickles by name, so collection can send it to worker processes)."""
    return _LazyPlayer(module, attribute)


@dataclass(frozen=True)
class _LazyPlayer:
    module: str
    attribute: str

    def __call__(self, env: Any, task_id: int) -> Any:
        return getattr(importlib.import_module(self.module), self.attribute)(env, task_id)

    def __repr__(self) -> str:
        return f"lazy_player({self.module}.{self.attribute})"
