"""Rollout logs and `agentgym eval` with a tiny model on the guessing game."""

from __future__ import annotations

import argparse
import json

from guess_env import GuessEnv

from agentgym_core.commands.eval import render_table
from agentgym_core.evaluation import EvalConfig, evaluate, summarize
from agentgym_core.rollout import EngineConfig, EpisodeSpec, RolloutEngine, SamplingParams
from agentgym_core.rollout.logs import RolloutLogWriter, read_rollout_log


def test_log_lines_round_trip(tiny_backend, tmp_path):
    config = EngineConfig(sampling=SamplingParams(max_new_tokens=8, seed=1), max_turns=3)
    with RolloutEngine(tiny_backend, GuessEnv, num_envs=2, config=config) as engine:
        trajs = engine.run([EpisodeSpec(task_id=2), EpisodeSpec(task_id=3)])
    with RolloutLogWriter(tmp_path / "t.jsonl", step=7, include_tokens=True) as log:
        log.write_all(trajs)
    records = list(read_rollout_log(tmp_path / "t.jsonl"))
    assert [r["task_id"] for r in records] == [2, 3]
    for record, traj in zip(records, trajs, strict=True):
        assert record["step"] == 7 and record["env"] == "guess"
        assert record["num_turns"] == traj.num_turns == len(record["turns"]) == len(record["rewards"])
        assert record["mask"]["sampled"] == sum(t["sampled_tokens"] for t in record["turns"])
        assert record["tokens"]["token_ids"] == traj.token_ids
        assert record["messages"][-1] == {"role": "user", "content": traj.turns[-1].observation}


def test_eval_writes_results_and_counts_pass_at_k(tiny_backend, tmp_path):
    config = EvalConfig(env="guess", split="test", limit=3, n_samples=2, temperature=1.0, max_new_tokens=8,
                        max_rounds=2, num_envs=4, out_dir=str(tmp_path / "run"))
    results = evaluate(config, backend=tiny_backend, make_env=GuessEnv, progress=False)
    assert results.overall.tasks == 3 and results.overall.samples == 6
    assert set(results.categories) == {"low", "high"}  # task ids 40, 41, 42 by parity
    assert results.overall.success_pass >= results.overall.success_avg
    assert results.overall.score_pass >= results.overall.score_avg
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["overall"]["samples"] == 6
    lines = (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 6
    table = render_table(results)
    assert "success Pass@2" in table and table.splitlines()[-1].startswith("ALL")


def test_pass_at_k_is_best_of_k():
    from agentgym_core.rollout import Trajectory

    trajs = [
        Trajectory(env="e", task_id=1, sample_index=0, success=True, outcome_reward=1.0, category="a"),
        Trajectory(env="e", task_id=1, sample_index=1, success=False, outcome_reward=0.0, category="a"),
        Trajectory(env="e", task_id=2, sample_index=0, success=False, outcome_reward=0.2, category="b"),
        Trajectory(env="e", task_id=2, sample_index=1, success=False, outcome_reward=0.4, category="b", failed=True),
    ]
    overall, cats = summarize(trajs)
    assert overall.success_avg == 0.25 and overall.success_pass == 0.5
    assert abs(overall.score_avg - 0.4) < 1e-9 and abs(overall.score_pass - 0.7) < 1e-9
    assert overall.failed == 1 and cats["a"].success_pass == 1.0 and cats["b"].success_pass == 0.0


def test_eval_command_parses_the_documented_flags():
    from agentgym_core.commands import eval as eval_command

    parser = argparse.ArgumentParser()
    eval_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(["eval", "--env", "babyai", "--model", "smollm2-135m-instruct", "--split", "test",
                              "--limit", "20", "--n-samples", "4", "--temperature", "1.0", "--max-rounds", "6",
                              "--env-url", "http://127.0.0.1:1"])
    assert (args.limit, args.n_samples, args.temperature, args.max_rounds) == (20, 4, 1.0, 6)
    assert args.func is eval_command.run
