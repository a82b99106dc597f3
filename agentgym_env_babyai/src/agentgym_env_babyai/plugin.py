"""The babyai plugin: registers :class:`BabyAIEnv` under the name ``babyai``."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.hookspecs import Register


@hookimpl
def agentgym_register_envs(register: Register) -> None:
    # Imported here so listing plugins does not pay for importing minigrid.
    from agentgym_env_babyai.env import BabyAIEnv

    register(
        "babyai",
        BabyAIEnv,
        summary="BabyAI grid worlds (minigrid), 40 levels, AgentGym text and macro actions",
    )
