"""agentgym rollout backend on vLLM: an in-process step engine, or `vllm serve` replicas over HTTP."""

from agentgym_backend_vllm.backend import make_backend
from agentgym_backend_vllm.config import VllmBackendConfig
from agentgym_backend_vllm.engine import EngineBatch, VllmEngineBackend
from agentgym_backend_vllm.server import VllmServerBackend
from agentgym_backend_vllm.weights import AgentgymWorkerExtension, weight_buckets

__all__ = [
    "AgentgymWorkerExtension",
    "EngineBatch",
    "VllmBackendConfig",
    "VllmEngineBackend",
    "VllmServerBackend",
    "make_backend",
    "weight_buckets",
]
