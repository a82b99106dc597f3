"""Constrained actions in the own decode engine: after `Action:` a reply can only name a listed action."""

from __future__ import annotations

import pytest

from agentgym_core.rollout import ChatFormat, Sample, SamplingParams

ACTIONS = ["turn left", "turn right", "go to red ball 1", "toggle", "toggle and go through grey door 2"]


def _prompt(backend, tail: str) -> list[int]:
    """A chat prompt whose assistant turn already reads ``tail`` (so a marker there applies to the first token)."""
    return ChatFormat(backend).prompt_ids([{"role": "user", "content": "Your goal: go to the red ball."}]) + \
        backend.encode(tail)


def _reply_action(backend, sample) -> str:
    ids = [t for t in sample.token_ids if t not in backend.eos_token_ids]
    return backend.decode(ids)


def _constrained_replies(backend, params, prompt, rows: int, actions=ACTIONS) -> dict:
    """``rows`` replies to ``prompt`` from one batch under ``params``, each constrained to ``actions``."""
    batch = backend.open_batch(params)
    for key in range(rows):
        batch.add(key, prompt, max_new_tokens=params.max_new_tokens, actions=actions)
    out = {}
    while batch.active:
        out.update(batch.step())
    return out


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_after_the_marker_every_reply_names_a_listed_action_then_ends(tiny_backend, temperature):
    params = SamplingParams(temperature=temperature, max_new_tokens=32, seed=3, constrain_actions=True)
    prompt = _prompt(tiny_backend, "Thought: I see it.\nAction:")
    out = _constrained_replies(tiny_backend, params, prompt, 12)
    names = set()
    for sample in out.values():
        assert sample.finish_reason == "eos", sample  # the action is complete, and only the end may follow
        names.add(_reply_action(tiny_backend, sample))
    assert names <= {f" {a}" for a in ACTIONS}, names
    if temperature:  # twelve seeded rows at temperature 1 do not all draw the same action
        assert len(names) > 1


def test_the_random_model_alone_writes_no_listed_action(tiny_backend):
    """The check above can fail: unconstrained, the same rows write text that is no listed action."""
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=3)
    prompt = _prompt(tiny_backend, "Thought: I see it.\nAction:")
    out = dict(zip(range(12), tiny_backend.generate([prompt] * 12, params), strict=True))
    assert not {_reply_action(tiny_backend, s) for s in out.values()} <= {f" {a}" for a in ACTIONS}


def test_recorded_logprobs_stay_the_unconstrained_ones(tiny_backend):
    """The mask shapes the draw; the log-probs are those the learner recomputes (the full softmax)."""
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=5, constrain_actions=True)
    prompt = _prompt(tiny_backend, "Thought: ok.\nAction:")
    batch = tiny_backend.open_batch(params)
    batch.add(0, prompt, max_new_tokens=16, actions=ACTIONS)
    out = {}
    while batch.active:
        out.update(batch.step())
    sample = out[0]
    scored = tiny_backend.score([prompt + sample.token_ids])[0][len(prompt):]
    assert scored == pytest.approx(sample.logprobs, abs=1e-4)
    assert sum(sample.logprobs) < -1.0  # a random model gives the forced tokens little mass: not renormalised


def test_rows_without_actions_or_before_the_marker_sample_what_they_would_unconstrained(tiny_backend):
    free = SamplingParams(temperature=1.0, max_new_tokens=40, seed=7)
    constrained = free.model_copy(update={"constrain_actions": True})
    prompt = _prompt(tiny_backend, "Thought:")  # no marker: the reply is free until it writes one
    alone = tiny_backend.generate([prompt, prompt], free, max_new_tokens=[40, 40])
    batch = tiny_backend.open_batch(constrained)
    batch.add(0, prompt, max_new_tokens=40, actions=ACTIONS)
    batch.add(1, prompt, max_new_tokens=40)  # no actions: never constrained
    out = {}
    while batch.active:
        out.update(batch.step())
    assert out[1].token_ids == alone[1].token_ids
    # The random model writes no marker of its own: the row samples what it would unconstrained until only
    # room for the marker, the longest action and the end is left; then the marker is written for it.
    marker = tiny_backend.encode("\nAction:")
    reserve = len(marker) + max(len(tiny_backend.encode(f" {a}")) for a in ACTIONS) + 1
    free_part = 40 - reserve
    assert "Action:" not in tiny_backend.decode(alone[0].token_ids)
    assert not set(alone[0].token_ids[:free_part]) & tiny_backend.eos_token_ids  # it had no end to ban there
    assert out[0].token_ids[:free_part] == alone[0].token_ids[:free_part]
    assert out[0].token_ids[free_part:free_part + len(marker)] == marker
    assert _reply_action(tiny_backend, Sample(token_ids=out[0].token_ids[free_part + len(marker):], logprobs=[],
                                              finish_reason="eos")) in {f" {a}" for a in ACTIONS}
    assert out[0].finish_reason == "eos"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_constrained_reply_names_a_listed_action_even_one_that_never_writes_the_marker(tiny_backend,
                                                                                             temperature):
    """No end before the marker, and the marker written when the budget runs low: the random model, which
    writes neither marker nor action by itself (the test above), ends every reply with a listed action."""
    params = SamplingParams(temperature=temperature, max_new_tokens=24, seed=11, constrain_actions=True)
    prompt = _prompt(tiny_backend, "Thought:")
    out = _constrained_replies(tiny_backend, params, prompt, 8)
    for sample in out.values():
        text = _reply_action(tiny_backend, sample)
        assert sample.finish_reason == "eos", text
        assert text.rsplit("Action:", 1)[-1] in {f" {a}" for a in ACTIONS}, text
        assert len(sample.token_ids) <= 24


