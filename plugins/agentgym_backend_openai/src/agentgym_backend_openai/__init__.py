"""agentgym rollout backend for OpenAI-compatible chat APIs (evaluation of API models)."""

from agentgym_backend_openai.backend import OpenAIChatBackend, make_backend
from agentgym_backend_openai.config import OpenAIBackendConfig

__all__ = ["OpenAIBackendConfig", "OpenAIChatBackend", "make_backend"]
