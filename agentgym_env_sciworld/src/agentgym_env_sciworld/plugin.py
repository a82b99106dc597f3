"""Registers the `sciworld` environment with agentgym (entry point `sciworld`)."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_env_sciworld.env import SciWorldEnv


@hookimpl
def agentgym_register_envs(register) -> None:  # type: ignore[no-untyped-def]
    register(
        "sciworld",
        SciWorldEnv,
        summary="ScienceWorld science experiments (23 task families, 4,639 variations; Java engine)",
    )
