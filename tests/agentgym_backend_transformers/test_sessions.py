"""KV caches kept between turns: same samples and log-probs as re-reading the history, less prefill."""

from __future__ import annotations

import pytest

from agentgym_core.rollout import ChatFormat, SamplingParams

GREEDY = SamplingParams(temperature=0, max_new_tokens=8)


def _first_prompts(backend) -> list[list[int]]:
    chat = ChatFormat(backend)
    return [
        chat.prompt_ids([{"role": "system", "content": "You play a game."}, {"role": "user", "content": "Start."}]),
        chat.prompt_ids([{"role": "system", "content": "Guess."}, {"role": "user", "content": "A number 1 to 20?"}]),
        chat.prompt_ids([{"role": "system", "content": "Go."}, {"role": "user", "content": "Hi"}]),
    ]


def _multi_turn(backend, params, *, sessions, turns=3, observations=("too low", "too high, guess again", "no")):
    """Roll three conversations for ``turns`` turns; each turn appends reply + templated observation."""
    chat = ChatFormat(backend)
    histories = _first_prompts(backend)
    replies = []
    spans: list[list[tuple[int, int]]] = [[] for _ in histories]  # where each reply sits in its history
    for turn in range(turns):
        keys = [("t", i) for i in range(len(histories))] if sessions else None
        call = params.model_copy(update={"seed": None if params.seed is None else params.seed + turn})
        samples = backend.generate(histories, call, sessions=keys)
        replies.append(samples)
        for i, sample in enumerate(samples):
            obs = observations[(i + turn) % len(observations)] * (1 + i)  # different lengths per row
            spans[i].append((len(histories[i]), len(histories[i]) + len(sample.token_ids)))
            histories[i] = [*histories[i], *sample.token_ids, *chat.turn_ids(sample.token_ids, obs, with_system=True)]
    return histories, replies, spans


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=1.0, max_new_tokens=8, seed=3)])
def test_reused_caches_sample_what_a_full_prefill_samples(tiny_backend, params):
    tiny_backend.sessions.clear()
    before = tiny_backend.sessions.stats.reused_tokens
    fresh_hist, fresh, _ = _multi_turn(tiny_backend, params, sessions=False)
    reused_hist, reused, spans = _multi_turn(tiny_backend, params, sessions=True)
    assert tiny_backend.sessions.stats.reused_tokens > before  # the later turns did read from the cache
    assert reused_hist == fresh_hist
    for turn_fresh, turn_reused in zip(fresh, reused, strict=True):
        for a, b in zip(turn_fresh, turn_reused, strict=True):
            assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    # And a plain forward pass over each whole history reproduces the reused run's log-probs.
    for row, history in enumerate(reused_hist):
        scored = tiny_backend.score([history], temperature=params.logprob_temperature)[0]
        for turn, (start, end) in enumerate(spans[row]):
            assert history[start:end] == reused[turn][row].token_ids
            assert scored[start:end] == pytest.approx(reused[turn][row].logprobs, abs=1e-4)
    for i in range(3):
        tiny_backend.release_session(("t", i))
    assert len(tiny_backend.sessions) == 0


def test_a_reused_key_with_another_history_only_costs_a_full_prefill(tiny_backend):
    tiny_backend.sessions.clear()
    first, other, _ = _first_prompts(tiny_backend)
    tiny_backend.generate([first], GREEDY, sessions=["k"])
    assert len(tiny_backend.sessions) == 1
    with_stale_key = tiny_backend.generate([other], GREEDY, sessions=["k"])[0]
    without = tiny_backend.generate([other], GREEDY)[0]
    assert with_stale_key.token_ids == without.token_ids
    assert with_stale_key.logprobs == pytest.approx(without.logprobs, abs=1e-4)
    tiny_backend.release_session("k")


def test_the_memory_budget_evicts_oldest_sessions(tiny_backend):
    from agentgym_backend_transformers import TransformersBackend

    small = TransformersBackend(tiny_backend.model, tiny_backend.tokenizer, session_cache_mb=0.05)
    prompts = _first_prompts(small)
    small.generate(prompts, GREEDY, sessions=["a", "b", "c"])
    assert small.sessions.nbytes <= 0.05 * 2**20
    assert small.sessions.stats.evictions >= 1 and len(small.sessions) < 3
    # Still correct after eviction: the evicted rows are simply read in full again.
    _, reused, _ = _multi_turn(small, GREEDY, sessions=True, turns=2)
    _, fresh, _ = _multi_turn(small, GREEDY, sessions=False, turns=2)
    assert [[s.token_ids for s in t] for t in reused] == [[s.token_ids for s in t] for t in fresh]


