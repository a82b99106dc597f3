"""The other update paths, one step each: GAE with a critic, LoRA, KL in the reward, epochs x mini-batches."""

from __future__ import annotations

import json

import pytest
import torch

from agentgym_core.rl.trainer import train


def test_gae_critic_lora_kl_in_reward_epochs_minibatches(tmp_path, pm, tiny_config):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=1)
    config = tiny_config(tmp_path / "run", **{
        "trainer.steps": 1, "trainer.eval_tasks": 0, "algorithm.estimator": "gae",
        "algorithm.critic.enabled": "true", "algorithm.kl.in_reward": "true", "algorithm.kl.coef": 0.1,
        "algorithm.ppo_epochs": 2, "algorithm.mini_batches": 2, "algorithm.advantage.gamma": 0.99,
        "algorithm.advantage.lam": 0.95, "model.lora.enabled": "true", "model.lora.r": 4,
        "model.lora.target_modules": "[q_proj, v_proj]", "algorithm.packing": "false",
    })
    from agentgym_core.rl.policy import wrap_lora

    model = wrap_lora(model, config.model)
    base_before = model.base_model.model.model.embed_tokens.weight.clone()
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    line = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert line["optimizer_steps"] == 4  # 2 epochs x 2 mini-batches
    assert line["value_loss"] > 0 and line["kl"] >= 0
    # LoRA: base weights frozen, adapters trained, merged HF model and adapter saved.
    assert torch.equal(model.base_model.model.model.embed_tokens.weight, base_before)
    assert any(n for n, p in model.named_parameters() if "lora_B" in n and p.abs().sum() > 0)
    ckpt = tmp_path / "run" / "checkpoints" / "step_000001"
    assert (ckpt / "adapter" / "adapter_config.json").exists()
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(ckpt / "model")
    assert not any("lora" in k for k in merged.state_dict())


def test_batch_mixing_two_envs_reports_per_env_metrics(tmp_path, tiny_config):
    from word_env import TwoWordPlugin

    from agentgym_core.plugins import PluginManager
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pm = PluginManager(autoload=True, allow=["estimators", "transformers"])
    pm.register(TwoWordPlugin(), "words")
    model, tokenizer = tiny_chat_model(seed=0)
    config = tiny_config(tmp_path / "run", **{
        "envs": "[{name: word, max_concurrency: 2}, {name: word2, max_concurrency: 2, weight: 2}]",
        "rollout.tasks_per_step": 3, "rollout.group_size": 2, "trainer.steps": 1, "trainer.eval_tasks": 1,
        "algorithm.estimator": "rloo",
    })
    result = train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    line = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
            if '"train"' in x][-1]
    assert line["trajectories"] == 6  # 1 task of word + 2 of word2 (weights 1:2), 2 samples each
    for key in ("word/success", "word2/success", "word/turns", "word2/reward"):
        assert key in line and key in result["eval_after"]
    trajs = [json.loads(x) for x in (tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    assert sorted(t["env"] for t in trajs) == ["word", "word", "word2", "word2", "word2", "word2"]


def test_end_on_invalid_action_ends_training_episodes_but_not_the_evaluation(tmp_path, tiny_config):
    """The guessing game refuses anything but ``guess N``, which the tiny random model rarely writes."""
    from agentgym_core.plugins import PluginManager
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pm = PluginManager(autoload=True, allow=["estimators", "transformers", "guess"])
    model, tokenizer = tiny_chat_model(seed=0)
    config = tiny_config(tmp_path / "run", **{
        "envs": "[{name: guess, max_concurrency: 2}]", "trainer.steps": 1, "trainer.eval_tasks": 2,
        "rollout.end_on_invalid_action": "true", "algorithm.rounds_ctrl.rounds": 3,
    })
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    trajs = [json.loads(x) for x in (tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    assert any(t["truncation_reason"] == "invalid_action" for t in trajs)
    for t in trajs:  # nothing follows a refused action in training
        flags = [turn["invalid_action"] for turn in t["turns"]]
        assert True not in flags[:-1]
    evals = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]
    # the held-out evaluation plays every episode to its 3-turn horizon past refusals
    assert evals and all(e["turns"] == 3 for e in evals), evals


def test_eval_samples_plays_each_held_out_task_k_times_and_the_summary_pairs_their_rates(tmp_path, tiny_config):
    from agentgym_core.evaluation.run_summary import format_summary, summarize_run
    from agentgym_core.plugins import PluginManager
    from agentgym_core.recipes import ConfigError
    from agentgym_core.rl.config import load_config
    from agentgym_core.testing.tiny_model import tiny_chat_model

    with pytest.raises(ConfigError, match=r"trainer.eval_samples=3 with rollout.eval_temperature=0.*Set "
                                          r"rollout.eval_temperature"):
        load_config(None, ["envs=[{name: x}]", "trainer.eval_samples=3"])
    pm = PluginManager(autoload=True, allow=["estimators", "transformers", "guess"])
    model, tokenizer = tiny_chat_model(seed=0)
    config = tiny_config(tmp_path / "run", **{
        "envs": "[{name: guess, max_concurrency: 2}]", "trainer.steps": 1, "trainer.eval_tasks": 3,
        "trainer.eval_samples": 2, "rollout.eval_temperature": 1.0, "algorithm.rounds_ctrl.rounds": 2,
    })
    result = train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    panel = json.loads((tmp_path / "run" / "evaluation_panel.json").read_text())
    assert panel["conditions"]["samples_per_task"] == 2 and panel["conditions"]["temperature"] == 1.0
    for which in ("eval_before", "eval_after"):
        record = result[which]
        assert (record["tasks"], record["samples_per_task"], record["temperature"]) == (3, 2, 1.0)
        assert len(record["per_task"]) == 3 and set(record["per_task"].values()) <= {0.0, 0.5, 1.0}
        assert record["success"] == pytest.approx(sum(record["per_task"].values()) / 3)
    text = format_summary(summarize_run(result))
    assert "3 tasks, the same at both ends (2 episodes a task sampled at temperature 1" in text
