"""The `openai` backend against a real OpenAI-compatible server (serve-model's app, tiny model)."""

from __future__ import annotations

import time

import pytest
import requests
from openai_test_support import SERVED_NAME

from agentgym_backend_openai import OpenAIBackendConfig, OpenAIChatBackend, make_backend
from agentgym_backend_openai.backend import normalize_base_url
from agentgym_core.rollout import SamplingParams
from agentgym_core.rollout.text_engine import ChatBackend, ChatBackendError, is_chat_backend

MESSAGES = [{"role": "system", "content": "Guess numbers."}, {"role": "user", "content": "Guess between 1 and 20."}]


def test_registered_through_the_plugin_hook():
    from agentgym_core.plugins import PluginManager

    factory = PluginManager(autoload=True, allow=["openai"]).get("rollout_backend", "openai")
    backend = factory({"model": "m", "base_url": "http://127.0.0.1:1"})
    assert isinstance(backend, ChatBackend) and is_chat_backend(backend)
    with pytest.raises(ValueError, match="device"):  # a local-model option is reported, not ignored
        factory({"model": "m", "device": "cuda"})


@pytest.mark.parametrize(("given", "expected"), [
    ("http://127.0.0.1:8001", "http://127.0.0.1:8001/v1"),
    ("http://127.0.0.1:8001/", "http://127.0.0.1:8001/v1"),
    ("http://127.0.0.1:8001/v1/", "http://127.0.0.1:8001/v1"),
    ("https://api.example.com/openai/v1", "https://api.example.com/openai/v1"),
])
def test_base_url_normalisation(given, expected):
    assert normalize_base_url(given) == expected


def test_base_url_without_scheme_is_refused():
    with pytest.raises(ValueError, match="http://HOST:PORT/v1"):
        normalize_base_url("127.0.0.1:8001")


def test_greedy_reply_equals_the_servers_answer(api_url):
    backend = make_backend({"model": SERVED_NAME, "base_url": api_url})
    backend.preflight()
    reply = backend.chat(MESSAGES, SamplingParams(temperature=0.0, max_new_tokens=12))
    raw = requests.post(f"{api_url}/chat/completions", json={
        "model": SERVED_NAME, "messages": MESSAGES, "temperature": 0, "max_tokens": 12}, timeout=60).json()
    assert reply.text == raw["choices"][0]["message"]["content"]
    assert reply.prompt_tokens == raw["usage"]["prompt_tokens"] > 10
    assert 1 <= reply.completion_tokens <= 12
    assert reply.finish_reason == ("length" if raw["choices"][0]["finish_reason"] == "length" else "eos")


def test_seed_and_max_tokens_reach_the_server(api_url):
    backend = make_backend({"model": SERVED_NAME, "base_url": api_url})
    params = SamplingParams(temperature=1.0, max_new_tokens=5, seed=123)
    first, again = backend.chat(MESSAGES, params), backend.chat(MESSAGES, params)
    other = backend.chat(MESSAGES, params.model_copy(update={"seed": 124}))
    assert first.text == again.text and first.completion_tokens <= 5
    assert other.text != first.text  # fixed seeds: deterministic, and these two differ


def test_unknown_model_fails_fast_with_the_served_names(api_url):
    backend = make_backend({"model": "gpt-nonexistent", "base_url": api_url})
    with pytest.raises(ChatBackendError, match=r"does not serve model 'gpt-nonexistent'.*tiny-chat"):
        backend.preflight()
    with pytest.raises(ChatBackendError, match="404.*model_not_found|404.*does not exist"):
        backend.chat(MESSAGES, SamplingParams(max_new_tokens=4))


def test_server_down_is_a_clear_error_after_the_retries(dead_url):
    backend = OpenAIChatBackend(OpenAIBackendConfig(model="m", base_url=dead_url, max_retries=2,
                                                    retry_backoff_s=0.05))
    backend.preflight()  # unreachable is not decided up front: every episode records it
    start = time.perf_counter()
    with pytest.raises(ChatBackendError, match=r"failed after 3 attempts: cannot connect.*is the server running"):
        backend.chat(MESSAGES, SamplingParams(max_new_tokens=4))
    assert time.perf_counter() - start >= 0.15  # 0.05 + 0.1 of back-off: it did retry


def test_api_key_from_the_environment_and_a_rejected_key(tiny_backend, monkeypatch):
    from agentgym_core.model_server import create_model_app
    from agentgym_core.testing import serve_app

    app = create_model_app(tiny_backend, {"model_name": SERVED_NAME, "api_key": "sk-test-123"})
    with serve_app(app) as url:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
        good = make_backend({"model": SERVED_NAME, "base_url": url})
        good.preflight()
        assert good.chat(MESSAGES, SamplingParams(max_new_tokens=3)).completion_tokens >= 1
        bad = make_backend({"model": SERVED_NAME, "base_url": url, "api_key": "sk-wrong"})
        with pytest.raises(ChatBackendError, match=r"401.*API key is wrong.*set OPENAI_API_KEY or pass --api-key"):
            bad.preflight()
        with pytest.raises(ChatBackendError, match="401"):
            bad.chat(MESSAGES, SamplingParams(max_new_tokens=3))
