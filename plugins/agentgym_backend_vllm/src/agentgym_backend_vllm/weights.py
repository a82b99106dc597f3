"""Weights in place: the state dict in buckets, and the worker-side code that loads them.

The trainer hands ``load_weights`` its full state dict after every update, already in the
engine's dtype (bfloat16 on a GPU: see ``agentgym_core.rl.weight_sync``); a tensor in another dtype
is cast here. Sending it in buckets of about ``weight_bucket_mb`` keeps the transfer from holding a
second whole copy of the model at once. On the vLLM side each bucket reaches every worker through ``collective_rpc``; the worker
extension below hands it to the model's own ``load_weights``, which maps checkpoint names
(``model.layers.0.self_attn.q_proj.weight``) onto vLLM's fused parameters (``qkv_proj``) itself.

One update is three calls: ``agentgym_begin_weight_update``, one ``agentgym_load_weights`` per
bucket, ``agentgym_finish_weight_update``. Begin and finish wrap the buckets in vLLM's layerwise
reload (``vllm/model_executor/model_loader/reload/layerwise.py``, vLLM 0.16 and later):
after loading, vLLM post-processes some layers' weights into a kernel format (the CPU backend
repacks every linear weight, quantized layers do the same on GPU) and drops the parameter the
checkpoint names, so a bare ``model.load_weights`` on a loaded model fails with "'Parameter' object
has no attribute 'weight_loader'" or a size mismatch. ``initialize_layerwise_reload`` restores the
checkpoint-shaped parameters with their loaders; each layer is processed again once all its
weights arrived; ``finalize_layerwise_reload`` processes what is left (attention layers). This is
the path of vLLM's own ``model_runner.reload_weights``, split so buckets can arrive one by one.

``AgentgymWorkerExtension`` is named to vLLM by path: ``worker_extension_cls=
"agentgym_backend_vllm.weights.AgentgymWorkerExtension"`` (engine mode sets it; for ``vllm serve``
pass ``--worker-extension-cls``). vLLM adds it to its worker's base classes
(``vllm/v1/worker/worker_base.py``), so ``self.model_runner`` and ``self.device`` are the worker's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "AgentgymWorkerExtension", "BEGIN_METHOD", "FINISH_METHOD", "LOAD_BYTES_METHOD", "LOAD_FILE_METHOD", "LOAD_METHOD",
    "SETUP_METHOD", "bucket_payload", "weight_buckets",
]

BEGIN_METHOD = "agentgym_begin_weight_update"
"""collective_rpc method: start one weight update (before the first bucket)."""

LOAD_METHOD = "agentgym_load_weights"
"""collective_rpc method: load a list of ``(name, tensor)`` pairs (engine mode)."""

LOAD_FILE_METHOD = "agentgym_load_weights_file"
"""collective_rpc method: load a safetensors file by path (server mode: the dev route takes strings only)."""

LOAD_BYTES_METHOD = "agentgym_load_weights_bytes"
"""collective_rpc method: load a bucket sent in the request itself, safetensors bytes in base64 (server mode's
http transport: the dev route's JSON arguments carry it, and no file is written)."""

SETUP_METHOD = "agentgym_sampling_setup"
"""collective_rpc method: the worker's device, weights dtype and the attention kernels its model's layers run."""

FINISH_METHOD = "agentgym_finish_weight_update"
"""collective_rpc method: end one weight update (after the last bucket); returns how many tensors it took."""


def weight_buckets(state_dict: Mapping[str, Any], bucket_bytes: int, *, dtype: Any = None
                   ) -> Iterator[list[tuple[str, Any]]]:
    """Consecutive ``(name, tensor)`` lists of at most ``bucket_bytes`` each (a larger tensor goes alone).

    ``dtype``: the engine's weight dtype; floating tensors in another one are cast one by one as
    their bucket fills (on their own device), so no more bytes travel than the engine keeps.
    """
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    bucket: list[tuple[str, Any]] = []
    size = 0
    for name, tensor in state_dict.items():
        if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor.detach()))
        size += nbytes
    if bucket:
        yield bucket


def bucket_payload(bucket: list[tuple[str, Any]]) -> str:
    """One bucket as the http transport sends it: safetensors bytes (CPU copies; tied weights cloned apart,
    which safetensors refuses to write twice), base64 so the JSON body of ``collective_rpc`` can carry them."""
    import base64

    from safetensors.torch import save

    return base64.b64encode(save({name: t.detach().to("cpu").contiguous().clone() for name, t in bucket})).decode()


class AgentgymWorkerExtension:
    """Mixed into vLLM's worker: loads agentgym's weight buckets into the running model."""

    model_runner: Any
    model_config: Any
    device: Any
    _agentgym_loaded: int | None = None  # tensors taken in the update now open; None when none is open

    def agentgym_begin_weight_update(self) -> None:
        """Give every layer back its checkpoint-shaped parameters so buckets can load into them."""
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        if self._agentgym_loaded is not None:
            raise RuntimeError("a weight update is already open on this worker; finish it first")
        initialize_layerwise_reload(self.model_runner.get_model())
        self._agentgym_loaded = 0

    def agentgym_load_weights(self, weights: list[tuple[str, Any]]) -> int:
        """Load ``(name, tensor)`` pairs with the model's ``load_weights``; returns how many were given."""
        if self._agentgym_loaded is None:
            raise RuntimeError(f"{LOAD_METHOD} outside a weight update: call {BEGIN_METHOD} first and "
                               f"{FINISH_METHOD} after the last bucket")
        weights = [(name, tensor.to(self.device, non_blocking=True)) for name, tensor in weights]
        self.model_runner.get_model().load_weights(weights=weights)
        self._agentgym_loaded += len(weights)
        return len(weights)

    def agentgym_load_weights_file(self, path: str) -> int:
        """Load a safetensors file written by the server-mode backend; returns how many tensors it held."""
        from safetensors.torch import load_file

        return self.agentgym_load_weights(list(load_file(path, device="cpu").items()))

    def agentgym_load_weights_bytes(self, payload: str) -> int:
        """Load a bucket the server-mode backend sent in the request (:func:`bucket_payload`); returns how many
        tensors it held."""
        import base64

        from safetensors.torch import load

        return self.agentgym_load_weights(list(load(base64.b64decode(payload)).items()))

    def agentgym_finish_weight_update(self) -> int:
        """Process the layers still waiting (attention) and close the update; returns the tensors loaded."""
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        if self._agentgym_loaded is None:
            raise RuntimeError(f"{FINISH_METHOD} without {BEGIN_METHOD}")
        finalize_layerwise_reload(self.model_runner.get_model(), self.model_config)
        loaded, self._agentgym_loaded = self._agentgym_loaded, None
        return loaded

    def agentgym_sampling_setup(self) -> dict[str, str]:
        """The worker's device, weights dtype and the attention kernel(s) vLLM chose for this model's layers: the name of
        each layer's ``attn_backend`` (``FLASH_ATTN``, ``FLASHINFER``, ``CPU_ATTN``, ...), found by walking the
        model's modules, which holds across vLLM's moves of the Attention class between modules."""
        names = sorted({module.attn_backend.get_name() for module in self.model_runner.get_model().modules()
                        if callable(getattr(getattr(module, "attn_backend", None), "get_name", None))})
        return {"device": str(self.device), "dtype": str(self.model_config.dtype).removeprefix("torch."),
                "attention_kernel": ", ".join(names) or "unknown"}
