"""Shared fixtures: a tiny random chat model served over the OpenAI API on loopback (in-process)."""

from __future__ import annotations

import socket

import pytest
from openai_test_support import SERVED_NAME

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


@pytest.fixture(scope="session")
def api_url(tiny_backend):
    """Base URL (ending in /v1) of `serve-model`'s app serving the tiny model as 'tiny-chat'."""
    from agentgym_core.model_server import create_model_app
    from agentgym_core.testing import serve_app

    app = create_model_app(tiny_backend, {"model_name": SERVED_NAME, "max_context_tokens": 4096})
    with serve_app(app) as url:
        yield f"{url}/v1"


@pytest.fixture()
def dead_url():
    """A loopback URL that refuses connections: its port is bound by this test and never listened on, so no
    other process can take it while the test runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
