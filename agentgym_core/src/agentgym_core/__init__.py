"""agentgym core: the plugin system, the environment interface and protocol, and the RL loop.

The rooms: ``env`` (the interface), ``hookspecs`` + ``plugins`` (the extension API and its manager),
``http`` (env server, client, pool), ``rollout``, ``rl``, ``finetune``, ``training`` (what rl and
finetune share), ``evaluation``, ``model_server``, ``viewer``, ``testing`` (conformance checkers) and
``commands`` + ``cli`` (the ``agentgym`` command).
"""

import importlib
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

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

# Modules that moved into a room keep their old import path: ``import agentgym_core.client`` gives
# the very module ``agentgym_core.http.client`` (same object, so isinstance and monkeypatch agree).
# New code imports from the new place; these names stay so that existing imports keep working.
_MOVED = {
    "agentgym_core.asgi_body": "agentgym_core.http.asgi_body",
    "agentgym_core.auth": "agentgym_core.http.auth",
    "agentgym_core.client": "agentgym_core.http.client",
    "agentgym_core.compat": "agentgym_core.http.compat",
    "agentgym_core.compat_spec": "agentgym_core.http.compat_spec",
    "agentgym_core.direct_routes": "agentgym_core.http.direct_routes",
    "agentgym_core.env_pool": "agentgym_core.http.pool",
    "agentgym_core.http_errors": "agentgym_core.http.errors",
    "agentgym_core.instances": "agentgym_core.http.instances",
    "agentgym_core.protocol": "agentgym_core.http.protocol",
    "agentgym_core.server": "agentgym_core.http.server",
    "agentgym_core.serving": "agentgym_core.http.serving",
    "agentgym_core.workers": "agentgym_core.http.workers",
    "agentgym_core.model_server_errors": "agentgym_core.model_server.errors",
    "agentgym_core.model_server_tokens": "agentgym_core.model_server.tokens",
    "agentgym_core.memory": "agentgym_core.training.memory",
    "agentgym_core.paired": "agentgym_core.evaluation.paired",
    "agentgym_core.rl.activation_checkpointing": "agentgym_core.training.activation_checkpointing",
    "agentgym_core.rl.checkpoint": "agentgym_core.training.checkpoint",
    "agentgym_core.rl.optimizer_on_disk": "agentgym_core.training.optimizer_on_disk",
    "agentgym_core.rl.tracking": "agentgym_core.training.tracking",
}


class _MovedModules:
    """Import hook (finder and loader) that answers an old module path with the moved module."""

    @staticmethod
    def find_spec(fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        return ModuleSpec(fullname, _MovedModules) if fullname in _MOVED else None

    @staticmethod
    def create_module(spec: ModuleSpec) -> ModuleType:
        return importlib.import_module(_MOVED[spec.name])

    @staticmethod
    def exec_module(module: ModuleType) -> None:
        """The moved module ran when it was imported under its own name."""


if _MovedModules not in sys.meta_path:
    sys.meta_path.append(_MovedModules)

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
