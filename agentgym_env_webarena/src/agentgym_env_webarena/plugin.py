"""Entry point of the `agentgym` plugin group: registers the WebArena environments."""

from __future__ import annotations

from agentgym_core import hookimpl


@hookimpl
def agentgym_register_envs(register) -> None:  # noqa: ANN001 - the core's Register protocol
    register("webarena", "agentgym_env_webarena.env:WebArenaEnv", summary="WebArena's 812 tasks in a real Chromium (sites from SHOPPING, ... env vars)")
    register(
        "webarena_local",
        "agentgym_env_webarena.local:LocalWebArenaEnv",
        summary="WebArena environment on the bundled local shop and forum (no Docker needed)",
    )
