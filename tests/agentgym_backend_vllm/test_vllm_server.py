"""Server mode against real `agentgym serve-model` apps on loopback (the stand-in for `vllm serve` replicas)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests
import torch

from agentgym_core.rollout.backend import ContinuousBackend, SamplingParams
from agentgym_core.testing import check_backend, serve_app

pytest.importorskip("agentgym_backend_transformers")


@pytest.fixture
def replica(stand_in):
    app, local = stand_in()
    with serve_app(app) as url:
        yield url, app, local


def make(model_dir, urls, **options):
    from agentgym_backend_vllm import make_backend

    return make_backend({"model": str(model_dir), "mode": "server", "urls": list(urls), **options})


def prompt(backend, text="Guess a number."):
    return backend.encode(backend.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True))


def test_check_backend_passes_against_the_stand_in_server(replica, tiny_model_dir):
    url, _app, _local = replica
    backend = make(tiny_model_dir, [url])
    assert isinstance(backend, ContinuousBackend)
    assert backend.max_model_len == 512  # read from GET /v1/models
    check_backend(backend)


def test_server_mode_never_imports_vllm(replica, tiny_model_dir):
    url, _app, _local = replica
    code = (
        "import sys; sys.modules['vllm'] = None\n"
        "from agentgym_backend_vllm import make_backend\n"
        "from agentgym_core.rollout.backend import SamplingParams\n"
        f"b = make_backend({{'model': {str(tiny_model_dir)!r}, 'mode': 'server', 'urls': [{url!r}]}})\n"
        "print(len(b.generate([[1, 2, 3]], SamplingParams(max_new_tokens=2, seed=1))[0].token_ids))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() in ("1", "2")


def test_generate_route_is_token_in_token_out(replica, tiny_model_dir):
    url, _app, local = replica
    backend = make(tiny_model_dir, [url])
    ids = prompt(backend)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=5)
    remote = backend.generate([ids], greedy)[0]
    direct = local.generate([ids], greedy)[0]
    assert remote.token_ids == direct.token_ids
    assert remote.logprobs == pytest.approx(direct.logprobs, abs=1e-5)
    answer = requests.post(f"{url}/inference/v1/generate", json={
        "token_ids": ids, "sampling_params": {"max_tokens": 3, "temperature": 0, "bogus": 1}}, timeout=30)
    assert answer.status_code == 400 and "bogus" in answer.text  # unknown sampling fields are not ignored


def test_a_trajectorys_turns_stay_on_one_replica(tiny_model_dir, stand_in):
    app_a, _ = stand_in()
    app_b, _ = stand_in()
    with serve_app(app_a) as url_a, serve_app(app_b) as url_b:
        backend = make(tiny_model_dir, [url_a, url_b])
        ids = prompt(backend)
        params = SamplingParams(temperature=1.0, max_new_tokens=2, seed=5)
        backend.generate([ids, ids], params, sessions=["traj-0", "traj-1"])
        first = {k: r.url for k, r in backend._sessions.items()}
        assert set(first.values()) == {url_a, url_b}  # two new sessions spread over the replicas
        for _turn in range(2):
            backend.generate([ids, ids], params, sessions=["traj-1", "traj-0"])
            assert {k: r.url for k, r in backend._sessions.items()} == first
        backend.release_session("traj-0")
        assert "traj-0" not in backend._sessions


def _moved_weights(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    new = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return new.state_dict()


@pytest.mark.parametrize(("transport", "loader"), [("auto", "agentgym_load_weights_bytes"),
                                                   ("files", "agentgym_load_weights_file")])
def test_load_weights_pauses_loads_buckets_resets_then_resumes(replica, tiny_model_dir, transport, loader):
    url, app, local = replica
    backend = make(tiny_model_dir, [url], weight_bucket_mb=0.01, weight_transport=transport)
    new = _moved_weights(tiny_model_dir)
    backend.load_weights(new)
    calls = app.state.control_calls
    assert calls[0] == ("pause", "wait") and calls[-2:] == [("reset_prefix_cache",), ("resume",)]
    begin, finish = ("collective_rpc", "agentgym_begin_weight_update"), ("collective_rpc", "agentgym_finish_weight_update")
    assert calls[1] == begin and calls[-3] == finish  # one update brackets every bucket
    assert len(calls) > 6 and set(calls[2:-3]) == {("collective_rpc", loader)}
    served = local.model.state_dict()
    assert all(torch.equal(served[k], v) for k, v in new.items())
    assert backend.weight_syncs[-1]["transport"] == ("http" if transport == "auto" else "files")


def test_weights_travel_in_the_requests_intact_and_no_file_is_written(replica, tiny_model_dir, monkeypatch):
    # The replica is `agentgym serve-model` on 127.0.0.1, the stand-in for `vllm serve` (its collective_rpc
    # route and the worker extension's bytes method); it runs in this process, so a file written anywhere fails.
    import tempfile

    import safetensors.torch

    url, app, local = replica
    backend = make(tiny_model_dir, [url], weight_bucket_mb=0.01)

    def no_file(*args, **kwargs):
        raise AssertionError("a weight file was written")

    monkeypatch.setattr(safetensors.torch, "save_file", no_file)
    monkeypatch.setattr(safetensors.torch, "load_file", no_file)
    monkeypatch.setattr(tempfile, "mkdtemp", no_file)
    new = {k: v.to(torch.float32) for k, v in _moved_weights(tiny_model_dir).items()}
    for _ in range(2):  # the second sync too: nothing stays behind the first
        backend.load_weights(new)
    served = local.model.state_dict()
    assert all(torch.equal(served[k], v) for k, v in new.items())  # bit for bit
    sent = sum(v.numel() * v.element_size() for v in new.values())
    assert [(s["transport"], s["bytes"]) for s in backend.weight_syncs] == [("http", float(sent))] * 2
    assert ("collective_rpc", "agentgym_load_weights_file") not in app.state.control_calls


def test_auto_sends_files_when_a_replica_lacks_the_method_for_weights_in_the_request(tiny_model_dir, stand_in,
                                                                                       monkeypatch, caplog):
    import agentgym_core.model_server.tokens as tokens

    app, local = stand_in()
    monkeypatch.setattr(tokens, "LOAD_WEIGHTS_BYTES_METHOD", "an-older-stand-in-has-no-such-method")
    with serve_app(app) as url:
        backend = make(tiny_model_dir, [url], weight_bucket_mb=0.01)
        new = _moved_weights(tiny_model_dir)
        with caplog.at_level("WARNING", logger="agentgym_backend_vllm.server"):
            backend.load_weights(new)
        backend.load_weights(new)  # from now on as files, without asking again
        from agentgym_backend_vllm.server import ReplicaError

        with pytest.raises(ReplicaError, match="an-older-stand-in"):  # named http: no fallback
            make(tiny_model_dir, [url], weight_transport="http").load_weights(new)
    assert "sending them as files" in caplog.text
    assert [s["transport"] for s in backend.weight_syncs] == ["files", "files"]
    served = local.model.state_dict()
    assert all(torch.equal(served[k], v) for k, v in new.items())


def test_colocated_replicas_sleep_after_a_rollout_and_wake_weights_then_kv_cache(replica, tiny_model_dir):
    url, app, local = replica
    backend = make(tiny_model_dir, [url], gpu_sharing="colocate")
    ids = prompt(backend)
    backend.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=2))
    assert app.state.control_calls == [("sleep", 1)]
    asleep = requests.post(f"{url}/inference/v1/generate", json={"token_ids": ids}, timeout=30)
    assert asleep.status_code == 409
    backend.load_weights(local.model.state_dict())
    calls = app.state.control_calls[1:]
    assert calls[:2] == [("pause", "wait"), ("wake_up", ("weights",))]
    assert calls[-3:] == [("wake_up", ("kv_cache",)), ("reset_prefix_cache",), ("resume",)]
    assert calls[2] == ("collective_rpc", "agentgym_begin_weight_update")
    assert calls[-4] == ("collective_rpc", "agentgym_finish_weight_update")
    assert set(calls[3:-4]) == {("collective_rpc", "agentgym_load_weights_bytes")}
    assert backend.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=2))[0].token_ids


def test_unreachable_replica_and_missing_routes_explain_themselves(replica, tiny_model_dir, stand_in):
    from agentgym_backend_vllm.server import ReplicaError

    with pytest.raises(ReplicaError, match="is the replica running"):
        make(tiny_model_dir, ["http://127.0.0.1:9"])
    url, _app, _local = replica
    from agentgym_core.model_server import create_model_app

    app, _ = stand_in()
    bare = create_model_app(app.state.generation.backend, {"model_name": "tiny", "max_context_tokens": 512,
                                                           "control_routes": False})
    with serve_app(bare) as bare_url:
        backend = make(tiny_model_dir, [bare_url])
        with pytest.raises(ReplicaError, match="VLLM_SERVER_DEV_MODE=1"):
            backend.reset_prefix_cache()


def test_the_worker_extension_loads_a_bucket_sent_in_the_request_bit_for_bit():
    from agentgym_backend_vllm.weights import AgentgymWorkerExtension, bucket_payload

    taken = []

    class Model:  # what vLLM's model runner hands the extension: a model with load_weights
        def load_weights(self, weights):
            taken.extend(weights)

    worker = AgentgymWorkerExtension()
    worker.model_runner = type("Runner", (), {"get_model": lambda self: Model()})()
    worker.device = torch.device("cpu")
    worker._agentgym_loaded = 0  # inside an update (begin needs vLLM's layerwise reload)
    shared = torch.randn(4, 3, dtype=torch.bfloat16)
    bucket = [("embed.weight", shared), ("lm_head.weight", shared), ("norm.weight", torch.rand(3))]  # tied: one storage
    assert worker.agentgym_load_weights_bytes(bucket_payload(bucket)) == 3
    got = dict(taken)
    assert sorted(got) == sorted(n for n, _ in bucket)
    assert all(got[n].dtype == t.dtype and torch.equal(got[n], t) for n, t in bucket)


def test_replicas_say_what_they_sample_on_and_one_without_the_routes_shows_as_unknown(replica, tiny_model_dir,
                                                                                   stand_in, caplog):
    from agentgym_core.model_server import create_model_app

    url, _app, local = replica
    setup = make(tiny_model_dir, [url]).sampling_setup
    # the stand-in answers with its transformers backend's own setup, as vLLM's worker extension answers
    assert setup == {**local.sampling_setup, "server": url}
    app, _ = stand_in()
    bare = create_model_app(app.state.generation.backend, {"model_name": "tiny", "max_context_tokens": 512,
                                                           "control_routes": False})
    with serve_app(bare) as bare_url:
        setup = make(tiny_model_dir, [url, bare_url]).sampling_setup
    assert setup["attention_kernel"] == f"{local.sampling_setup['attention_kernel']} (replica 0), unknown (replica 1)"
    assert setup["device"] == "cpu (replica 0), - (replica 1)" and setup["server"] == f"{url}, {bare_url}"
    assert "cannot say what it samples on" in caplog.text
