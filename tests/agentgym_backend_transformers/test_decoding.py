"""The running decode batch: prompts join between steps and get exactly what they would get alone."""

from __future__ import annotations

import pytest

from agentgym_core.rollout import ChatFormat, ContinuousBackend, SamplingParams


def _prompts(backend) -> list[list[int]]:
    chat = ChatFormat(backend)
    return [
        chat.prompt_ids([{"role": "user", "content": "Hi"}]),
        chat.prompt_ids([{"role": "system", "content": "You guess numbers between 1 and 20, one per turn."},
                         {"role": "user", "content": "Start guessing now, please. Your guess is too low."}]),
        chat.prompt_ids([{"role": "user", "content": "go to red ball 1"}]),
    ]


def test_rows_join_a_running_batch_and_sample_what_they_would_alone(tiny_backend):
    assert isinstance(tiny_backend, ContinuousBackend)
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    short, long_, other = _prompts(tiny_backend)
    alone = {name: tiny_backend.generate([p], greedy, max_new_tokens=[cap])[0]
             for name, p, cap in (("a", short, 12), ("b", long_, 12), ("c", other, 5))}

    batch = tiny_backend.open_batch(greedy)
    batch.add("a", short, max_new_tokens=12)
    done: dict[str, object] = {}
    for _ in range(4):  # "a" is mid-reply when the others arrive
        done.update(batch.step())
    assert batch.active == 1 and not done
    batch.add("b", long_, max_new_tokens=12)  # longer than the running batch: the batch is left-padded
    batch.add("c", other, max_new_tokens=5)
    steps = 0
    while batch.active:
        done.update(batch.step())
        steps += 1
    assert steps < 4 + 12 + 12  # they overlapped instead of running one after the other
    for name, sample in done.items():
        assert sample.token_ids == alone[name].token_ids, name
        assert sample.logprobs == pytest.approx(alone[name].logprobs, abs=1e-4), name
    assert len(done["c"].token_ids) == 5 and done["c"].finish_reason in ("length", "eos")


def test_joined_rows_keep_sessions_that_a_forward_pass_agrees_with(tiny_backend):
    tiny_backend.sessions.clear()
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6, seed=11)
    prompts = _prompts(tiny_backend)
    batch = tiny_backend.open_batch(sampling)
    batch.add(0, prompts[0], max_new_tokens=6, session="s0")
    batch.step()
    batch.add(1, prompts[1], max_new_tokens=6, session="s1")
    out = {}
    while batch.active:
        out.update(batch.step())
    for i in (0, 1):
        full = prompts[i] + out[i].token_ids
        scored = tiny_backend.score([full])[0][len(prompts[i]):]
        assert scored == pytest.approx(out[i].logprobs, abs=1e-4)
        assert tiny_backend.sessions.take(f"s{i}").token_ids == full[:-1]  # what the model read
    with pytest.raises(ValueError, match="already in this batch"):
        batch.add(2, prompts[2], max_new_tokens=3, session="x")
        batch.add(3, prompts[2], max_new_tokens=3, session="x")
    batch.close()
    assert batch.active == 0


def test_a_seeded_row_samples_the_same_whatever_shares_its_batch(tiny_backend):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8, seed=5)
    short, long_, other = _prompts(tiny_backend)

    def run(company: list[tuple[str, list[int]]]) -> dict:
        batch = tiny_backend.open_batch(sampling)
        for key, prompt in company:
            batch.add(key, prompt, max_new_tokens=8)
        out = {}
        while batch.active:
            out.update(batch.step())
        return out

    alone = run([("a", short)])["a"]
    crowded = run([("b", long_), ("c", other), ("a", short)])["a"]
    assert crowded.token_ids == alone.token_ids
    other_seed = tiny_backend.open_batch(sampling.model_copy(update={"seed": 6}))
    other_seed.add("a", short, max_new_tokens=8)
    draws = {}
    while other_seed.active:
        draws.update(other_seed.step())
    assert draws["a"].token_ids != alone.token_ids  # the seed does matter


def test_a_bfloat16_kv_cache_halves_kept_sessions_and_keeps_logprobs_within_tolerance():
    """kv_cache_dtype=bfloat16 beside float32 weights: sessions take half the bytes, and over two turns (the
    second read from the kept caches) the sampled log-probs stay within 0.02 of a float32 forward pass."""
    import torch

    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    with torch.no_grad():  # sharper attention than the random init's, so a wrong cache would show
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4)
    full, half = TransformersBackend(model, tokenizer), TransformersBackend(model, tokenizer, kv_cache_dtype="bfloat16")
    chat = ChatFormat(full)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16, seed=3)
    gaps: list[float] = []
    for name, backend in (("full", full), ("half", half)):
        prompts = [chat.prompt_ids([{"role": "user", "content": t}]) for t in ("Hi there", "go to the red ball")]
        for turn in range(2):
            out = backend.generate(prompts, sampling, sessions=[(name, i) for i in range(len(prompts))])
            if turn == 0:
                kept = backend.sessions.nbytes
            for prompt, sample in zip(prompts, out, strict=True):
                scored = backend.score([prompt + sample.token_ids])[0][len(prompt):]
                if name == "half":
                    gaps += [abs(a - b) for a, b in zip(scored, sample.logprobs, strict=True)]
                else:
                    assert scored == pytest.approx(sample.logprobs, abs=1e-4)
            prompts = [p + s.token_ids + chat.prompt_ids([{"role": "user", "content": "and now?"}])
                       for p, s in zip(prompts, out, strict=True)]
        if name == "full":
            kept_full = kept
    assert backend.sessions.stats.reused_tokens > 0  # the second turn read the kept bfloat16 caches
    assert kept * 2 == kept_full
    assert max(gaps) < 0.02 and sum(gaps) / len(gaps) < 0.005, (max(gaps), sum(gaps) / len(gaps))
    # The tolerance means something: the same reply after another prompt moves log-probs far more.
    reply = out[0].token_ids
    a, b = (full.score([p + reply])[0][len(p):] for p in (prompts[0], prompts[1]))
    assert sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(reply) > 0.1


def test_a_narrower_kv_cache_needs_sdpa_attention():
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    model.config._attn_implementation = "eager"
    with pytest.raises(ValueError, match="needs the model's attention to be 'sdpa'"):
        TransformersBackend(model, tokenizer, kv_cache_dtype="bfloat16")
    assert TransformersBackend(model, tokenizer, kv_cache_dtype="float32").kv_dtype is None  # the weights' own


def test_sampling_warns_of_no_deprecated_argument(tiny_backend):
    """transformers' deprecation warnings landed inside `agentgym eval`'s progress line: the backend must
    pass the cache under the name the installed transformers expects."""
    import warnings

    prompt = _prompts(tiny_backend)[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny_backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=4))
        tiny_backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=4), sessions=[("w", 1)])
        tiny_backend.generate([prompt + [5]], SamplingParams(temperature=0, max_new_tokens=4), sessions=[("w", 1)])
        tiny_backend.release_session(("w", 1))
    deprecations = [str(w.message) for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))]
    assert deprecations == []
