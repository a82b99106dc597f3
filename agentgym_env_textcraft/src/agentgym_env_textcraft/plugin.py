"""The `textcraft` plugin: registers :class:`TextCraftEnv` with agentgym."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.experts import ExpertSpec, lazy_player
from agentgym_core.hookspecs import Register


@hookimpl
def agentgym_register_envs(register: Register) -> None:
    register(
        "textcraft",
        "agentgym_env_textcraft.env:TextCraftEnv",
        summary="Minecraft crafting from listed recipes (goal depth 1-4); AgentGym's TextCraft.",
    )


@hookimpl
def agentgym_register_experts(register: Register) -> None:
    register("textcraft", ExpertSpec(play=lazy_player("agentgym_env_textcraft.expert", "solve")),
             summary="recipe planner reading only the observation (agentgym_env_textcraft.expert)")
