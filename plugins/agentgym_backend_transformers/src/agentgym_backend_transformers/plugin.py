"""Registers the ``transformers`` rollout backend."""

from __future__ import annotations

from agentgym_core import hookimpl


@hookimpl
def agentgym_register_rollout_backends(register) -> None:
    # factory: checks the model path before torch is imported, and declares the capabilities without it
    register("transformers", "agentgym_backend_transformers.factory:make_backend",
             capabilities="agentgym_backend_transformers.factory:CAPABILITIES",
             summary="Hugging Face transformers: batched KV-cache sampling, CPU or CUDA")
