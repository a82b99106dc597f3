"""serve-model's vLLM-style routes: token-in/token-out generation and the control routes, on loopback."""

from __future__ import annotations

import pytest
import requests

torch = pytest.importorskip("torch")
pytest.importorskip("agentgym_backend_transformers")

from agentgym_core.model_server import create_model_app  # noqa: E402
from agentgym_core.rollout import SamplingParams  # noqa: E402
from agentgym_core.testing import serve_app  # noqa: E402


@pytest.fixture(scope="module")
def backend():
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.testing.tiny_model import tiny_chat_model

    torch.set_num_threads(1)
    model, tokenizer = tiny_chat_model(seed=0)
    return TransformersBackend(model, tokenizer, session_cache_mb=0)


@pytest.fixture
def url(backend):
    with serve_app(create_model_app(backend, {"model_name": "tiny", "max_context_tokens": 64})) as base:
        yield base


def ids(backend):
    return backend.encode(backend.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True))


def generate(url, **body):
    return requests.post(f"{url}/inference/v1/generate", json=body, timeout=60)


def test_generate_returns_the_backends_tokens_and_logprobs(url, backend):
    prompt = ids(backend)
    answer = generate(url, token_ids=prompt, sampling_params={"temperature": 0, "max_tokens": 4, "logprobs": 0,
                                                               "prompt_logprobs": 0})
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    direct = backend.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=4))[0]
    assert choice["token_ids"] == direct.token_ids
    assert [c["logprob"] for c in choice["logprobs"]["content"]] == pytest.approx(direct.logprobs, abs=1e-5)
    assert choice["finish_reason"] == ("length" if direct.finish_reason == "length" else "stop")
    rows = answer.json()["prompt_logprobs"]
    assert rows[0] is None and len(rows) == len(prompt)
    scored = backend.score([prompt])[0]
    assert rows[1][str(prompt[1])]["logprob"] == pytest.approx(scored[1], abs=1e-5)


@pytest.mark.parametrize("body,needle", [
    ({"token_ids": []}, "token_ids"),
    ({"token_ids": [1], "sampling_params": {"n": 2}}, "n"),
    ({"token_ids": [1], "sampling_params": {"logprobs": 5}}, "logprobs"),
    ({"token_ids": [1], "sampling_params": {"stop_token_ids": [7]}}, "not EOS ids"),
    ({"token_ids": [1] * 64}, "context"),
    ({"token_ids": [1], "model": "other"}, "does not exist"),
])
def test_bad_generate_requests_say_what_is_wrong(url, body, needle):
    answer = generate(url, **body)
    assert answer.status_code in (400, 404) and needle in answer.text


def test_sleep_holds_generation_until_woken_and_weights_load_only_when_awake(url, backend, tmp_path):
    from safetensors.torch import save_file

    prompt = ids(backend)
    assert requests.post(f"{url}/sleep", params={"level": 1}, timeout=10).status_code == 200
    assert requests.get(f"{url}/is_sleeping", timeout=10).json() == {"is_sleeping": True}
    assert generate(url, token_ids=prompt).status_code == 409
    path = tmp_path / "w.safetensors"
    norm = {"model.norm.weight": torch.full_like(backend.model.model.norm.weight, 0.5)}
    save_file(norm, str(path))
    rpc = {"method": "agentgym_load_weights_file", "args": [str(path)]}
    assert requests.post(f"{url}/collective_rpc", json=rpc, timeout=10).status_code == 409
    assert requests.post(f"{url}/wake_up", params={"tags": "weights"}, timeout=10).status_code == 200
    loaded = requests.post(f"{url}/collective_rpc", json=rpc, timeout=30)
    assert loaded.json() == {"results": [1]} and torch.equal(backend.model.model.norm.weight, norm["model.norm.weight"])
    assert generate(url, token_ids=prompt).status_code == 409  # the KV cache still sleeps
    assert requests.post(f"{url}/wake_up", params={"tags": "kv_cache"}, timeout=10).status_code == 200
    assert generate(url, token_ids=prompt, sampling_params={"max_tokens": 2}).status_code == 200


def test_control_routes_refuse_what_they_cannot_do(url, tmp_path):
    bad_tag = requests.post(f"{url}/wake_up", params={"tags": "everything"}, timeout=10)
    assert bad_tag.status_code == 400 and "weights and/or kv_cache" in bad_tag.text
    other = requests.post(f"{url}/collective_rpc", json={"method": "reset_weights"}, timeout=10)
    assert other.status_code == 400 and "agentgym_load_weights_file" in other.text
    missing = requests.post(f"{url}/collective_rpc", json={"method": "agentgym_load_weights_file",
                                                           "args": [str(tmp_path / "none.safetensors")]}, timeout=10)
    assert missing.status_code == 400 and "cannot load weights" in missing.text
    garbled = requests.post(f"{url}/collective_rpc", json={"method": "agentgym_load_weights_bytes",
                                                           "args": ["not base64!"]}, timeout=10)
    assert garbled.status_code == 400 and "characters of base64" in garbled.text


def test_weights_sent_in_the_request_load_in_place(url, backend):
    import base64

    from safetensors.torch import save

    norm = {"model.norm.weight": torch.full_like(backend.model.model.norm.weight, 0.25)}
    rpc = {"method": "agentgym_load_weights_bytes", "args": [base64.b64encode(save(norm)).decode()]}
    loaded = requests.post(f"{url}/collective_rpc", json=rpc, timeout=30)
    assert loaded.json() == {"results": [1]} and torch.equal(backend.model.model.norm.weight, norm["model.norm.weight"])


def test_control_routes_need_the_api_key_when_one_is_set(backend):
    app = create_model_app(backend, {"model_name": "tiny", "api_key": "k"})
    with serve_app(app) as base:
        assert requests.post(f"{base}/reset_prefix_cache", timeout=10).status_code == 401
        assert requests.post(f"{base}/inference/v1/generate", json={"token_ids": [1]}, timeout=10).status_code == 401
        ok = requests.post(f"{base}/reset_prefix_cache", headers={"Authorization": "Bearer k"}, timeout=10)
        assert ok.status_code == 200
