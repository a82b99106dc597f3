"""The agentgym plugin: registers the ``search`` environment (entry point ``search``)."""

from __future__ import annotations

from agentgym_core import hookimpl


@hookimpl
def agentgym_register_envs(register) -> None:  # type: ignore[no-untyped-def]
    register("search", "agentgym_env_search.env:SearchEnv",
             summary="Search-R1-style retrieval QA (Deep Search): <search>, <information>, <answer>; EM reward.")
