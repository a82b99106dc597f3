"""Shared prompt prefixes: read once per decode batch, same samples as reading every prompt in full."""

from __future__ import annotations

import copy

import pytest
import torch

from agentgym_core.rollout import ChatFormat, SamplingParams

INSTRUCTION = ("You are an agent in a grid world. Each turn, think, then answer with one line "
               "'Action: <action>' where the action is one of: turn left, turn right, move forward.")
GREEDY = SamplingParams(temperature=0, max_new_tokens=6)
SEEDED = SamplingParams(temperature=1.0, max_new_tokens=6, seed=11)


def _prompts(backend, observations=("A red ball ahead.", "A wall to your left, a key ahead.", "Nothing.")):
    chat = ChatFormat(backend)
    return [chat.prompt_ids([{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": obs}])
            for obs in observations]


def _sample(backend, prompts, params, *, share: bool, arrive_one_by_one: bool = False):
    """Replies to ``prompts`` from one decode batch; rows join all at once or one per decode step."""
    backend.share_prefixes = share
    try:
        batch = backend.open_batch(params)
        out = {}
        for i, prompt in enumerate(prompts):
            batch.add(i, prompt, max_new_tokens=params.max_new_tokens)
            if arrive_one_by_one:
                out.update(batch.step())
        while batch.active:
            out.update(batch.step())
        return [out[i] for i in range(len(prompts))]
    finally:
        backend.share_prefixes = True


@pytest.mark.parametrize("params", [GREEDY, SEEDED])
@pytest.mark.parametrize("one_by_one", [False, True])
def test_shared_prefixes_sample_what_full_prompts_sample(tiny_backend, params, one_by_one):
    prompts = _prompts(tiny_backend)
    stats = tiny_backend.sessions.stats
    shared_before, prefilled_before = stats.shared_prefix_tokens, stats.prefilled_tokens
    full = _sample(tiny_backend, prompts, params, share=False, arrive_one_by_one=one_by_one)
    prefilled_full = stats.prefilled_tokens - prefilled_before
    assert stats.shared_prefix_tokens == shared_before  # sharing off reads everything
    shared = _sample(tiny_backend, prompts, params, share=True, arrive_one_by_one=one_by_one)
    prefilled_shared = stats.prefilled_tokens - prefilled_before - prefilled_full
    common = len(ChatFormat(tiny_backend).prompt_ids([{"role": "system", "content": INSTRUCTION}]))
    # The instruction was read once, not three times (two of the three rows reused at least it).
    assert stats.shared_prefix_tokens - shared_before >= 2 * (common - 8)
    assert prefilled_shared <= prefilled_full - 2 * (common - 8)
    for a, b in zip(full, shared, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_identical_prompts_share_all_but_their_last_token(tiny_backend):
    prompt = _prompts(tiny_backend)[0]
    stats = tiny_backend.sessions.stats
    before = stats.shared_prefix_tokens
    samples = _sample(tiny_backend, [prompt] * 4, SEEDED, share=True)  # a GRPO group
    assert stats.shared_prefix_tokens - before == 4 * (len(prompt) - 1)
    for a, b in zip(samples, _sample(tiny_backend, [prompt] * 4, SEEDED, share=False), strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_a_prefix_never_outlives_its_batch(tiny_backend):
    """Kept prefixes belong to one batch (one rollout): new weights between batches are always seen."""
    model = copy.deepcopy(tiny_backend.model)
    from agentgym_backend_transformers import TransformersBackend

    backend = TransformersBackend(model, tiny_backend.tokenizer)
    prompts = _prompts(backend)
    backend.generate(prompts, GREEDY)
    with torch.no_grad():  # an optimizer step on the shared module, without load_weights
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    after = backend.generate(prompts, GREEDY)
    backend.share_prefixes = False
    reference = backend.generate(prompts, GREEDY)
    for a, b in zip(after, reference, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
