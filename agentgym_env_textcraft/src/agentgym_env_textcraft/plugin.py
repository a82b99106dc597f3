"""The `textcraft` plugin: registers :class:`TextCraftEnv` with agentgym."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.hookspecs import Register
from agentgym_env_textcraft.env import TextCraftEnv


@hookimpl
def agentgym_register_envs(register: Register) -> None:
    register(
        "textcraft",
        TextCraftEnv,
        summary="Minecraft crafting from listed recipes (goal depth 1-4); AgentGym's TextCraft.",
    )
