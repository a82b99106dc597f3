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
