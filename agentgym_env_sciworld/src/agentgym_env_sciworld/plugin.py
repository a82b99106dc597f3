"""Registers the `sciworld` environment with agentgym (entry point `sciworld`)."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_core.experts import ExpertSpec, lazy_player


@hookimpl
def agentgym_register_envs(register) -> None:  # type: ignore[no-untyped-def]
    register(
        "sciworld",
        "agentgym_env_sciworld.env:SciWorldEnv",
        summary="ScienceWorld science experiments (23 task families, 4,639 variations; Java engine)",
    )


@hookimpl
def agentgym_register_experts(register) -> None:  # type: ignore[no-untyped-def]
    register("sciworld", ExpertSpec(play=lazy_player("agentgym_env_sciworld.expert", "play_gold_path"),
                                    env_kwargs={"include_gold_path": True}),
             summary="ScienceWorld's gold action path (needs include_gold_path=True on a server)")
