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
