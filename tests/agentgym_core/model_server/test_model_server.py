"""`agentgym serve-model`: the OpenAI-compatible app over a real (tiny, random) model, on loopback."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
import requests

torch = pytest.importorskip("torch")
pytest.importorskip("agentgym_backend_transformers")

from agentgym_core.model_server import GenerationQueue, create_model_app  # noqa: E402
from agentgym_core.rollout import SamplingParams  # noqa: E402
from agentgym_core.testing import serve_app  # noqa: E402

NAME = "tiny-chat"
MESSAGES = [{"role": "system", "content": "You guess numbers."}, {"role": "user", "content": "Guess 1 to 20."}]


@pytest.fixture(scope="module")
def backend():
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.testing.tiny_model import tiny_chat_model

    torch.set_num_threads(1)
    model, tokenizer = tiny_chat_model(seed=0)
    return TransformersBackend(model, tokenizer)


@pytest.fixture(scope="module")
def url(backend):
    app = create_model_app(backend, {"model_name": NAME, "max_context_tokens": 4096})
    with serve_app(app) as base:
        yield base


def chat(url, **body):
    return requests.post(f"{url}/v1/chat/completions", json={"model": NAME, "messages": MESSAGES} | body, timeout=60)


def prompt_ids(backend, messages=MESSAGES):
    return backend.encode(backend.apply_chat_template(messages, add_generation_prompt=True))


def test_chat_completion_shape_and_usage(url, backend):
    answer = chat(url, max_tokens=7, temperature=1.0, seed=5)
    assert answer.status_code == 200
    body = answer.json()
    assert body["object"] == "chat.completion" and body["model"] == NAME and body["id"].startswith("chatcmpl-")
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(prompt_ids(backend))  # the model's own chat template
    assert 1 <= usage["completion_tokens"] <= 7
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert choice["finish_reason"] == ("length" if usage["completion_tokens"] == 7 else "stop")


def test_greedy_reply_and_logprobs_are_the_backends(url, backend):
    body = chat(url, temperature=0, max_tokens=10, logprobs=True).json()
    (sample,) = backend.generate([prompt_ids(backend)], SamplingParams(temperature=0.0, max_new_tokens=10))
    ids = sample.token_ids[:-1] if sample.token_ids[-1] in backend.eos_token_ids else sample.token_ids
    choice = body["choices"][0]
    assert choice["message"]["content"] == backend.decode(ids)
    assert [c["logprob"] for c in choice["logprobs"]["content"]] == pytest.approx(sample.logprobs, abs=1e-4)


def test_seed_reproduces_and_n_gives_distinct_choices(url):
    first = chat(url, temperature=1.0, max_tokens=8, seed=42, n=3).json()
    again = chat(url, temperature=1.0, max_tokens=8, seed=42, n=3).json()
    texts = [c["message"]["content"] for c in first["choices"]]
    assert texts == [c["message"]["content"] for c in again["choices"]]
    assert [c["index"] for c in first["choices"]] == [0, 1, 2] and len(set(texts)) > 1
    assert first["usage"]["completion_tokens"] <= 24


def test_stop_string_cuts_the_reply(url):
    full = chat(url, temperature=0, max_tokens=24).json()["choices"][0]["message"]["content"]
    assert len(full) > 6, full
    stop = full[3:6]
    cut = chat(url, temperature=0, max_tokens=24, stop=[stop, "never-appears"]).json()["choices"][0]
    assert cut["message"]["content"] == full[: full.find(stop)]
    assert cut["finish_reason"] == "stop"


def test_models_and_text_completions(url, backend):
    models = requests.get(f"{url}/v1/models", timeout=10).json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == [NAME]
    assert requests.get(f"{url}/v1/models/{NAME}", timeout=10).json()["id"] == NAME
    body = requests.post(f"{url}/v1/completions", json={"model": NAME, "prompt": ["guess", "the number"],
                                                         "max_tokens": 4, "n": 2, "seed": 1}, timeout=60).json()
    assert body["object"] == "text_completion" and len(body["choices"]) == 4
    assert body["usage"]["prompt_tokens"] == len(backend.encode("guess")) + len(backend.encode("the number"))
    assert requests.get(f"{url}/health", timeout=10).json()["status"] == "ok"


@pytest.mark.parametrize(("body", "status", "param", "needle"), [
    ({"model": "gpt-4"}, 404, "model", "does not exist on this server; it serves 'tiny-chat'"),
    ({"messages": []}, 400, "messages", "at least 1 item"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role", "system"),
    ({"stream": True}, 400, "stream", "streaming is not supported"),
    ({"tools": [{"type": "function"}]}, 400, "tools", "tool calls are not supported"),
    ({"max_tokens_typo": 5}, 400, "max_tokens_typo", "unrecognized request argument"),
    ({"temperature": 3}, 400, "temperature", "less than or equal to 2"),
    ({"n": 100}, 400, "n", "at most 16"),
    ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop", "at most 4 stop sequences"),
    ({"presence_penalty": 0.5}, 400, "presence_penalty", "not supported"),
])
def test_bad_requests_answer_in_openais_error_shape(url, body, status, param, needle):
    answer = chat(url, **body)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert error["param"] == param and needle in error["message"], error
    assert error["type"] == "invalid_request_error"


def test_unparseable_bodies_and_unknown_routes(url):
    bad_json = requests.post(f"{url}/v1/chat/completions", data="{not json", timeout=10,
                             headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]
    not_object = requests.post(f"{url}/v1/chat/completions", json=[1, 2], timeout=10)
    assert not_object.status_code == 400 and "must be a JSON object" in not_object.json()["error"]["message"]
    nowhere = requests.post(f"{url}/v1/embeddings", json={}, timeout=10)
    assert nowhere.status_code == 404 and "POST /v1/chat/completions" in nowhere.json()["error"]["message"]


def test_context_length_and_api_key(backend):
    app = create_model_app(backend, {"model_name": NAME, "max_context_tokens": 20, "api_key": "k1"})
    with serve_app(app) as base:
        url = f"{base}/v1/chat/completions"
        body = {"model": NAME, "messages": MESSAGES, "max_tokens": 4}
        missing = requests.post(url, json=body, timeout=10)
        assert missing.status_code == 401 and "no API key was sent" in missing.json()["error"]["message"]
        wrong = requests.post(url, json=body, headers={"Authorization": "Bearer k2"}, timeout=10)
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        for scheme in ("Bearer", "bearer", "BEARER"):  # the scheme in any case (RFC 9110)
            long = requests.post(url, json=body, headers={"Authorization": f"{scheme} k1"}, timeout=10)
            assert long.status_code == 400 and long.json()["error"]["code"] == "context_length_exceeded"
        assert requests.get(f"{base}/health", timeout=10).status_code == 200  # health needs no key


def test_waiting_requests_are_sampled_in_one_batch(backend):
    queue = GenerationQueue(backend, max_batch_size=8)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4)
    prompt = prompt_ids(backend)
    futures = [queue.submit(prompt, greedy, n=2) for _ in range(3)]  # queued before the worker starts
    seeded = queue.submit(prompt, greedy.model_copy(update={"seed": 1}))
    other = queue.submit(prompt, SamplingParams(temperature=1.0, max_new_tokens=4))
    queue.start()
    try:
        results = [f.result(timeout=60) for f in [*futures, seeded, other]]
    finally:
        queue.stop()
    assert queue.batches == [6, 1, 1]  # same settings together; a seeded job alone; other settings apart
    assert all(len(r) == 2 for r in results[:3]) and len(results[3]) == len(results[4]) == 1
    assert len({tuple(s.token_ids) for r in results[:3] for s in r}) == 1  # greedy: the same reply each time


def test_concurrent_clients_all_answered(url):
    answers: list[int] = []
    threads = [threading.Thread(target=lambda: answers.append(chat(url, max_tokens=6).status_code))
               for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [200] * 6


def test_serve_model_command(backend, tmp_path):
    """The real command on a saved Hugging Face directory, in its own process."""
    from agentgym_core.testing import start_server_process
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    env = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}
    env |= {"AGENTGYM_PLUGINS": "transformers", "OMP_NUM_THREADS": "1"}
    # --port 0: the command binds a free port before loading the model and prints it with the address
    process, base = start_server_process(
        [sys.executable, "-m", "agentgym_core.cli", "serve-model", str(tmp_path / "tiny"), "--port", "0",
         "--served-model-name", NAME, "--threads", "1"], env=env)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, f"serve-model exited with code {process.returncode}"
            try:
                if requests.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):
                pass
            assert time.monotonic() < deadline, "serve-model did not come up within 90 s"
            time.sleep(0.2)
        answer = chat(base, temperature=0, max_tokens=10).json()
        (direct,) = backend.generate([prompt_ids(backend)], SamplingParams(temperature=0.0, max_new_tokens=10))
        ids = direct.token_ids[:-1] if direct.token_ids[-1] in backend.eos_token_ids else direct.token_ids
        assert answer["choices"][0]["message"]["content"] == backend.decode(ids)  # the same weights, reloaded
        too_long = chat(base, messages=[{"role": "user", "content": "guess " * 5000}], max_tokens=4)
        assert too_long.status_code == 400  # the context came from the model's max_position_embeddings (4096)
        assert "context is 4096 tokens" in too_long.json()["error"]["message"]
    finally:
        process.terminate()
        process.wait(timeout=20)
