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
