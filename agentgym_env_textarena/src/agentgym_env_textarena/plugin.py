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
        summary="TextArena's 22 offline single-player games (Sokoban, Sudoku, 2048, ...), a family per game.",
    )
