"""The `gem` plugin: registers :class:`GemEnv` with agentgym."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.hookspecs import Register


@hookimpl
def agentgym_register_envs(register: Register) -> None:
    from agentgym_env_gem.env import GemEnv

    register("gem", GemEnv, summary="GEM's offline games and reasoning-gym tasks through gem.make (120 ids), with GEM's tools on request.")
