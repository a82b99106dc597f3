"""The model server room: a local model over the OpenAI-compatible HTTP API (``agentgym serve-model``).

``app`` holds the chat/completions routes and the generation queue, ``tokens`` the token-in/token-out
and control routes in vLLM's wire format, ``errors`` the OpenAI-shaped error both answer with.
"""

from agentgym_core.plugins import lazy_exports

__all__ = ["GenerationQueue", "ModelServerConfig", "OpenAIError", "create_model_app"]

lazy_exports(__name__, {
    "GenerationQueue": "agentgym_core.model_server.app",
    "ModelServerConfig": "agentgym_core.model_server.app",
    "OpenAIError": "agentgym_core.model_server.errors",
    "create_model_app": "agentgym_core.model_server.app",
})
