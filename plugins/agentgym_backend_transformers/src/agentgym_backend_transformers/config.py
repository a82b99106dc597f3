"""Typed configuration of the transformers rollout backend."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentgym_core.rollout.backend import BackendCapabilities

__all__ = ["CAPABILITIES", "TransformersBackendConfig"]

CAPABILITIES = BackendCapabilities(  # what the trainer may rely on (declared where the plugin registers it)
    shares_trainer_module=True, sessions=True, continuous_batching=True, weight_sync="shared_module",
    lora_adapters=True, constrain_actions=True)  # constrained actions: the own decode engine (decoding.py)


class TransformersBackendConfig(BaseModel):
    """How to load and run the policy model for rollouts."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        default="smollm2-135m-instruct",
        description="Named model, path to a .gguf file, or a Hugging Face model directory.",
    )
    device: str = Field(default="auto", description="'auto' (CUDA when present, else CPU), 'cpu', 'cuda', 'cuda:1'.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto", description="Weights dtype; 'auto' = float32 on CPU, bfloat16 on CUDA. A module the trainer "
        "lends in another dtype is sampled from a copy in this one, refreshed after each update."
    )
    max_batch_size: int = Field(
        default=64, ge=1, description="Most prompts sampled together in one forward pass; larger calls are chunked."
    )
    session_cache_mb: float = Field(
        default=1024.0, ge=0.0,
        description="Memory budget for KV caches kept between a trajectory's turns (least recently used are "
        "dropped beyond it, then re-read in full); 0 turns reuse off.",
    )
    share_prefixes: bool = Field(
        default=True,
        description="Read a prompt prefix that several trajectories start with (the instruction, a GRPO group's "
        "first prompt) once per rollout and reuse its KV cache; false reads every prompt in full.",
    )
    prefill: Literal["auto", "batched", "per_row"] = Field(
        default="auto",
        description="How prompts joining the batch together are read: 'per_row' runs each alone (no padding "
        "computed; faster on a CPU, where cost follows tokens), 'batched' in one padded forward pass; "
        "'auto' = per_row on CPU, batched on CUDA.",
    )
    prefill_chunk_tokens: int = Field(
        default=16384, ge=1,
        description="'batched' prefill: the most padded columns (rows x (widest cached prefix + widest new "
        "suffix)) one forward pass reads; prompts joining together are read in groups under it, a wider one "
        "alone. Bounds a pass's activations and copies when many long prompts join at once.",
    )
    kv_cache_dtype: Literal["model", "float32", "bfloat16", "float16"] = Field(
        default="model",
        description="dtype the KV caches (the decode batch's, kept sessions, shared prefixes) are stored in; "
        "'model' = the weights' dtype. 'bfloat16' beside float32 weights halves their memory (most of a CPU "
        "rollout's); attention then reads them in bfloat16 (sdpa attention only). Sampled log-probs move by "
        "about what bf16 autocast moves the learner's.",
    )
    decode_engine: Literal["auto", "own", "library"] = Field(
        default="auto",
        description="Who runs the decode batch: 'own' (this package's engine), 'library' (transformers' continuous "
        "batching: paged KV cache, CUDA graphs; needs transformers>=5.24), 'auto' = own until a GPU run says otherwise.",
    )
    threads: int | None = Field(default=None, ge=1, description="torch CPU threads (None: torch's default).")
