"""Shared fixtures: a tiny random chat model behind the transformers backend."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("agentgym_backend_transformers")

# One thread: the machine is shared and tiny matmuls only lose to thread hand-offs.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_backend():
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    return TransformersBackend(model, tokenizer)
