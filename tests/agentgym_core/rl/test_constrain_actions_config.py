"""rollout.constrain_actions in a recipe: refused before any work where the backend cannot do it, and part of
the evaluation's conditions (its panel hash) only when on."""

from __future__ import annotations

import pytest

from agentgym_core.plugins import PluginManager
from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import load_config
from agentgym_core.rl.envs import eval_conditions, eval_sampling
from agentgym_core.rl.plugin_options import bind_plugin_options

RECIPE = "examples/babyai_grpo_cpu.yaml"


@pytest.fixture
def plugins() -> PluginManager:
    for package in ("agentgym_estimators", "agentgym_backend_transformers", "agentgym_backend_vllm"):
        pytest.importorskip(package)
    return PluginManager(autoload=True, allow=["estimators", "transformers", "vllm", "babyai"])


def test_a_backend_that_does_not_declare_it_is_refused_with_what_to_do(plugins):
    config = load_config(RECIPE, ["rollout.backend=vllm", "rollout.constrain_actions=true",
                                  "rollout.backend_options={mode: server, urls: ['http://127.0.0.1:9/v1']}"])
    with pytest.raises(ConfigError, match="constrain_actions.*rollout.backend=transformers"):
        bind_plugin_options(config, plugins)


def test_training_and_evaluation_sample_with_it_and_the_panel_says_so(plugins):
    on = bind_plugin_options(load_config(RECIPE, ["rollout.constrain_actions=true"]), plugins)
    off = load_config(RECIPE, ["rollout.constrain_actions=false"])
    assert eval_sampling(on).constrain_actions and not eval_sampling(off).constrain_actions
    assert eval_conditions(on, 8)["constrain_actions"] is True
    assert "constrain_actions" not in eval_conditions(off, 8)  # earlier runs' panel hashes stay what they were


def test_training_rollouts_leave_the_guarantee_off_and_evaluations_keep_it():
    """Training refuses a reply that never writes 'Action:' (so RL learns to write it); evaluations give it the
    marker (agentgym_core.rollout.action_choices). The rollout worker samples with train_sampling."""
    from types import SimpleNamespace

    from agentgym_core.rl.rollout_worker import RolloutWorker

    on = load_config(RECIPE, ["rollout.constrain_actions=true"])
    train, evaluate = on.rollout.train_sampling(), on.rollout.eval_sampling(seed=0)
    assert train.constrain_actions and evaluate.constrain_actions
    assert not train.guarantee_action and evaluate.guarantee_action
    assert train.temperature == on.rollout.temperature and train.max_new_tokens == on.rollout.max_new_tokens
    env = SimpleNamespace(name="babyai", make_env=lambda: None, train_tasks=[0, 1], categories={},
                          config=SimpleNamespace(max_concurrency=1, weight=1.0))  # an env handle's fields, unused
    worker = RolloutWorker(on, [env], None, scheduler=None, receives_weights=False)
    assert worker.engine.config.sampling == train
