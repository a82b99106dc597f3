"""Fixtures of the vLLM backend tests: a tiny model saved as a Hugging Face directory, and the fake vllm."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # the machine is shared; tiny matmuls only lose to thread hand-offs


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny random chat model and its tokenizer, saved where vLLM (or its fake) loads models from."""
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def fake_vllm(monkeypatch):
    """The contract fake installed as ``vllm`` for this test only."""
    import fake_vllm as fake

    return fake.install(monkeypatch)


@pytest.fixture
def stand_in(tiny_model_dir):
    """Factory of serve-model apps over the transformers backend, as `agentgym serve-model DIR` builds them:
    the CPU stand-in for a `vllm serve` replica. Returns ``(app, the app's local backend)``."""
    pytest.importorskip("agentgym_backend_transformers")

    def build(name: str = "tiny"):
        from agentgym_backend_transformers import TransformersBackend
        from agentgym_core.model_server import create_model_app
        from agentgym_core.models import load_pretrained

        model, tokenizer = load_pretrained(str(tiny_model_dir))
        local = TransformersBackend(model, tokenizer, session_cache_mb=0)
        return create_model_app(local, {"model_name": name, "max_context_tokens": 512}), local

    return build
