"""The `reasoning_gym` plugin: registers :class:`ReasoningGymEnv` and its gold-answer expert with agentgym."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.experts import ExpertSpec, lazy_player
from agentgym_core.hookspecs import Register


@hookimpl
def agentgym_register_envs(register: Register) -> None:
    from agentgym_env_reasoning_gym.env import ReasoningGymEnv

    register(
        "reasoning_gym",
        ReasoningGymEnv,
        summary="reasoning-gym's 98 offline generators, 1-3 curriculum levels each, scored by their own scorers; "
        "any dataset with its config, size and seed via datasets=[...].",
    )


@hookimpl
def agentgym_register_experts(register: Register) -> None:
    register(
        "reasoning_gym",
        ExpertSpec(play=lazy_player("agentgym_env_reasoning_gym.expert", "play_gold_answer")),
        summary="the generator's own answer",
    )
