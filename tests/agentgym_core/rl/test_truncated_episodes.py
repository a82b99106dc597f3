"""algorithm.truncated_episodes in a training run: repriced episodes are trained and logged like any other."""

from __future__ import annotations

import json

from agentgym_core.rl.trainer import train


def test_repriced_truncated_episodes_keep_their_advantages_in_the_saved_trajectories(tmp_path, pm, tiny_config):
    """The saved trajectory files pair each episode with the advantages it was trained with; an episode whose
    last reward the policy repriced must not lose them (WordEnv truncates every wrong episode at its limit)."""
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    config = tiny_config(tmp_path / "run", **{"trainer.eval_tasks": 0, "trainer.steps": 1,
                                              "algorithm.truncated_episodes": -0.5})
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    records = [json.loads(x) for x in (tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    truncated = [r for r in records if r["truncated"] and not r["failed"]]
    assert truncated, "WordEnv should have truncated some episodes of the random tiny model"
    assert all("advantages" in r for r in records if not r["failed"] and sum(r["loss_mask"]) > 0)
    assert all(r["turns"][-1]["reward"] != -0.5 for r in truncated)  # the log keeps the env's own reward


def test_a_repriced_episode_gives_its_group_signal_for_dynamic_sampling():
    """A truncated episode and a real failure tie on the env's reward; repriced, they differ, so the group has
    signal and dynamic sampling (which compares outcomes) must keep it."""
    from agentgym_core.rl.batch import apply_truncation_policy
    from agentgym_core.rl.dynamic_sampling import mixed_groups_only
    from agentgym_core.rollout.trajectory import Trajectory, Turn

    def episode(truncated: bool) -> Trajectory:
        turn = Turn.model_validate({"index": 0, "context_span": {"start": 0, "end": 1},
                                    "action_span": {"start": 1, "end": 2}, "text": "a", "action": "a",
                                    "finish_reason": "eos", "observation": "o", "reward": 0.0, "reward_index": 1})
        return Trajectory(env="e", task_id=3, token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0],
                          turns=[turn], truncated=truncated, terminated=not truncated, outcome_reward=0.0)

    group = [episode(truncated=True), episode(truncated=False)]
    assert mixed_groups_only(group) == []  # tied on the env's reward
    repriced = apply_truncation_policy(group, -0.5)
    assert [t.outcome_reward for t in repriced] == [-0.5, 0.0]
    assert mixed_groups_only(repriced) == repriced
