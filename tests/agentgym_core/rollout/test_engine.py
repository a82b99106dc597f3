"""The rollout engine against a real (small) environment, in-process and over HTTP."""

from __future__ import annotations

import functools
import time

import pytest
from guess_env import GuessEnv

from agentgym_core.rollout import EngineConfig, EpisodeSpec, RolloutEngine, SamplingParams
from agentgym_core.schedulers import FixedRounds
from agentgym_core.testing.trajectory import check_trajectory


def _config(**overrides) -> EngineConfig:
    fields = {"sampling": SamplingParams(max_new_tokens=10, seed=0), "max_turns": 4, "step_timeout_s": 10.0}
    fields.update(overrides)
    return EngineConfig(**fields)


def test_multi_turn_trajectories_pass_the_auditor(tiny_backend):
    GuessEnv.created = 0
    with RolloutEngine(tiny_backend, GuessEnv, num_envs=3, config=_config()) as engine:
        trajs = engine.run([EpisodeSpec(task_id=i, sample_index=i % 2) for i in range(6)])
    assert GuessEnv.created <= 3  # N=6 episodes share M=3 instances
    assert [t.task_id for t in trajs] == list(range(6))
    for traj in trajs:
        report = check_trajectory(traj, tiny_backend)
        assert report.text_matches_template
        assert report.max_logprob_error is not None and report.max_logprob_error < 1e-3
        assert traj.env == "guess" and not traj.failed
        assert traj.num_turns >= 1 and traj.turns[0].context_span.start == 0
        assert traj.gen_seconds > 0 and traj.env_seconds > 0
    # Random replies rarely guess right: most run out of turns, and say so.
    assert any(t.truncation_reason == "max_turns" and t.num_turns == 4 for t in trajs)
    assert engine.stats.trajectories == 6 and engine.stats.failed == 0


def test_round_scheduler_sets_the_turn_budget(tiny_backend):
    with RolloutEngine(tiny_backend, GuessEnv, num_envs=2, config=_config(), scheduler=FixedRounds(2)) as engine:
        trajs = engine.run([EpisodeSpec(task_id=1), EpisodeSpec(task_id=2)])
    assert all(t.max_turns == 2 and t.num_turns <= 2 for t in trajs)
    assert any(t.truncation_reason == "max_turns" for t in trajs)


def test_token_budget_truncates_with_a_flag(tiny_backend):
    config = _config(max_total_tokens=120, max_turns=20)
    with RolloutEngine(tiny_backend, GuessEnv, num_envs=2, config=config) as engine:
        trajs = engine.run([EpisodeSpec(task_id=3), EpisodeSpec(task_id=4)])
    for traj in trajs:
        check_trajectory(traj, tiny_backend)
        assert len(traj.token_ids) <= 120
        if not traj.terminated:
            assert traj.truncated and traj.truncation_reason == "token_budget"


def test_env_failure_ends_only_that_trajectory(tiny_backend):
    make = functools.partial(GuessEnv, fail_on_step=2)
    with RolloutEngine(tiny_backend, make, num_envs=2, config=_config()) as engine:
        trajs = engine.run([EpisodeSpec(task_id=i) for i in range(3)])
    for traj in trajs:
        check_trajectory(traj, tiny_backend)
        if traj.num_turns >= 2:  # the crash is on the second step (unless it guessed right first)
            assert traj.failed and "env_error: step raised RuntimeError" in traj.failure_reason
    assert engine.stats.failed == sum(t.failed for t in trajs) >= 1
    assert engine.stats.failure_reasons == {"env_error": engine.stats.failed}


def test_reset_failure_is_recorded(tiny_backend):
    with RolloutEngine(tiny_backend, functools.partial(GuessEnv, fail_on_reset=True), num_envs=1,
                       config=_config()) as engine:
        (traj,) = engine.run([EpisodeSpec(task_id=0)])
    assert traj.failed and "reset raised ConnectionError" in traj.failure_reason
    assert traj.token_ids == [] and traj.num_turns == 0
    check_trajectory(traj, tiny_backend)


def test_step_timeout_fails_the_trajectory_without_waiting(tiny_backend):
    make = functools.partial(GuessEnv, step_delay=4.0, slow_tasks=[0])
    start = time.perf_counter()
    with RolloutEngine(tiny_backend, make, num_envs=2, config=_config(step_timeout_s=0.3)) as engine:
        slow, fast = engine.run([EpisodeSpec(task_id=0), EpisodeSpec(task_id=1)])
    assert time.perf_counter() - start < 3.5  # did not sit out the stalled step (margin for a loaded machine)
    assert slow.failed and slow.failure_reason.startswith("timeout: env call timeout")
    assert not fast.failed
    check_trajectory(slow, tiny_backend)


def test_episode_timeout(tiny_backend):
    make = functools.partial(GuessEnv, step_delay=0.2)
    config = _config(episode_timeout_s=0.5, max_turns=20)
    with RolloutEngine(tiny_backend, make, num_envs=1, config=config) as engine:
        (traj,) = engine.run([EpisodeSpec(task_id=5)])
    assert traj.failed and "episode timeout" in traj.failure_reason
    check_trajectory(traj, tiny_backend)


