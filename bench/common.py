"""Helpers the rollout-side benchmark scripts share (run them as ``python bench/NAME.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from agentgym_backend_transformers import TransformersBackend, make_backend


def load_backend(model: str, *, threads: int | None, device: str = "auto", **options: Any) -> TransformersBackend:
    """The transformers backend for ``model`` ('tiny': a random tiny Llama), torch threads set first."""
    if threads:
        torch.set_num_threads(threads)
    if model == "tiny":
        from agentgym_core.testing.tiny_model import tiny_chat_model

        return TransformersBackend(*tiny_chat_model(), **options)
    return make_backend({"model": model, "threads": threads, "device": device, **options})


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON (folders created); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    return out


def save_random_qwen2(out: str | Path, shape: dict[str, Any], *, tokenizer_dir: str | None = None,
                      device: str = "cpu", dtype: torch.dtype = torch.float32) -> dict[str, int]:
    """Save a randomly initialised (seed 0) Qwen2-architecture model of ``shape`` with a tokenizer to ``out``
    (for GPU machines and studies with no model hub): the vocabulary is the tokenizer's, ``tokenizer_dir``
    or the embedded default model's. Returns its ``parameters`` and ``vocab_size``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    from agentgym_core.models import load_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir) if tokenizer_dir else load_tokenizer("smollm2-135m-instruct")
    config = Qwen2Config(**shape, vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it will run: a 1.5B model initialises slowly on a CPU
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"parameters": sum(p.numel() for p in model.parameters()), "vocab_size": config.vocab_size}
