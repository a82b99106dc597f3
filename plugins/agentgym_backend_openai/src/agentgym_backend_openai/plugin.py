"""Registers the ``openai`` rollout backend."""

from __future__ import annotations

from agentgym_core import hookimpl


@hookimpl
def agentgym_register_rollout_backends(register) -> None:
    register("openai", "agentgym_backend_openai.backend:make_backend",
             capabilities="agentgym_backend_openai.config:CAPABILITIES", options="agentgym_backend_openai.config:OpenAIBackendConfig",
             summary="any OpenAI-compatible chat API (text in, text out; evaluation only, not trainable)")
