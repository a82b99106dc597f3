"""agentgym rollout backend for OpenAI-compatible chat APIs (evaluation of API models)."""

from agentgym_core.plugins import lazy_exports

__all__ = ["OpenAIBackendConfig", "OpenAIChatBackend", "make_backend"]

# Loaded on first use, so that importing the plugin module (for `agentgym plugins`, or a server of
# another env) does not import this package's dependencies.
lazy_exports(__name__, {
    "OpenAIBackendConfig": "agentgym_backend_openai.config",
    "OpenAIChatBackend": "agentgym_backend_openai.backend",
    "make_backend": "agentgym_backend_openai.backend",
})
