"""agentgym core: the plugin system, the environment interface and protocol, and the RL loop.

The rooms: ``env`` (the interface), ``hookspecs`` + ``plugins`` (the extension API and its manager),
``http`` (env server, client, pool), ``rollout``, ``rl``, ``finetune``, ``training`` (what rl and
finetune share), ``evaluation``, ``model_server``, ``viewer``, ``testing`` (conformance checkers) and
``commands`` + ``cli`` (the ``agentgym`` command).
"""

from agentgym_core.env import (
    Env,
    EnvError,
    EpisodeEndedError,
    InvalidTaskError,
    ResetResult,
    StepResult,
    TaskCatalog,
    parse_react_action,
)
from agentgym_core.hookspecs import hookimpl
from agentgym_core.plugins import get_plugin_manager

__all__ = [
    "Env",
    "EnvError",
    "EpisodeEndedError",
    "InvalidTaskError",
    "ResetResult",
    "StepResult",
    "TaskCatalog",
    "get_plugin_manager",
    "hookimpl",
    "parse_react_action",
]
