"""Registers the ``vllm`` rollout backend."""

from __future__ import annotations

from agentgym_core import hookimpl


@hookimpl
def agentgym_register_rollout_backends(register) -> None:
    register("vllm", "agentgym_backend_vllm.backend:make_backend",
             capabilities="agentgym_backend_vllm.config:CAPABILITIES", options="agentgym_backend_vllm.config:VllmBackendConfig",
             summary="vLLM: in-process step engine (GPU) or `vllm serve` replicas over HTTP; weights loaded in place")
