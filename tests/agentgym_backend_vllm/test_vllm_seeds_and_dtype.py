"""Seeds per reply and weights in the engine's dtype, in both modes (the fake vLLM; stand-in replicas)."""

from __future__ import annotations

import pytest
import torch
from test_vllm_engine import prompt

from agentgym_core.rollout.backend import SamplingParams, row_seed
from agentgym_core.testing import serve_app


def make(model_dir, **options):
    from agentgym_backend_vllm import make_backend

    return make_backend({"model": str(model_dir), **options})


def prompts(backend):
    return [prompt(backend, text) for text in ("Guess a number.", "Pick a word.", "Say hi.")]


def replies_in_order(backend, ids, order, seed=11):
    """Rows keyed 10, 20, 30 added in ``order``; every reply by key."""
    batch = backend.open_batch(SamplingParams(temperature=1.0, max_new_tokens=8, seed=seed))
    try:
        for i in order:
            batch.add(10 * (i + 1), ids[i], max_new_tokens=8)
        out = {}
        while batch.active:
            out.update(batch.step())
    finally:
        batch.close()
    return {k: v.token_ids for k, v in out.items()}


def test_engine_mode_seeds_each_reply_by_its_key_not_by_the_order_it_joined(fake_vllm, tiny_model_dir):
    """Environments answer in any order: a row's sample must not depend on it (vLLM used seed + add count)."""
    backend = make(tiny_model_dir)
    ids = prompts(backend)
    assert replies_in_order(backend, ids, [0, 1, 2]) == replies_in_order(backend, ids, [2, 0, 1])


def test_engine_mode_passes_the_shared_row_seed(fake_vllm, tiny_model_dir, monkeypatch):
    backend = make(tiny_model_dir)
    seen = []
    submit = backend._submit
    monkeypatch.setattr(
        backend,
        "_submit",
        lambda batch, prompt, sampling: seen.append(sampling.seed) or submit(batch, prompt, sampling),
    )
    ids = prompts(backend)
    replies_in_order(backend, ids, [1, 0], seed=5)
    assert seen == [row_seed(5, 20, 0), row_seed(5, 10, 0)]  # the transformers backend's streams use the same


def test_server_mode_seeds_each_reply_by_its_key(stand_in, tiny_model_dir):
    app, _local = stand_in()
    with serve_app(app) as url:
        backend = make(tiny_model_dir, mode="server", urls=[url])
        ids = prompts(backend)
        assert replies_in_order(backend, ids, [0, 1, 2]) == replies_in_order(backend, ids, [1, 2, 0])
        seeds = []
        body = backend.request_body
        backend.request_body = lambda *a, **kw: seeds.append(kw["seed"]) or body(*a, **kw)
        replies_in_order(backend, ids, [2], seed=7)
        assert seeds == [row_seed(7, 30, 0)]


def test_engine_mode_loads_float32_masters_as_bf16_bytes(fake_vllm, tiny_model_dir):
    """The engine keeps bfloat16: buckets are cast before they travel (2 bytes a parameter, not 4)."""
    from transformers import AutoModelForCausalLM

    backend = make(tiny_model_dir, dtype="bfloat16", weight_bucket_mb=0.01)
    assert backend.weights_dtype == torch.bfloat16
    masters = AutoModelForCausalLM.from_pretrained(tiny_model_dir).float().state_dict()
    backend.load_weights(masters)
    assert backend.weight_syncs[-1]["bytes"] == 2 * sum(v.numel() for v in masters.values())
    loaded = backend.engine.model.state_dict()
    assert all(torch.equal(loaded[k], v.to(torch.bfloat16)) for k, v in masters.items())


def test_server_mode_file_transport_writes_buckets_to_shared_memory_not_disk(stand_in, tiny_model_dir, monkeypatch):
    import os

    import agentgym_backend_vllm.server as server

    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine")
    folders = []
    real = server.tempfile.mkdtemp
    monkeypatch.setattr(server.tempfile, "mkdtemp", lambda **kw: folders.append(kw.get("dir")) or real(**kw))
    app, local = stand_in()
    with serve_app(app) as url:
        backend = make(tiny_model_dir, mode="server", urls=[url], dtype="float32", weight_transport="files")
        backend.load_weights(local.model.state_dict())
    assert folders == ["/dev/shm"]


def test_engine_mode_two_workers_sample_what_one_samples_reruns_included(
    fake_vllm, tiny_model_dir, monkeypatch
):
    """The trainer's rollout worker over the fake engine: one step whole, or split over two workers."""
    import json
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "agentgym_core" / "rl"))  # the rl tests' envs
    from episode_replay import FlakyPlugin, attempts_by_episode

    from agentgym_core.plugins import PluginManager

    pm = PluginManager(autoload=True, allow=["estimators", "vllm"])
    pm.register(FlakyPlugin(), "flaky-test")
    options = [
        "rollout.backend=vllm",
        f"rollout.backend_options={json.dumps({'model': str(tiny_model_dir)})}",
    ]
    whole, reruns = attempts_by_episode(pm, options, 1)
    split, split_reruns = attempts_by_episode(pm, options, 2)
    assert reruns > 0 and split_reruns == reruns
    assert split == whole
