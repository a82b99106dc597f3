"""The policy a run trains: loaded from ``model.path`` (or built on the meta device for a rank that
receives its shards), with LoRA adapters and activation checkpointing as the recipe says, on the device
the recipe names, in a process set up by the recipe's ``runtime`` section."""

from __future__ import annotations

from typing import Any

import torch

from agentgym_core.rl.config import ModelConfig, RuntimeConfig
from agentgym_core.training.activation_checkpointing import checkpoint_only_above
from agentgym_core.training.lean_activations import keep_fewer_activations
from agentgym_core.training.memory import limit_onednn_primitive_cache

__all__ = ["apply_runtime", "load_policy", "load_policy_for_ranks", "resolve_device", "wrap_lora"]


def resolve_device(device: str) -> torch.device:
    """``model.device`` as a torch device: ``auto`` is CUDA when present, else the CPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


def apply_runtime(runtime: RuntimeConfig) -> None:
    """This process's share of the recipe's ``runtime``: torch threads and oneDNN's kernel cache."""
    if runtime.threads:
        torch.set_num_threads(runtime.threads)
    if runtime.onednn_primitive_cache is not None:  # before this process's first oneDNN kernel
        limit_onednn_primitive_cache(runtime.onednn_primitive_cache)


def load_policy(config: ModelConfig, device: str | torch.device | None = None, *,
                runtime: RuntimeConfig | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from ``config.path`` on ``device`` (default ``config.device``); with LoRA
    enabled, wrapped with fresh peft adapters. On the ``meta`` device: the model's structure only,
    no weights read (a learner rank that receives its shards from rank 0). ``runtime``, when given,
    is applied to this process first (:func:`apply_runtime`)."""
    from agentgym_core.models import load_pretrained

    if runtime is not None:
        apply_runtime(runtime)
    where = resolve_device(config.device) if device is None else torch.device(device)
    if where.type == "meta":
        model, tokenizer = _model_structure(config)
    else:
        model, tokenizer = load_pretrained(config.path, device=str(where), dtype=config.dtype)
    if config.gradient_checkpointing:  # transformers 5 renamed it; 4.x has only the old name
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    if config.lean_activations:  # the same numbers, less kept for backward in training forwards
        keep_fewer_activations(model)
    if config.lora.enabled:
        model = wrap_lora(model, config)
    if config.gradient_checkpointing_above_tokens is not None:
        checkpoint_only_above(model, config.gradient_checkpointing_above_tokens)
    model.eval()
    return model, tokenizer


def load_policy_for_ranks(config: ModelConfig, device: torch.device, *, rank: int, world_size: int,
                          runtime: RuntimeConfig | None = None) -> tuple[Any, Any]:
    """The policy as a learner rank builds it before FSDP2 shards it, without a full copy per GPU.

    One process: :func:`load_policy` on ``device``. Several ranks: rank 0 reads the weights into host
    memory, every other rank builds the structure on the ``meta`` device (nothing allocated); once
    sharded, the learner moves each rank's shards to ``device`` and rank 0 broadcasts the weights
    tensor by tensor (:meth:`agentgym_core.rl.learner.Learner`). Both in the dtype ``device`` gets.
    """
    if world_size <= 1:
        return load_policy(config, device=device, runtime=runtime)
    if config.dtype == "auto":  # what load_pretrained picks on the training device, not on the host
        config = config.model_copy(update={"dtype": "bfloat16" if device.type == "cuda" else "float32"})
    return load_policy(config, device="cpu" if rank == 0 else "meta", runtime=runtime)


def _model_structure(config: ModelConfig) -> tuple[Any, Any]:
    """(model on the meta device, tokenizer) for ``config.path``: its config read, no weight loaded."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from agentgym_core.models import _load_kwargs, load_tokenizer, resolve_model, with_cached_copy

    resolved = with_cached_copy(resolve_model(config.path))  # a GGUF file's converted copy, if saved
    dtype = torch.float32 if config.dtype == "auto" else getattr(torch, config.dtype)
    model_config = AutoConfig.from_pretrained(resolved.directory, **_load_kwargs(resolved))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config, dtype=dtype)
    return model, load_tokenizer(resolved)


def wrap_lora(model: Any, config: ModelConfig) -> Any:
    """Wrap ``model`` with trainable LoRA adapters."""
    try:
        import peft
    except ImportError as exc:
        raise RuntimeError("model.lora.enabled needs peft: pip install peft") from exc
    lora = config.lora
    return peft.get_peft_model(model, peft.LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.target_modules,
        task_type="CAUSAL_LM"))