def test_duplicate_session_keys_in_one_call_are_refused(tiny_backend):
    prompt = _first_prompts(tiny_backend)[0]
    with pytest.raises(ValueError, match="appears twice"):
        tiny_backend.generate([prompt, prompt], GREEDY, sessions=["x", "x"])
    with pytest.raises(ValueError, match="one key"):
        tiny_backend.generate([prompt], GREEDY, sessions=["x", "y"])


def test_new_weights_drop_the_caches(tiny_backend):
    prompt = _first_prompts(tiny_backend)[0]
    tiny_backend.generate([prompt], GREEDY, sessions=["w"])
    assert len(tiny_backend.sessions) == 1
    tiny_backend.load_weights(dict(tiny_backend.model.state_dict()))
    assert len(tiny_backend.sessions) == 0


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=1.0, max_new_tokens=8, seed=5)])
def test_rows_read_one_by_one_or_padded_together_sample_the_same(tiny_backend, params):
    """prefill='per_row' (the CPU default), 'batched' in one pass and 'batched' in passes bounded by
    prefill_chunk_tokens differ only in how joining rows are computed."""
    runs, widest_pass = {}, {}
    modes = {"per_row": ("per_row", None), "batched": ("batched", None), "batched_in_chunks": ("batched", 1)}
    forward = tiny_backend.model.forward
    for name, (mode, chunk) in modes.items():
        rows_read: list[int] = []

        def counting(*args, _seen=rows_read, **kwargs):
            ids = kwargs.get("input_ids")
            if ids is not None and ids.shape[1] > 1:  # a prefill pass (decode steps feed one column)
                _seen.append(ids.shape[0])
            return forward(*args, **kwargs)

        tiny_backend.prefill, tiny_backend.prefill_chunk_tokens = mode, chunk
        tiny_backend.model.forward = counting
        try:
            tiny_backend.sessions.clear()
            runs[name] = _multi_turn(tiny_backend, params, sessions=True)
        finally:
            tiny_backend.prefill, tiny_backend.prefill_chunk_tokens = "auto", 16384
            del tiny_backend.model.forward
            for i in range(3):
                tiny_backend.release_session(("t", i))
        widest_pass[name] = max(rows_read)
    assert widest_pass == {"per_row": 1, "batched": 3, "batched_in_chunks": 1}  # the bound split the passes
    hist_a, replies_a, _ = runs["per_row"]
    for other in ("batched", "batched_in_chunks"):
        hist_b, replies_b, _ = runs[other]
        assert hist_a == hist_b
        for turn_a, turn_b in zip(replies_a, replies_b, strict=True):
            for a, b in zip(turn_a, turn_b, strict=True):
                assert a.token_ids == b.token_ids
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_prefill_groups_keep_each_padded_pass_under_the_bound():
    from agentgym_backend_transformers.decoding import prefill_groups

    lengths, reuse = [100, 120, 30, 500, 110], [90, 0, 20, 0, 100]
    assert prefill_groups(lengths, reuse, None) == [[0, 1, 2, 3, 4]]
    # rows x (widest cached + widest new): [0, 1] is 2 x (90 + 120) = 420; adding row 2 makes 3 x 210 = 630
    assert prefill_groups(lengths, reuse, 500) == [[0, 1], [2], [3], [4]]  # row 3 (500 columns) alone
    assert prefill_groups(lengths, reuse, 10**6) == [[0, 1, 2, 3, 4]]
    assert prefill_groups(lengths, reuse, 1) == [[0], [1], [2], [3], [4]]
    assert prefill_groups([], [], 8) == []


def test_an_unknown_prefill_mode_is_refused(tiny_backend):
    from agentgym_backend_transformers import TransformersBackend

    with pytest.raises(ValueError, match="per_row"):
        TransformersBackend(tiny_backend.model, tiny_backend.tokenizer, prefill="rows")
    with pytest.raises(ValueError, match="prefill_chunk_tokens=0"):
        TransformersBackend(tiny_backend.model, tiny_backend.tokenizer, prefill_chunk_tokens=0)