def test_a_reply_may_not_end_before_naming_its_action_and_draws_what_it_would_until_then(tiny_backend):
    free = SamplingParams(temperature=1.0, max_new_tokens=64, seed=38)  # this seed's reply ends early (27 tokens)
    prompt = _prompt(tiny_backend, "Thought:")
    alone = tiny_backend.generate([prompt], free, max_new_tokens=[64])[0]
    assert alone.finish_reason == "eos" and len(alone.token_ids) < 30, alone  # the end it would have drawn
    end = len(alone.token_ids) - 1
    batch = tiny_backend.open_batch(free.model_copy(update={"constrain_actions": True}))
    batch.add(0, prompt, max_new_tokens=64, actions=ACTIONS)  # the marker is forced only past token 40
    out = {}
    while batch.active:
        out.update(batch.step())
    reply = out[0]
    assert reply.token_ids[:end] == alone.token_ids[:end]  # the same draws up to the banned end
    assert reply.token_ids[end] not in tiny_backend.eos_token_ids
    scored = tiny_backend.score([prompt + reply.token_ids])[0][len(prompt):]  # the redrawn token's too
    assert scored == pytest.approx(reply.logprobs, abs=1e-4)
    assert reply.finish_reason == "eos"
    assert _reply_action(tiny_backend, reply).rsplit("Action:", 1)[-1] in {f" {a}" for a in ACTIONS}


def test_without_the_guarantee_a_reply_may_end_before_the_marker_as_training_rollouts_sample(tiny_backend):
    """guarantee_action=False (RolloutConfig.train_sampling): the reply above ends where it would unconstrained,
    with no action, so the environment refuses it and RL learns to write the marker."""
    free = SamplingParams(temperature=1.0, max_new_tokens=64, seed=38)
    prompt = _prompt(tiny_backend, "Thought:")
    alone = tiny_backend.generate([prompt], free, max_new_tokens=[64])[0]
    batch = tiny_backend.open_batch(free.model_copy(update={"constrain_actions": True, "guarantee_action": False}))
    batch.add(0, prompt, max_new_tokens=64, actions=ACTIONS)
    out = {}
    while batch.active:
        out.update(batch.step())
    assert out[0].token_ids == alone.token_ids and out[0].finish_reason == "eos"
    assert "Action:" not in tiny_backend.decode(out[0].token_ids)
    tiny = SamplingParams(temperature=1.0, max_new_tokens=6, seed=2, constrain_actions=True, guarantee_action=False)
    batch = tiny_backend.open_batch(tiny)
    batch.add(0, prompt, max_new_tokens=6, actions=["turn left"])
    out = {}
    while batch.active:
        out.update(batch.step())
    assert tiny_backend.decode(out[0].token_ids[:len(tiny_backend.encode("\nAction:"))]) != "\nAction:"  # not forced


def test_a_reply_shorter_than_the_marker_and_an_action_is_given_the_marker_at_once(tiny_backend):
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=2, constrain_actions=True)
    batch = tiny_backend.open_batch(params)
    batch.add(0, _prompt(tiny_backend, "Thought:"), max_new_tokens=6, actions=["turn left"])
    out = {}
    while batch.active:
        out.update(batch.step())
    assert tiny_backend.decode(out[0].token_ids[:len(tiny_backend.encode("\nAction:"))]) == "\nAction:"


def test_actions_need_a_batch_opened_to_constrain_them(tiny_backend):
    batch = tiny_backend.open_batch(SamplingParams(temperature=0.0, max_new_tokens=4))
    with pytest.raises(ValueError, match="constrain_actions=True"):
        batch.add(0, _prompt(tiny_backend, "Action:"), max_new_tokens=4, actions=ACTIONS)


def test_the_library_engine_refuses_constrained_actions_when_the_batch_opens(tiny_backend):
    from agentgym_backend_transformers import TransformersBackend

    other = TransformersBackend(tiny_backend.model, tiny_backend.tokenizer, decode_engine="library")
    with pytest.raises(ValueError, match="decode_engine=own"):
        other.open_batch(SamplingParams(temperature=0.0, max_new_tokens=4, constrain_actions=True))
