"""Typed configuration of the vLLM rollout backend (both modes share one model)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentgym_core.rollout.backend import BackendCapabilities

__all__ = ["CAPABILITIES", "INSTALL_HINT", "LORA_RANKS", "VllmBackendConfig", "VllmLoraOptions"]

# Both modes keep their own copy of the policy (never the trainer's module) and take new weights
# through load_weights after every update; prompts join a running batch; prefix caching plays the
# part of sessions. vLLM's sleep mode keeps its own memory pool, which refuses expandable segments.
# Engine mode takes a LoRA policy's adapters alone, as vLLM LoRA requests (server mode refuses LoRA
# when the recipe loads).
CAPABILITIES = BackendCapabilities(  # declared where the plugin registers it
    shares_trainer_module=False, sessions=True, continuous_batching=True, weight_sync="load_weights",
    expandable_segments=False, lora_adapters=True)

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM's ``max_lora_rank`` takes (``MaxLoRARanks`` in ``vllm/config/lora.py``); the engine is built
with the smallest one at least the recipe's rank."""

INSTALL_HINT = ("backend 'vllm' in engine mode needs vLLM, which is not installed: from a checkout of agentgym run "
                "pip install -e './plugins/agentgym_backend_vllm[engine]' on a CUDA machine (or set "
                "backend_options.mode: server and point urls at `vllm serve` replicas)")


class VllmLoraOptions(BaseModel):
    """The LoRA adapters' shape, as the trainer hands it over from ``model.lora`` (never set by hand)."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(ge=1, description="Adapter rank.")
    alpha: int = Field(ge=1, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, description="Dropout of training (written to the adapter's config; unused in sampling).")
    target_modules: list[str] = Field(description="Names of the linear layers with adapters.")

    @property
    def max_lora_rank(self) -> int:
        """vLLM's ``max_lora_rank`` for these adapters: the smallest value it takes that is at least ``r``."""
        return next(rank for rank in LORA_RANKS if rank >= self.r)


