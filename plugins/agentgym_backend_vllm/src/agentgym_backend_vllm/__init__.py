"""agentgym rollout backend on vLLM: an in-process step engine, or `vllm serve` replicas over HTTP."""

from agentgym_core.plugins import lazy_exports

__all__ = [
    "AgentgymWorkerExtension",
    "EngineBatch",
    "VllmBackendConfig",
    "VllmEngineBackend",
    "VllmServerBackend",
    "make_backend",
    "weight_buckets",
]

# Loaded on first use, so that importing the plugin module (for `agentgym plugins`, or a server of
# another env) does not import this package's dependencies.
lazy_exports(__name__, {
    "AgentgymWorkerExtension": "agentgym_backend_vllm.weights",
    "EngineBatch": "agentgym_backend_vllm.engine",
    "VllmBackendConfig": "agentgym_backend_vllm.config",
    "VllmEngineBackend": "agentgym_backend_vllm.engine",
    "VllmServerBackend": "agentgym_backend_vllm.server",
    "make_backend": "agentgym_backend_vllm.backend",
    "weight_buckets": "agentgym_backend_vllm.weights",
})
