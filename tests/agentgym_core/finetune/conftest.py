"""Fine-tuning fixtures: the tiny random chat model, the guess env, and expert data collected from it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

# One thread: the machine is shared and tiny matmuls only lose to thread hand-offs.
torch.set_num_threads(1)


@pytest.fixture
def tiny():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(seed=0)


@pytest.fixture
def pm():
    """Plugins for evaluation and rollouts: the transformers backend and the guess env."""
    from agentgym_core.plugins import PluginManager

    pytest.importorskip("agentgym_backend_transformers")
    pytest.importorskip("agentgym_env_guess")
    return PluginManager(autoload=True, allow=["transformers", "guess"])


@pytest.fixture
def guess_expert_log(tmp_path, tiny, pm):
    """A rollout log of 6 expert (binary search) guess episodes, tokenised with the tiny model's template."""
    from agentgym_core.finetune.collect import collect
    from agentgym_core.finetune.config import CollectConfig

    _, tokenizer = tiny
    out = tmp_path / "expert.jsonl"
    result = collect(CollectConfig(env="guess", policy="expert", n=6, out=str(out)), plugin_manager=pm,
                     tokenizer=tokenizer, progress=False)
    assert result.trajectories == 6
    return out
