"""`warm_start.expert.rl_tasks: solved`: RL draws only the tasks its expert solved within RL's horizon."""

from __future__ import annotations

import json

import pytest

from agentgym_core.finetune.run import expert_solved_tasks, train_on_expert_solved
from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import load_config
from agentgym_core.rollout.logs import LOG_FORMAT


def _record(env, task, success, turns):
    return {"format": LOG_FORMAT, "env": env, "task_id": task, "success": success,
            "turns": [{"index": i} for i in range(turns)]}


def _write_expert_log(run_dir, records):
    path = run_dir / "warm_start" / "expert.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _recipe(run_dir, *extra):
    return load_config(None, [
        "envs=[{name: guess}, {name: babyai}]", f"trainer.run_dir={run_dir}", "trainer.progress=false",
        "warm_start={expert: {n: 5, rl_tasks: solved}}", *extra])


def test_solved_within_the_horizon_in_the_order_played(tmp_path):
    path = _write_expert_log(tmp_path, [
        _record("guess", 7, True, 3),
        _record("guess", 3, True, 9),   # solved, but after the horizon
        _record("guess", 5, False, 2),  # not solved
        _record("babyai", 1, True, 1),  # another env
        _record("guess", 2, True, 8),   # exactly at the horizon
        _record("guess", 7, True, 3),   # played twice: listed once
    ])
    assert expert_solved_tasks(path, "guess", horizon=8) == [7, 2]
    assert expert_solved_tasks(path, "guess", horizon=9) == [7, 3, 2]
    assert expert_solved_tasks(path, "babyai", horizon=8) == [1]


def test_only_the_experts_env_trains_on_its_solved_tasks(tmp_path):
    _write_expert_log(tmp_path, [_record("guess", 4, True, 2), _record("guess", 9, True, 6)])
    config = train_on_expert_solved(_recipe(tmp_path), horizon=4)
    assert config.envs[0].train_tasks == [4]
    assert config.envs[1].train_tasks is None
    assert _recipe(tmp_path).envs[0].train_tasks is None  # a copy: the recipe itself is unchanged


def test_rl_tasks_all_leaves_the_split(tmp_path):
    config = load_config(None, ["envs=[{name: guess}]", f"trainer.run_dir={tmp_path}",
                                "warm_start={expert: {n: 5}}"])
    assert train_on_expert_solved(config, horizon=4) is config  # no expert log is read


def test_none_solved_in_time_says_what_to_change(tmp_path):
    _write_expert_log(tmp_path, [_record("guess", 4, True, 6), _record("guess", 5, False, 2)])
    with pytest.raises(ValueError, match=r"solved none of its 5 guess tasks within RL's 4-turn horizon.*raise "
                                         r"warm_start.expert.n"):
        train_on_expert_solved(_recipe(tmp_path), horizon=4)


def test_a_task_list_and_solved_tasks_are_refused_together(tmp_path):
    with pytest.raises(ConfigError, match=r"rl_tasks=solved and envs\[guess\].train_tasks both"):
        load_config(None, ["envs=[{name: guess, train_tasks: [1, 2]}]", f"trainer.run_dir={tmp_path}",
                           "warm_start={expert: {n: 5, rl_tasks: solved}}"])


def test_rl_after_the_warm_start_draws_only_solved_tasks(tmp_path, one_rl_step):
    """The whole recipe on the guess env: its binary-search expert needs up to 7 guesses, so a 4-turn horizon
    leaves some of its tasks out, and every RL episode plays one of those it solved."""
    from agentgym_core.pipeline import plan_text, run_rl_recipe
    from agentgym_core.plugins import PluginManager
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pytest.importorskip("agentgym_estimators")
    pm = PluginManager(autoload=True, allow=["transformers", "guess", "estimators"])
    run = tmp_path / "run"
    config = load_config(None, [
        "envs=[{name: guess, max_concurrency: 2}]",
        *one_rl_step(steps=2, save_every=2, eval_tasks=0, tasks_per_step=2, max_new_tokens=4, max_total_tokens=256,
                     rounds="[4]"),
        "warm_start={expert: {n: 20, max_turns: 8, rl_tasks: solved}, sft: {batch_size: 4, epochs: 1}}",
    ])
    assert "on the tasks the expert solved in time" in plan_text(config)
    model, tokenizer = tiny_chat_model(seed=0)
    run_rl_recipe(config, plugin_manager=pm, model=model, tokenizer=tokenizer)

    solved = expert_solved_tasks(run / "warm_start" / "expert.jsonl", "guess", horizon=4)
    assert 0 < len(solved) < 20  # the horizon left some of the 20 out
    played = {json.loads(line)["task_id"] for step in sorted((run / "trajectories").glob("step_*.jsonl"))
              for line in step.read_text().splitlines()}
    assert played and played <= set(solved)
