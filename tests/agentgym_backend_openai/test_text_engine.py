"""The text-level rollout engine: endings, failures, timeouts, budgets, concurrency.

Two real chat backends drive it: the tiny model behind serve-model's HTTP app (through the
`openai` backend), and a scripted binary-search player (a ChatBackend that reads the
conversation, so success paths can be tested without a trained model).
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from openai_test_support import SERVED_NAME

from agentgym_backend_openai import make_backend
from agentgym_core.rollout import EngineConfig, EpisodeSpec, SamplingParams
from agentgym_core.rollout.text_engine import (
    ChatReply,
    TextRolloutEngine,
    TextTrajectory,
    text_trajectory_log_record,
)

GuessEnv = pytest.importorskip("agentgym_env_guess").GuessEnv


class BinarySearchPlayer:
    """A scripted ChatBackend: plays the guessing game from the messages alone (thread-safe, stateless)."""

    name = "binary-search"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def chat(self, messages, params: SamplingParams) -> ChatReply:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(self.delay_s)
        low, high = 1, 100
        for reply, answer in zip(messages[2::2], messages[3::2], strict=False):
            guess = int(reply["content"].split()[-1])
            if "higher" in answer["content"]:
                low = guess + 1
            elif "lower" in answer["content"]:
                high = guess - 1
        with self._lock:
            self.in_flight -= 1
        return ChatReply(text=f"Thought: halve it.\nAction: guess {(low + high) // 2}", finish_reason="eos",
                         prompt_tokens=10 * len(messages), completion_tokens=9)


class FaultyGuess(GuessEnv):
    """The guessing game with real faults: raise on a task's step, or stall on another's."""

    def __init__(self, fail_task: int = -1, slow_task: int = -1, stall_s: float = 2.0) -> None:
        super().__init__()
        self.fail_task, self.slow_task, self.stall_s = fail_task, slow_task, stall_s
        self.task = -1

    def reset(self, task_id, seed=None):
        self.task = task_id
        return super().reset(task_id, seed)

    def step(self, action):
        if self.task == self.fail_task:
            raise RuntimeError("the simulator crashed")
        if self.task == self.slow_task:
            time.sleep(self.stall_s)
        return super().step(action)


def _specs(*tasks):
    return [EpisodeSpec(task_id=t, sample_index=i) for i, t in enumerate(tasks)]


def test_scripted_player_succeeds_and_rewards_are_recorded():
    config = EngineConfig(max_turns=10, sampling=SamplingParams(max_new_tokens=16))
    with TextRolloutEngine(BinarySearchPlayer(), GuessEnv, num_envs=3, config=config) as engine:
        trajs = engine.run(_specs(900, 901, 902, 903))
    assert [t.task_id for t in trajs] == [900, 901, 902, 903]
    for traj in trajs:
        assert isinstance(traj, TextTrajectory) and not traj.trainable
        assert traj.success and traj.terminated and not traj.truncated and traj.outcome_reward == 1.0
        assert traj.turns[-1].reward == 1.0 and traj.turns[-1].observation.endswith("is correct!")
        assert traj.env == "guess" and traj.completion_tokens == 9 * traj.num_turns
        record = text_trajectory_log_record(traj)
        assert record["success"] and record["trainable"] is False and record["usage"]["completion_tokens"] > 0
    assert engine.stats.trajectories == 4 and engine.stats.failed == 0


def test_no_round_barrier_episodes_run_concurrently():
    player = BinarySearchPlayer(delay_s=0.05)
    config = EngineConfig(max_turns=10)
    start = time.perf_counter()
    with TextRolloutEngine(player, GuessEnv, num_envs=4, config=config) as engine:
        trajs = engine.run(_specs(900, 901, 902, 903))
    wall = time.perf_counter() - start
    calls = sum(t.num_turns for t in trajs)
    assert player.most_in_flight == 4
    assert wall < 0.05 * calls * 0.75  # one call at a time would take 0.05 s per call


def test_env_failure_ends_only_that_trajectory():
    config = EngineConfig(max_turns=10)
    with TextRolloutEngine(BinarySearchPlayer(), lambda: FaultyGuess(fail_task=901), num_envs=2,
                           config=config) as engine:
        trajs = engine.run(_specs(900, 901, 902))
    broken = trajs[1]
    assert broken.failed and broken.failure_reason == "env_error: step raised RuntimeError: the simulator crashed"
    assert not broken.success and broken.num_turns == 1 and broken.turns[0].observation is None
    assert trajs[0].success and trajs[2].success  # the env instance was replaced, the others went on
    assert engine.stats.failure_reasons == {"env_error": 1}


def test_step_timeout_is_recorded():
    config = EngineConfig(max_turns=10, step_timeout_s=0.3)
    start = time.perf_counter()
    with TextRolloutEngine(BinarySearchPlayer(), lambda: FaultyGuess(slow_task=900, stall_s=6.0), num_envs=2,
                           config=config) as engine:
        trajs = engine.run(_specs(900, 901))
    assert trajs[0].failed and trajs[0].failure_reason == "timeout: env call timeout after 0.3s"
    assert trajs[1].success
    # The stalled call was abandoned, not waited for: the run ends long before the 6 s stall would (~0.4 s here;
    # the margin is for a busy machine).
    assert time.perf_counter() - start < 4.0


def test_episode_timeout_is_recorded():
    config = EngineConfig(max_turns=10, episode_timeout_s=0.25)
    with TextRolloutEngine(BinarySearchPlayer(delay_s=0.1), GuessEnv, num_envs=1, config=config) as engine:
        (traj,) = engine.run(_specs(900))
    assert traj.failed and traj.failure_reason == "timeout: episode timeout after 0.25s"
    assert 1 <= traj.num_turns <= 3


def test_turn_budget_and_env_step_limit():
    with TextRolloutEngine(BinarySearchPlayer(), GuessEnv, num_envs=1, config=EngineConfig(max_turns=2)) as engine:
        (short,) = engine.run(_specs(900))
    assert short.truncated and short.truncation_reason == "max_turns" and short.num_turns == 2

    class Hopeless(BinarySearchPlayer):
        def chat(self, messages, params):
            return ChatReply(text="Action: guess 0", finish_reason="eos")

    with TextRolloutEngine(Hopeless(), GuessEnv, num_envs=1, config=EngineConfig(max_turns=50)) as engine:
        (capped,) = engine.run(_specs(900))
    assert capped.truncation_reason == "env_step_limit" and capped.num_turns == GuessEnv.max_episode_steps


def test_token_budget_from_the_servers_usage(api_url):
    backend = make_backend({"model": SERVED_NAME, "base_url": api_url})
    budget = 260  # the tiny tokenizer spends ~150 tokens on the first prompt
    config = EngineConfig(max_turns=10, max_total_tokens=budget, sampling=SamplingParams(max_new_tokens=30, seed=3))
    with TextRolloutEngine(backend, GuessEnv, num_envs=2, config=config) as engine:
        trajs = engine.run(_specs(900, 901))
    for traj in trajs:
        assert traj.truncation_reason == "token_budget", traj.truncation_reason
        assert 2 <= traj.num_turns < 10
        for before, turn in zip(traj.turns, traj.turns[1:], strict=False):  # each reply capped by what was left
            assert turn.completion_tokens <= budget - (before.prompt_tokens + before.completion_tokens)
        assert traj.completion_tokens == sum(t.completion_tokens for t in traj.turns)


def test_context_length_refusal_truncates(tiny_backend):
    from agentgym_core.model_server import create_model_app
    from agentgym_core.testing import serve_app

    app = create_model_app(tiny_backend, {"model_name": SERVED_NAME, "max_context_tokens": 150})
    with serve_app(app) as url:
        backend = make_backend({"model": SERVED_NAME, "base_url": url})
        config = EngineConfig(max_turns=20, max_total_tokens=10_000, sampling=SamplingParams(max_new_tokens=40, seed=0))
        with TextRolloutEngine(backend, GuessEnv, num_envs=1, config=config) as engine:
            (traj,) = engine.run(_specs(900))
    assert traj.truncation_reason == "token_budget" and not traj.failed
    assert re.search(r"\S", traj.messages[-1]["content"])  # ends on the env's last observation


def test_same_seed_same_run(api_url):
    backend = make_backend({"model": SERVED_NAME, "base_url": api_url})
    config = EngineConfig(max_turns=3, sampling=SamplingParams(temperature=1.0, max_new_tokens=6, seed=11))

    def texts():
        with TextRolloutEngine(backend, GuessEnv, num_envs=3, config=config) as engine:
            return [[t.text for t in traj.turns] for traj in engine.run(_specs(900, 900, 901))]

    first = texts()
    assert first == texts()
    assert first[0] != first[1]  # two samples of one task get different seeds


def test_synchronous_mode_is_refused():
    with pytest.raises(ValueError, match="synchronous"):
        TextRolloutEngine(BinarySearchPlayer(), GuessEnv, config=EngineConfig(synchronous=True))


def test_each_reply_is_reported_as_a_turn_with_the_servers_token_count():
    """What the progress line of `agentgym eval --backend openai` counts: turns and completion tokens."""
    from agentgym_core.rollout.progress import RolloutProgress

    line = RolloutProgress(3, desc="eval guess", max_turns=10, enabled=False)
    events: list[tuple[str, int, int]] = []

    def turn(traj):
        events.append(("turn", traj.task_id, traj.num_turns))
        line.turn(traj)

    def done(traj):
        events.append(("done", traj.task_id, traj.num_turns))
        line.done(traj)

    with TextRolloutEngine(BinarySearchPlayer(), GuessEnv, num_envs=3, config=EngineConfig(max_turns=10)) as engine:
        trajs = engine.run(_specs(1, 2, 3), on_turn=turn, on_done=done)
    for traj in trajs:  # every reply reported as it came, before its trajectory ended
        mine = [e for e in events if e[1] == traj.task_id]
        assert mine == [("turn", traj.task_id, k) for k in range(1, traj.num_turns + 1)] + [
            ("done", traj.task_id, traj.num_turns)]
    assert line.turns == sum(t.num_turns for t in trajs) and line.finished == 3
    assert line.tokens == 9 * line.turns  # the player's completion_tokens per reply
