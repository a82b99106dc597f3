"""Rollouts on the transformers backend's library decode engine: every trajectory comes back, also when
some time out in their environment while others decode."""

from __future__ import annotations

import functools

import pytest
from guess_env import GuessEnv

from agentgym_core.rollout import EngineConfig, EpisodeSpec, RolloutEngine, SamplingParams
from agentgym_core.testing.trajectory import check_trajectory


@pytest.fixture(scope="module")
def library_backend():
    pytest.importorskip("agentgym_backend_transformers")
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_backend_transformers.library_engine import library_engine_available
    from agentgym_core.testing.tiny_model import tiny_chat_model

    if not library_engine_available():
        pytest.skip("transformers without continuous batching")
    return TransformersBackend(*tiny_chat_model(seed=0), decode_engine="library")


def test_no_trajectory_is_lost_when_some_time_out(library_backend):
    make = functools.partial(GuessEnv, step_delay=4.0, slow_tasks=[0])
    config = EngineConfig(sampling=SamplingParams(max_new_tokens=10, seed=0), max_turns=3, step_timeout_s=0.5)
    with RolloutEngine(library_backend, make, num_envs=4, config=config) as engine:
        trajs = engine.run([EpisodeSpec(task_id=i) for i in range(4)])
        again = engine.run([EpisodeSpec(task_id=i) for i in range(1, 4)])  # the same engine, the next run
    assert [t.task_id for t in trajs] == [0, 1, 2, 3]
    assert trajs[0].failed and trajs[0].failure_reason.startswith("timeout")
    for traj in [*trajs[1:], *again]:
        assert not traj.failed and traj.num_turns >= 1
        report = check_trajectory(traj, library_backend)
        assert report.max_logprob_error is not None and report.max_logprob_error < 1e-3
    assert [t.task_id for t in again] == [1, 2, 3]
