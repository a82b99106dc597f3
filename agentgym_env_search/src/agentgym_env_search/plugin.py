"""The agentgym plugin: registers the ``search`` environment (entry point ``search``)."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_env_search.env import SearchEnv


@hookimpl
def agentgym_register_envs(register) -> None:  # type: ignore[no-untyped-def]
    register("search", SearchEnv,
             summary="Search-R1-style retrieval QA (Deep Search): <search>, <information>, <answer>; EM reward.")