@pytest.mark.parametrize("synchronous", [False, True])
def test_no_round_barrier_unless_asked(tiny_backend, synchronous):
    """A fast trajectory must not wait for a slow one's steps (it does in the synchronous baseline)."""
    make = functools.partial(GuessEnv, step_delay=1.0, slow_tasks=[0])  # slow enough to stand out on a loaded machine
    finished: dict[int, float] = {}
    start = time.perf_counter()
    config = _config(max_turns=3, synchronous=synchronous)
    with RolloutEngine(tiny_backend, make, num_envs=2, config=config) as engine:
        _, fast = engine.run([EpisodeSpec(task_id=0), EpisodeSpec(task_id=1)],
                             on_done=lambda t: finished.setdefault(t.task_id, time.perf_counter() - start))
    assert fast.num_turns >= 2  # so there was a round to wait in
    if synchronous:  # waited for the slow env (1 s) in every round but its last
        assert finished[1] >= 1.0 * (fast.num_turns - 1) - 0.02
    else:
        assert finished[1] < finished[0] - 0.3


def test_rollouts_over_http_pass_the_auditor(tiny_backend):
    from agentgym_core.http.client import HTTPEnv
    from agentgym_core.testing import serve_env

    with serve_env(GuessEnv) as url, RolloutEngine(
        tiny_backend, lambda: HTTPEnv(url, env="guess"), num_envs=3, config=_config()
    ) as engine:
        trajs = engine.run([EpisodeSpec(task_id=40 + i) for i in range(4)])
    for traj in trajs:
        check_trajectory(traj, tiny_backend)
        assert not traj.failed and traj.env == "guess" and traj.num_turns >= 1
        assert traj.messages[0]["content"].startswith("Guess the secret number")


def test_http_server_gone_is_a_recorded_failure(tiny_backend):
    from agentgym_core.http.client import HTTPEnv

    config = _config(step_timeout_s=5.0)
    with RolloutEngine(tiny_backend, lambda: HTTPEnv("http://127.0.0.1:9", env="guess", timeout=1.0), num_envs=1,
                       config=config) as engine:
        (traj,) = engine.run([EpisodeSpec(task_id=0)])
    assert traj.failed and traj.failure_reason.startswith("env_error: reset raised")


def test_kept_kv_caches_change_nothing_but_the_prefill(tiny_backend):
    """Reusing each trajectory's KV cache between turns gives the same trajectories, freed at the end."""
    greedy = SamplingParams(temperature=0, max_new_tokens=10)
    runs = {}
    for reuse in (False, True):
        prefilled = tiny_backend.sessions.stats.prefilled_tokens
        with RolloutEngine(tiny_backend, GuessEnv, num_envs=3,
                           config=_config(sampling=greedy, reuse_kv_cache=reuse)) as engine:
            runs[reuse] = engine.run([EpisodeSpec(task_id=i) for i in range(3)])
        runs[reuse, "prefilled"] = tiny_backend.sessions.stats.prefilled_tokens - prefilled
        assert len(tiny_backend.sessions) == 0  # every trajectory's cache was released
    for plain, reused in zip(runs[False], runs[True], strict=True):
        assert reused.token_ids == plain.token_ids and reused.loss_mask == plain.loss_mask
        assert reused.logprobs == pytest.approx(plain.logprobs, abs=1e-4)
        check_trajectory(reused, tiny_backend)
    assert sum(t.num_turns for t in runs[True]) > 3  # multi-turn, so there was history to reuse
    assert runs[True, "prefilled"] < runs[False, "prefilled"] / 2


def test_same_seed_same_trajectories_with_or_without_the_round_barrier(tiny_backend):
    """Per-trajectory random streams: scheduling changes when a reply is sampled, never what is sampled."""
    runs = {}
    for synchronous in (False, True):
        with RolloutEngine(tiny_backend, GuessEnv, num_envs=4, config=_config(synchronous=synchronous)) as engine:
            runs[synchronous] = engine.run([EpisodeSpec(task_id=i) for i in range(4)])
    for free, barrier in zip(runs[False], runs[True], strict=True):
        assert free.token_ids == barrier.token_ids
        assert free.logprobs == pytest.approx(barrier.logprobs, abs=1e-4)


def test_the_environment_gets_the_action_without_the_end_of_turn_token():
    """A reply that ends with the model's end-of-turn token is parsed without it (regression: the env
    once received 'guess 3<|im_end|>' and answered every well-formed reply as an invalid action)."""
    import torch

    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.testing.tiny_model import tiny_chat_model

    class Recording(GuessEnv):
        actions: list[str] = []

        def step(self, action):
            Recording.actions.append(action)
            return super().step(action)

    model, tokenizer = tiny_chat_model(seed=0)
    backend = TransformersBackend(model, tokenizer)
    env = Recording()
    prompt = tokenizer.apply_chat_template(
        [{"role": "system", "content": env.instruction}, {"role": "user", "content": env.reset(0).observation}],
        tokenize=False, add_generation_prompt=True)
    reply = tokenizer.encode("Action: guess 3", add_special_tokens=False) + [tokenizer.eos_token_id]
    ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False) + reply])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):  # overfit the tiny model on this one reply, so greedy decoding says it and stops
        logits = model(input_ids=ids[:, :-1]).logits[0, -len(reply):]
        loss = torch.nn.functional.cross_entropy(logits, ids[0, -len(reply):])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    config = _config(sampling=SamplingParams(temperature=0.0, max_new_tokens=16, seed=0), max_turns=1)
    with RolloutEngine(backend, Recording, num_envs=1, config=config) as engine:
        traj, = engine.run([EpisodeSpec(task_id=0)])
    assert traj.turns[0].finish_reason == "eos" and traj.token_ids[-1] == tokenizer.eos_token_id
    assert Recording.actions == ["guess 3"] and traj.turns[0].action == "guess 3"
    assert traj.messages[-2]["content"] == "Action: guess 3"
