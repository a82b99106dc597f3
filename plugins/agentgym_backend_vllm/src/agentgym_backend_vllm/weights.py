"""Weights in place: the state dict in buckets, and the worker-side code that loads them.

The trainer hands ``load_weights`` its full state dict after every update. Sending it in buckets
of about ``weight_bucket_mb`` keeps the transfer from holding a second whole copy of the model at
once. On the vLLM side each bucket reaches every worker through ``collective_rpc``; the worker
extension below hands it to the model's own ``load_weights``, which maps checkpoint names
(``model.layers.0.self_attn.q_proj.weight``) onto vLLM's fused parameters (``qkv_proj``) itself.

``AgentgymWorkerExtension`` is named to vLLM by path: ``worker_extension_cls=
"agentgym_backend_vllm.AgentgymWorkerExtension"`` (engine mode sets it; for ``vllm serve`` pass
``--worker-extension-cls``). vLLM mixes it into its worker class, so ``self.model_runner`` and
``self.device`` are the worker's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["AgentgymWorkerExtension", "LOAD_FILE_METHOD", "LOAD_METHOD", "weight_buckets"]

LOAD_METHOD = "agentgym_load_weights"
"""collective_rpc method: load a list of ``(name, tensor)`` pairs (engine mode)."""

LOAD_FILE_METHOD = "agentgym_load_weights_file"
"""collective_rpc method: load a safetensors file by path (server mode: the dev route takes strings only)."""


def weight_buckets(state_dict: Mapping[str, Any], bucket_bytes: int) -> Iterator[list[tuple[str, Any]]]:
    """Consecutive ``(name, tensor)`` lists of at most ``bucket_bytes`` each (a larger tensor goes alone)."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    bucket: list[tuple[str, Any]] = []
    size = 0
    for name, tensor in state_dict.items():
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor.detach()))
        size += nbytes
    if bucket:
        yield bucket


class AgentgymWorkerExtension:
    """Mixed into vLLM's worker: loads agentgym's weight buckets into the running model."""

    model_runner: Any
    device: Any

    def agentgym_load_weights(self, weights: list[tuple[str, Any]]) -> int:
        """Load ``(name, tensor)`` pairs with the model's ``load_weights``; returns how many were given."""
        weights = [(name, tensor.to(self.device, non_blocking=True)) for name, tensor in weights]
        self.model_runner.model.load_weights(weights=weights)
        return len(weights)

    def agentgym_load_weights_file(self, path: str) -> int:
        """Load a safetensors file written by the server-mode backend; returns how many tensors it held."""
        from safetensors.torch import load_file

        return self.agentgym_load_weights(list(load_file(path, device="cpu").items()))
