"""The `textarena` plugin: registers :class:`TextArenaEnv` with agentgym."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.hookspecs import Register


@hookimpl
def agentgym_register_envs(register: Register) -> None:
    from agentgym_env_textarena.env import TextArenaEnv

    register(
        "textarena",
        TextArenaEnv,
        summary="TextArena's games: 22 offline single-player games by default; any id, variants and two-player "
        "games against a frozen partner, with games=[...].",
    )
