"""Rejection sampling: keeps successes (fewest turns first), trains on them, evaluates per round, resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentgym_core.finetune.config import FinetuneConfig
from agentgym_core.finetune.rejection import keep_successes, run_rejection_sampling
from agentgym_core.rollout.trajectory import Span, Trajectory, Turn
from agentgym_core.viewer.metric_docs import undocumented, undocumented_message

sys.path.insert(0, str(Path(__file__).parent))


def _traj(task, sample, turns, success, reward=1.0):
    t = Trajectory(env="letter", task_id=task, sample_index=sample, success=success, outcome_reward=reward,
                   token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0])
    t.turns = [Turn(index=i, context_span=Span(start=0, end=1), action_span=Span(start=1, end=3), text="x",
                    action="x", finish_reason="eos", reward_index=2) for i in range(turns)]
    return t


def test_keep_successes_prefers_fewer_turns():
    trajs = [_traj(0, 0, 3, True), _traj(0, 1, 1, True, 0.5), _traj(0, 2, 1, True, 0.9), _traj(0, 3, 1, False),
             _traj(1, 0, 2, False), _traj(2, 0, 2, True)]
    kept = keep_successes(trajs, keep_per_task=1)
    assert [(t.task_id, t.sample_index) for t in kept] == [(0, 2), (2, 0)]  # 1 turn beats 3; tie -> higher reward
    assert [(t.task_id, t.sample_index) for t in keep_successes(trajs, 2)] == [(0, 2), (0, 1), (2, 0)]


@pytest.fixture
def letter_pm(pm):
    from letter_env import LetterPlugin

    pm.register(LetterPlugin(), "letter-test")
    return pm


def _config(run_dir):
    return FinetuneConfig.model_validate({
        "kind": "rejection_sampling", "envs": [{"name": "letter", "max_concurrency": 4}],
        "rollout": {"max_new_tokens": 6, "max_total_tokens": 256},
        "rejection_sampling": {"rounds": 2, "tasks_per_round": 4, "samples_per_task": 3, "max_turns": 2,
                               "sft": {"epochs": 1, "batch_size": 4}},
        "optim": {"lr": 1e-3},
        "trainer": {"run_dir": str(run_dir), "eval_tasks": 4, "eval_max_turns": 2, "progress": False}})


def test_rejection_sampling_rounds_and_resume(tmp_path, letter_pm):
    from agentgym_core.testing.tiny_model import tiny_chat_model
    from agentgym_core.training.checkpoint import latest_checkpoint

    model, tokenizer = tiny_chat_model(seed=0)
    cut = _config(tmp_path / "run")
    first = run_rejection_sampling(cut, model=model, tokenizer=tokenizer, plugin_manager=letter_pm, stop_after=1)
    assert first.steps == 1 and first.eval_before is not None
    round_1 = [json.loads(x) for x in (tmp_path / "run" / "rounds" / "round_1" / "kept.jsonl").read_text().splitlines()]
    samples = [json.loads(x) for x in (tmp_path / "run" / "rounds" / "round_1" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 12 and any(s["success"] for s in samples), "the random model should hit some letters"
    assert round_1 and all(k["success"] and k["tokens"]["loss_mask"] for k in round_1)
    assert len({k["task_id"] for k in round_1}) == len(round_1)  # keep_per_task = 1

    model, tokenizer = tiny_chat_model(seed=0)
    resumed = run_rejection_sampling(cut, model=model, tokenizer=tokenizer, plugin_manager=letter_pm, resume=True)
    assert resumed.steps == 2 and latest_checkpoint(tmp_path / "run").name == "step_000002"
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(x["kind"], x["step"]) for x in lines] == [("eval", 0), ("round", 1), ("eval", 1), ("round", 2), ("eval", 2)]
    keys = {k for x in lines for k in x}
    assert not undocumented(keys), undocumented_message(keys, "rejection sampling")  # the docs' "What a run logs"
    rounds = [x for x in lines if x["kind"] == "round"]
    assert rounds[1]["trained_on"] >= rounds[0]["kept"]  # accumulate: round 2 trains on round 1's keeps too
