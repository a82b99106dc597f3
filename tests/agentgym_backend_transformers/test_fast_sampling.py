"""Sampling paths that matter on a GPU, tested where a CPU can: one batched seeded draw per decode
step, a bf16 sampling copy of a lent float32 module refreshed after updates, TF32 where float32
remains, attention kernels that take a growing length as it comes (the CUDA-only parts are marked
``gpu``)."""

from __future__ import annotations

import pytest
import torch

from agentgym_backend_transformers import make_backend
from agentgym_backend_transformers.decoding import draw_tokens, seeded_uniform
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.testing.tiny_model import tiny_chat_model


def _cuda_backend(options):
    """The backend over a tiny model on the GPU (the test skips where there is none)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model, tokenizer = tiny_chat_model(seed=0)
    return make_backend(options, model=model.to("cuda"), tokenizer=tokenizer)


def _prompts(backend):
    """Three prompts of different lengths (plain text ids: sampling needs no chat template)."""
    return [backend.encode(t) for t in ("Guess a number.", "Pick a colour, any colour.", "Hi.")]


def test_a_seeded_decode_step_draws_every_row_at_once(tiny_backend, monkeypatch):
    """No torch.multinomial per row (a kernel launch and a generator each): one draw for the batch."""

    def refuse(*args, **kwargs):
        raise AssertionError("a seeded batch called torch.multinomial")

    monkeypatch.setattr(torch, "multinomial", refuse)
    samples = tiny_backend.generate(
        _prompts(tiny_backend), SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)
    )
    assert all(s.token_ids for s in samples)


def test_a_rows_draw_depends_only_on_its_seed_and_position():
    probs = torch.softmax(torch.randn(4, 50, generator=torch.Generator().manual_seed(0)), -1)
    seeds = torch.tensor([11, 2**62 + 5, 0, 77])
    positions = torch.tensor([3, 40, 7, 7])
    together = draw_tokens(probs, seeds, positions)
    flipped = draw_tokens(probs.flip(0), seeds.flip(0), positions.flip(0)).flip(0)
    alone = torch.cat(
        [draw_tokens(probs[b : b + 1], seeds[b : b + 1], positions[b : b + 1]) for b in range(4)]
    )
    assert torch.equal(together, flipped) and torch.equal(together, alone)
    assert not torch.equal(seeded_uniform(seeds, positions), seeded_uniform(seeds, positions + 1))


def test_draws_follow_the_distribution_and_never_pick_a_masked_token():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0])
    n = 20000
    tokens = draw_tokens(probs.expand(n, -1), torch.arange(n) * 7919 + 13, torch.full((n,), 5))
    freq = torch.bincount(tokens, minlength=5).float() / n
    assert freq[1] == 0 and freq[4] == 0
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)
    u = seeded_uniform(torch.arange(n), torch.zeros(n, dtype=torch.long))
    assert float(u.min()) >= 0 and float(u.max()) < 1 and abs(float(u.mean()) - 0.5) < 0.01


def test_a_lent_float32_module_samples_from_a_bf16_copy_refreshed_after_an_update():
    model, tokenizer = tiny_chat_model(seed=0)
    backend = make_backend({"dtype": "bfloat16"}, model=model, tokenizer=tokenizer)
    assert backend.source is model and {p.dtype for p in model.parameters()} == {torch.float32}
    assert {p.dtype for p in backend.model.parameters()} == {torch.bfloat16}
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=1)
    backend.generate(_prompts(backend)[:1], params)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, foreach=True)  # the trainer's update, in place
    model(input_ids=torch.tensor([_prompts(backend)[0]])).logits.float().pow(2).mean().backward()
    optimizer.step()
    backend.open_batch(params).close()  # a new rollout starts from the new weights
    for mine, theirs in zip(backend.model.parameters(), model.parameters(), strict=True):
        assert torch.equal(mine, theirs.to(torch.bfloat16))
    auto = make_backend({}, model=model, tokenizer=tokenizer)
    assert auto.model is model  # 'auto' on a CPU: the module itself


@pytest.mark.gpu
def test_on_cuda_a_lent_float32_module_samples_in_bf16_and_replays_batched_draws():
    backend = _cuda_backend({})  # auto: a bf16 copy on a GPU
    assert next(backend.model.parameters()).dtype == torch.bfloat16
    ids = _prompts(backend)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=4)
    together = backend.generate(ids, params)
    alone = [backend.generate([p], params)[0] for p in ids]  # row 0 of each call: the same key, 0
    assert together[0].token_ids == alone[0].token_ids


@pytest.mark.gpu
def test_on_cuda_float32_sampling_runs_in_tf32_and_restores_the_flag():
    backend = _cuda_backend({"dtype": "float32"})
    before = torch.backends.cuda.matmul.allow_tf32
    with backend.sampling_kernels():
        assert torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cuda.matmul.allow_tf32 == before


def _record_cudnn_flag(backend):
    """Hook the sampling module: the cuDNN-attention flag as each forward pass saw it."""
    seen: list[bool] = []
    handle = backend.model.register_forward_pre_hook(lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))
    return seen, handle


def test_sampling_and_scoring_attend_without_cudnn_kernels_and_restore_the_flag(tiny_backend):
    before = torch.backends.cuda.cudnn_sdp_enabled()
    assert before, "torch enables cuDNN attention by default; the test needs that default"
    seen, handle = _record_cudnn_flag(tiny_backend)
    try:
        ids = _prompts(tiny_backend)
        params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=1)
        restricted = tiny_backend.generate(ids, params)
        tiny_backend.score([ids[0]])
        assert seen and not any(seen)  # prefill, every decode step and scoring
        assert torch.backends.cuda.cudnn_sdp_enabled() == before
        seen.clear()
        tiny_backend.allow_cudnn_attention = True  # torch's own choice (the bench's baseline)
        chosen = tiny_backend.generate(ids, params)
        assert seen and all(seen)
    finally:
        tiny_backend.allow_cudnn_attention = False
        handle.remove()
    # On a CPU there is no cuDNN attention: the same tokens either way.
    assert [s.token_ids for s in restricted] == [s.token_ids for s in chosen]


@pytest.mark.gpu
def test_on_cuda_decode_steps_run_no_cudnn_attention_kernel():
    backend = _cuda_backend({"dtype": "bfloat16"})
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        backend.generate(_prompts(backend), params)
    ops = {event.key for event in prof.key_averages()}
    assert any("scaled_dot_product" in op for op in ops), sorted(ops)
    assert not any("cudnn_attention" in op for op in ops), sorted(op for op in ops if "attention" in op)


def test_overlapping_holders_of_decode_attention_restore_the_flag_whichever_leaves_last():
    from agentgym_backend_transformers.backend import decode_attention

    before = torch.backends.cuda.cudnn_sdp_enabled()
    engine_thread, caller = decode_attention(), decode_attention()  # e.g. the library engine's thread and a scoring call
    engine_thread.__enter__()
    caller.__enter__()
    engine_thread.__exit__(None, None, None)  # the first in leaves first: not LIFO
    assert not torch.backends.cuda.cudnn_sdp_enabled()  # the caller still samples without cuDNN's kernel
    caller.__exit__(None, None, None)
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
