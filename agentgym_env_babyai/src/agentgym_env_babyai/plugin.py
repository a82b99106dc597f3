"""The babyai plugin: registers :class:`BabyAIEnv` under the name ``babyai``."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.env import ResetResult
from agentgym_core.experts import ExpertSpec, lazy_player
from agentgym_core.hookspecs import Register

__all__ = ["mission_thought"]


@hookimpl
def agentgym_register_envs(register: Register) -> None:
    register(
        "babyai",
        "agentgym_env_babyai.env:BabyAIEnv",  # by reference: minigrid is imported when the env is used
        summary="BabyAI grid worlds (minigrid), 40 levels, AgentGym text and macro actions",
    )


@hookimpl
def agentgym_register_experts(register: Register) -> None:
    register(
        "babyai",
        ExpertSpec(play=lazy_player("agentgym_env_babyai.expert", "play_with_lookahead"), thought=mission_thought),
        summary="minigrid's BabyAIBot through text actions, taking any one action that completes the mission at once",
    )


def mission_thought(reset: ResetResult, action: str) -> str:
    """The expert's thought: restate the mission before every action.

    A small model then reads the goal right where it picks the object to act on (SFT on bare
    ``I will <action>`` thoughts taught SmolLM2-135M the format but not to follow the mission: it
    went to the first object listed).
    """
    mission = reset.info.get("mission")
    return f"My goal is to {mission}. I will {action}." if mission else f"I will {action}."