class VllmBackendConfig(BaseModel):
    """How the policy is served by vLLM: an engine in this process, or ``vllm serve`` replicas over HTTP."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        description="Hugging Face model directory (or a named model / .gguf file agentgym knows); the trainer "
        "passes its model.path here. The tokenizer and chat template are read from it in both modes.",
    )
    mode: Literal["engine", "server"] = Field(
        default="engine",
        description="'engine': run vLLM's step-level engine in this process (needs `pip install -e "
        "'./plugins/agentgym_backend_vllm[engine]'` and a GPU). 'server': talk to `vllm serve` replicas at `urls` "
        "over HTTP "
        "(this process never imports vllm).",
    )
    gpu_sharing: Literal["colocate", "separate"] = Field(
        default="separate",
        description="'colocate': the engine shares the learner's GPU, so it sleeps when a rollout ends (freeing "
        "its memory for the update) and wakes weights, sync, then KV cache in load_weights. 'separate': the "
        "engine has its own GPU and stays awake.",
    )
    sleep_level: Literal[1, 2] = Field(
        default=1,
        description="vLLM sleep level when colocated: 1 offloads weights to CPU and drops the KV cache; 2 drops "
        "both (less host memory; every weight must then come back through load_weights).",
    )
    weight_bucket_mb: float = Field(
        default=512.0, gt=0,
        description="load_weights sends the state dict in buckets of about this size (one collective_rpc each), "
        "so a transfer never holds a second full copy of the model.",
    )
    # -- engine mode ---------------------------------------------------------------------------------
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto", description="Engine weights dtype (vLLM's --dtype)."
    )
    max_model_len: int | None = Field(
        default=None, ge=1,
        description="Prompt + reply limit of one request (vLLM's --max-model-len); None: the model's own.",
    )
    gpu_memory_utilization: float = Field(
        default=0.5, gt=0, le=1,
        description="Share of GPU memory vLLM may take for weights and KV cache; leave room for the learner "
        "when colocated.",
    )
    tensor_parallel_size: int = Field(default=1, ge=1, description="GPUs one engine spans (vLLM's -tp).")
    enable_prefix_caching: bool = Field(
        default=True, description="Reuse KV blocks of shared prompt prefixes (a trajectory's earlier turns)."
    )
    enforce_eager: bool = Field(default=False, description="Skip CUDA graph capture (faster start, slower decode).")
    logprobs_mode: Literal["processed_logprobs", "raw_logprobs"] = Field(
        default="processed_logprobs",
        description="Which log-probs vLLM returns: 'processed_logprobs' are taken after temperature (what the "
        "trainer recomputes; equal to agentgym's contract while top_p=1 and top_k=0), 'raw_logprobs' before it.",
    )
    seed: int = Field(default=0, description="Engine seed; requests with a seed use their own generator.")
    engine_in_this_process: bool = Field(
        default=True,
        description="Run vLLM's engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so weight "
        "buckets reach the worker by reference, not serialized through a socket.",
    )
    # -- server mode ---------------------------------------------------------------------------------
    urls: list[str] = Field(
        default_factory=list,
        description="Server mode: base URLs of the replicas (http://host:port), each a `vllm serve` started with "
        "VLLM_SERVER_DEV_MODE=1, --worker-extension-cls agentgym_backend_vllm.weights.AgentgymWorkerExtension and "
        "(vLLM 0.30+) --enable-scale-out, or an `agentgym serve-model` (the CPU stand-in).",
    )
    served_model_name: str | None = Field(
        default=None, description="Server mode: the `model` field sent; None sends none (the server's only model)."
    )
    weight_transport: Literal["auto", "http", "files"] = Field(
        default="auto",
        description="Server mode: how load_weights sends each bucket. 'http': its bytes in the collective_rpc "
        "request, no file; 'files': a safetensors file every replica reads (weight_dir); 'auto': http, and files "
        "from then on when a replica lacks the http method (an older worker extension).",
    )
    weight_dir: str | None = Field(
        default=None,
        description="Server mode, file transport: a directory every replica can read (shared disk); load_weights "
        "writes each bucket there as safetensors and asks the replicas to load it. None: shared memory (/dev/shm) "
        "where the machine has it, else a temporary directory (replicas on this machine only).",
    )
    timeout_s: float = Field(default=600.0, gt=0, description="Server mode: limit on one HTTP request.")
    max_concurrent_requests: int = Field(
        default=64, ge=1, description="Server mode: requests in flight at once, over all replicas."
    )

    lora: VllmLoraOptions | None = Field(
        default=None,
        description="Filled by the trainer from model.lora (leave unset): with it, engine mode builds vLLM with "
        "enable_lora and loads each update's adapters as a new LoRA request.",
    )

    @classmethod
    def missing_requirement(cls, options: Mapping[str, Any]) -> str | None:
        """Why this machine cannot start the backend with ``options`` (vLLM missing in engine mode), or None."""
        if options.get("mode", "engine") != "engine" or sys.modules.get("vllm") is not None:
            return None
        if "vllm" in sys.modules or importlib.util.find_spec("vllm") is None:  # None in sys.modules: blocked
            return INSTALL_HINT
        return None

    @model_validator(mode="after")
    def _server_needs_urls(self) -> VllmBackendConfig:
        if self.mode == "server" and not self.urls:
            raise ValueError("mode 'server' needs `urls`: the base URL of each replica, e.g. "
                             "urls: [http://127.0.0.1:8000]")
        return self

    @model_validator(mode="after")
    def _lora_in_engine_mode(self) -> VllmBackendConfig:
        if self.lora is None:
            return self
        if self.mode == "server":
            raise ValueError("model.lora.enabled with mode 'server': the vLLM backend sends LoRA adapters to its "
                             "in-process engine only. Use mode: engine, rollout.backend=transformers, or turn "
                             "model.lora off")
        if self.lora.r > LORA_RANKS[-1]:
            raise ValueError(f"model.lora.r={self.lora.r}: vLLM serves LoRA ranks up to {LORA_RANKS[-1]}; lower it")
        if self.gpu_sharing == "colocate" and self.sleep_level == 2:
            raise ValueError("sleep_level 2 with model.lora.enabled: the engine discards its base weights when it "
                             "sleeps, and a LoRA sync sends the adapters only. Use sleep_level: 1")
        return self
