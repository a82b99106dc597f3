"""Seeds per episode: one step's trajectories are the same whole or split over rollout workers (ranks),
re-runs of failed episodes included (the vLLM backend's part: tests/agentgym_backend_vllm)."""

from __future__ import annotations

import pytest
import torch
from episode_replay import FlakyPlugin, attempts_by_episode

from agentgym_core.plugins import PluginManager
from agentgym_core.testing.tiny_model import tiny_chat_model

pytest.importorskip("agentgym_backend_transformers")


@pytest.fixture
def pm():
    manager = PluginManager(autoload=True, allow=["estimators", "transformers"])
    manager.register(FlakyPlugin(), "flaky-test")
    return manager


def test_two_workers_sample_what_one_samples_reruns_included(pm):
    torch.set_num_threads(1)
    model, tokenizer = tiny_chat_model(seed=0)
    whole, reruns = attempts_by_episode(pm, [], 1, model, tokenizer)
    split, split_reruns = attempts_by_episode(pm, [], 2, model, tokenizer)
    assert reruns > 0 and split_reruns == reruns  # the flaky env failed some episodes: they were played again
    assert split == whole
    assert len({tuple(a[0]) for a in whole.values()}) > 1  # and the episodes differ from one another
