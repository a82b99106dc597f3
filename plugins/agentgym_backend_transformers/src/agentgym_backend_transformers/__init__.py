"""agentgym rollout backend on Hugging Face transformers."""

from agentgym_backend_transformers.backend import TransformersBackend, make_backend, pick_device
from agentgym_backend_transformers.config import TransformersBackendConfig

__all__ = ["TransformersBackend", "TransformersBackendConfig", "make_backend", "pick_device"]
