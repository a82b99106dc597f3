"""Registers the ``transformers`` rollout backend."""

from __future__ import annotations

from agentgym_core import hookimpl


@hookimpl
def agentgym_register_rollout_backends(register) -> None:
    # factory: checks the model path before torch is imported; config: the declarations, importable without torch
    register("transformers", "agentgym_backend_transformers.factory:make_backend",
             capabilities="agentgym_backend_transformers.config:CAPABILITIES",
             options="agentgym_backend_transformers.config:TransformersBackendConfig",
             summary="Hugging Face transformers: batched KV-cache sampling, CPU or CUDA")
