"""The registered factory: one config, two modes (in-process engine or HTTP replicas)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentgym_backend_vllm.config import CAPABILITIES, VllmBackendConfig

__all__ = ["CAPABILITIES", "make_backend"]


def make_backend(config: VllmBackendConfig | Mapping[str, Any] | None = None) -> Any:
    """A config (or dict of its fields) -> a :class:`VllmEngineBackend` or a :class:`VllmServerBackend`.

    Engine mode imports vllm here, and without it fails with one line saying what to install;
    server mode never imports vllm.
    """
    if not isinstance(config, VllmBackendConfig):
        config = VllmBackendConfig.model_validate(dict(config or {}))
    if config.mode == "server":
        from agentgym_backend_vllm.server import VllmServerBackend

        return VllmServerBackend.from_config(config)
    from agentgym_backend_vllm.engine import VllmEngineBackend

    return VllmEngineBackend.from_config(config)

