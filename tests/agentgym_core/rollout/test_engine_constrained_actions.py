"""rollout.constrain_actions through the engine: each reply is offered its environment's actions of the moment."""

from __future__ import annotations

import json

import pytest
from guess_env import GuessEnv

from agentgym_core.rollout import EngineConfig, EpisodeSpec, RolloutEngine, SamplingParams
from agentgym_core.rollout.action_choices import ActionConstraint, action_trie


def _config(**sampling) -> EngineConfig:
    return EngineConfig(sampling=SamplingParams(max_new_tokens=8, seed=0, constrain_actions=True, **sampling),
                        max_turns=3, step_timeout_s=30.0)


class _Recorded:
    """The backend's real running batch, with the actions each reply was offered written down."""

    def __init__(self, batch, offered: list[list[str] | None]) -> None:
        self.batch, self.offered = batch, offered

    @property
    def active(self) -> int:
        return self.batch.active

    def add(self, key, prompt, *, max_new_tokens, session=None, actions=None):
        self.offered.append(actions)
        self.batch.add(key, prompt, max_new_tokens=max_new_tokens, session=session, actions=actions)

    def step(self):
        return self.batch.step()

    def close(self):
        self.batch.close()


def test_each_reply_is_offered_the_actions_its_observation_lists(tiny_backend, monkeypatch):
    pytest.importorskip("agentgym_env_babyai")
    from agentgym_env_babyai import BabyAIEnv

    offered: list[list[str] | None] = []
    real_open = tiny_backend.open_batch
    monkeypatch.setattr(tiny_backend, "open_batch", lambda params: _Recorded(real_open(params), offered))
    with RolloutEngine(tiny_backend, BabyAIEnv, num_envs=2, config=_config()) as engine:
        trajs = engine.run([EpisodeSpec(task_id=t) for t in (0, 1)])
    listed = []  # the "Available actions: [...]" of every observation a reply answered, in the order replies came
    for traj in trajs:
        user = [m["content"] for m in traj.messages if m["role"] == "user"]
        listed += [json.loads(text.rsplit("Available actions: ", 1)[1]) for text in user[: len(traj.turns)]]
    assert sorted(map(tuple, offered)) == sorted(map(tuple, listed))  # type: ignore[arg-type]
    assert all(offered)


def test_an_environment_that_lists_no_actions_is_refused_with_what_to_do(tiny_backend):
    with RolloutEngine(tiny_backend, GuessEnv, num_envs=1, config=_config()) as engine, \
            pytest.raises(ValueError, match="lists no available actions.*constrain_actions off"):
        engine.run([EpisodeSpec(task_id=0)])


def test_a_backend_without_a_running_batch_is_refused(tiny_backend):
    class OneCall:  # generate() only, as a backend without open_batch has
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            if name in ("open_batch", "release_session"):
                raise AttributeError(name)
            return getattr(self.inner, name)

    with RolloutEngine(OneCall(tiny_backend), GuessEnv, num_envs=1, config=_config()) as engine, \
            pytest.raises(ValueError, match="no running batch"):
        engine.run([EpisodeSpec(task_id=0)])


def test_the_constraint_starts_at_the_marker_and_ends_with_a_complete_action(tiny_backend):
    encode, decode, end = tiny_backend.encode, tiny_backend.decode, sorted(tiny_backend.eos_token_ids)
    actions = ["toggle", "toggle and go through grey door 2", "turn left"]
    constraint = ActionConstraint(actions, encode, decode, end, context=encode("Thought: hmm"))
    assert not constraint.active and constraint.allowed() is None
    for token in encode("\nAction:"):
        constraint.feed(token)
    assert constraint.active
    for token in encode(" toggle"):
        assert token in constraint.allowed()
        constraint.feed(token)
    allowed = constraint.allowed()  # "toggle" is complete, and it begins a longer action
    assert set(end) <= set(allowed) and encode(" toggle and")[len(encode(" toggle"))] in allowed
    for token in encode(" and go through grey door 2")[:-1]:
        constraint.feed(token)
    assert end[0] not in constraint.allowed()  # mid-action the reply cannot end
    constraint.feed(encode(" toggle and go through grey door 2")[-1])
    assert constraint.allowed() == end


def test_a_marker_token_that_carries_the_space_starts_the_actions_without_it(tiny_backend):
    encode = tiny_backend.encode
    trie = action_trie(["turn left"], encode, leading_space=False)
    assert list(trie.children) == encode("turn left")[:1]
    with pytest.raises(ValueError, match="no actions"):
        ActionConstraint([], encode, tiny_backend.decode, [2])
    blank = ActionConstraint(["  "], encode, tiny_backend.decode, [2], context=encode("Action:"))
    assert not blank.active and blank.allowed() is None  # nothing listed to constrain to: the reply stays free

    assert blank.banned() == []  # nor is its end held back


def test_before_the_marker_the_end_is_banned_and_a_spent_budget_writes_the_marker(tiny_backend):
    encode, decode, end = tiny_backend.encode, tiny_backend.decode, sorted(tiny_backend.eos_token_ids)
    marker = encode("\nAction:")
    reserve = len(marker) + len(encode(" turn right")) + 1  # the marker, the longest action, the end
    constraint = ActionConstraint(["turn left", "turn right"], encode, decode, end, max_tokens=reserve + 2)
    assert constraint.allowed() is None and constraint.banned() == end and not constraint.forced
    for token in encode(" hm")[:2]:  # two free tokens: the budget left is then exactly the reserve
        constraint.feed(token)
    assert constraint.forced
    for token in marker:
        assert constraint.allowed() == [token]  # the marker, token by token
        constraint.feed(token)
    assert constraint.active and not constraint.forced and constraint.banned() == []
    assert sorted(constraint.allowed()) == sorted({encode(" turn left")[0], encode(" turn right")[0]})
    unbounded = ActionConstraint(["turn left"], encode, decode, end)  # no budget given: never forced
    for token in encode(" a long thought with no marker in it at all"):
        unbounded.feed(token)
    assert not unbounded.forced and unbounded.banned() == end
    unguaranteed = ActionConstraint(["turn left"], encode, decode, end, max_tokens=reserve, guarantee=False)
    assert unguaranteed.banned() == [] and not unguaranteed.forced  # training rollouts: free until the marker
    for token in encode(" hm"):
        unguaranteed.feed(token)
    assert unguaranteed.allowed() is None and not unguaranteed.forced
    for token in encode("\nAction:"):
        unguaranteed.feed(token)
    assert unguaranteed.active  # the marker, once written, constrains as before

