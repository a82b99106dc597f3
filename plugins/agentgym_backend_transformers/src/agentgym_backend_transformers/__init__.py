"""agentgym rollout backend on Hugging Face transformers."""

from agentgym_core.plugins import lazy_exports

__all__ = ["TransformersBackend", "TransformersBackendConfig", "make_backend", "pick_device"]

# Loaded on first use, so that importing the plugin module (for `agentgym plugins`, or a server of
# another env) does not import this package's dependencies.
lazy_exports(__name__, {
    "TransformersBackend": "agentgym_backend_transformers.backend",
    "TransformersBackendConfig": "agentgym_backend_transformers.config",
    "make_backend": "agentgym_backend_transformers.factory",
    "pick_device": "agentgym_backend_transformers.backend",
})
