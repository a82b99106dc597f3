"""The `textworld` plugin: registers :class:`TextWorldEnv` and its walkthrough expert with agentgym."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.experts import ExpertSpec, lazy_player
from agentgym_core.hookspecs import Register


@hookimpl
def agentgym_register_envs(register: Register) -> None:
    from agentgym_env_textworld.env import TextWorldEnv

    register(
        "textworld",
        TextWorldEnv,
        summary="TextWorld text adventures generated per task at first use (quests of 1-4 steps); challenge "
        "families, your own game files and progress rewards on request.",
    )


@hookimpl
def agentgym_register_experts(register: Register) -> None:
    register(
        "textworld",
        ExpertSpec(
            play=lazy_player("agentgym_env_textworld.expert", "play_walkthrough"),
            env_kwargs={"include_walkthrough": True},
        ),
        summary="the game's own walkthrough (needs include_walkthrough=True on a server)",
    )
