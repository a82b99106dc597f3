"""Trainer fixtures: a plugin manager with the estimators, the transformers backend and WordEnv."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

# One thread: the machine is shared and tiny matmuls only lose to thread hand-offs.
torch.set_num_threads(1)


@pytest.fixture
def pm():
    from word_env import WordPlugin

    from agentgym_core.plugins import PluginManager

    pytest.importorskip("agentgym_estimators")
    pytest.importorskip("agentgym_backend_transformers")
    manager = PluginManager(autoload=True, allow=["estimators", "transformers"])
    manager.register(WordPlugin(), "word-test")
    return manager


@pytest.fixture
def tiny_config():
    """Factory of configs for a 3-step GRPO run on WordEnv served over HTTP, small enough for a unit test."""
    from agentgym_core.rl.config import load_config

    def make(run_dir, **overrides):
        base = [
            "envs=[{name: word, max_concurrency: 1}]",
            f"trainer.run_dir={run_dir}", "trainer.steps=3", "trainer.save_every=1", "trainer.eval_tasks=2",
            "trainer.progress=false", "trainer.tensorboard=false",
            "rollout.tasks_per_step=2", "rollout.group_size=3", "rollout.max_new_tokens=6",
            "rollout.max_total_tokens=256", "algorithm.rounds_ctrl.rounds=2", "optim.lr=0.01",
        ]
        return load_config(None, base + [f"{k}={v}" for k, v in overrides.items()])

    return make
