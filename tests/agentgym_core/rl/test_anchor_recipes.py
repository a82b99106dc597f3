"""The GPU recipes carry the anchor's per-environment settings (docs/reference/anchor-recipes.md).

ANCHOR holds the values of AgentGym-RL's examples/train/ScalingInter-RL/<env>_train.sh (WooooDyy/AgentGym-RL)
and its ppo_trainer.yaml defaults; each recipe must translate them as the docs' table says.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from agentgym_core.recipes import recipe_kind
from agentgym_core.rl.config import load_config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

# env: train_batch_size, rollout.n, ppo_mini_batch_size, rollout.max_tokens, max_prompt_length,
#      max_response_length, rounds_ctrl.rounds, steps_scaling_inter
ANCHOR = {
    "babyai": (32, 4, 8, 512, 512, 8192, [6, 13, 20], 100),
    "sciworld": (16, 8, 8, 200, 1024, 8192, [10, 20, 30], 100),
    "search": (32, 4, 8, 512, 1024, 8192, [5, 8, 10], 100),
    "textcraft": (32, 8, 8, 512, 512, 10240, [10, 20, 30], 100),
    "webarena": (32, 4, 4, 512, 750, 14098, [8, 12, 15], 80),
}


@pytest.mark.parametrize("env", sorted(ANCHOR))
def test_gpu_recipe_mirrors_the_anchor_script(env):
    batch, n, mini, max_tokens, prompt, response, rounds, every = ANCHOR[env]
    config = load_config(EXAMPLES / f"{env}_grpo_gpu.yaml")
    alg, rollout = config.algorithm, config.rollout
    assert config.envs[0].name == env
    assert (rollout.tasks_per_step, rollout.group_size) == (batch, n)
    assert alg.mini_batches == batch // mini and alg.mini_batches > 1  # PPO clipping acts from the 2nd step on
    assert alg.ppo_epochs == 1  # what the anchor's actor ran (it has no epoch loop)
    assert (rollout.max_new_tokens, rollout.max_total_tokens) == (max_tokens, prompt + response)
    assert (alg.rounds_ctrl.type, alg.rounds_ctrl.stages, alg.rounds_ctrl.steps_scaling_inter) == (
        "scaling_inter_stepwise", rounds, every)
    assert alg.estimator == "grpo" and alg.advantage.norm_by_std
    assert (alg.kl.coef, alg.kl.estimator, alg.kl.in_reward) == (0.001, "low_var_kl", False)
    assert alg.entropy_coef == 0.001
    assert (alg.clip_low, alg.clip_high, alg.max_grad_norm) == (0.2, None, 1.0)
    assert alg.loss_agg == "seq_mean_token_mean"
    assert alg.drop_zero_advantage is False
    assert (config.optim.lr, config.optim.schedule, config.optim.warmup_steps) == (1e-6, "constant", 0)
    assert (rollout.temperature, rollout.top_p, rollout.env_timeout_s) == (1.0, 1.0, 600.0)


def test_docs_map_every_anchor_key_the_recipes_use():
    page = (EXAMPLES.parent / "docs" / "reference" / "anchor-recipes.md").read_text()
    section = page.split("# The anchor's recipes, key by key", 1)[1]
    for key in ("data.train_batch_size", "rollout.n", "ppo_mini_batch_size", "ppo_epochs", "entropy_coeff",
                "kl_loss_coef", "kl_loss_type", "clip_ratio", "grad_clip", "optim.lr", "rollout.max_tokens",
                "max_prompt_length", "max_response_length", "agentgym.timeout", "rounds_ctrl.rounds",
                "steps_scaling_inter", "ppo_micro_batch_size_per_gpu"):
        assert key in section, f"docs/reference/anchor-recipes.md lacks {key}"


def test_every_rl_recipe_states_drop_zero_advantage():
    """Stated in every recipe; on only where there is no KL term, since a tied group then adds nothing but
    tokens to the loss's denominator (with a KL term it keeps its KL and entropy terms, as in the anchor)."""
    for recipe in sorted(EXAMPLES.glob("*.yaml")):
        if recipe_kind(recipe) != "rl":
            continue
        data = yaml.safe_load(recipe.read_text())
        stated = data["algorithm"].get("drop_zero_advantage")
        assert isinstance(stated, bool), recipe.name
        if stated:
            assert load_config(recipe).algorithm.kl.coef == 0.0, recipe.name


# LoRA's adapters reach a transformers rollout copy (vLLM's LoRA requests have run against the contract fake only).
ROLLS_OUT_ON_TRANSFORMERS = {"babyai_grpo_lora_gpu"}


@pytest.mark.parametrize("recipe", sorted(p for p in EXAMPLES.glob("*_gpu.yaml") if p.stem not in ROLLS_OUT_ON_TRANSFORMERS),
                         ids=lambda p: p.stem)
def test_gpu_recipes_roll_out_on_vllm_sharing_the_learners_gpu(recipe):
    """The anchor rolls out on vLLM; so do the full-weight GPU recipes, with options the plugin's config accepts."""
    vllm_config = pytest.importorskip("agentgym_backend_vllm.config")
    config = load_config(recipe)
    assert config.rollout.backend == "vllm"
    options = vllm_config.VllmBackendConfig(model=config.model.path, **config.rollout.backend_options)
    assert options.mode == "engine" and options.gpu_sharing == "colocate" and options.dtype == "bfloat16"


def test_the_lora_recipe_rolls_out_on_a_backend_that_takes_adapters():
    """Several learner ranks send only the adapters: the recipe's backend must declare it takes them."""
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.plugin_options import bind_plugin_options

    pytest.importorskip("agentgym_backend_transformers")
    config = load_config(EXAMPLES / "babyai_grpo_lora_gpu.yaml")
    assert config.model.lora.enabled and config.trainer.learners > 1
    bind_plugin_options(config, PluginManager(autoload=True, allow=["estimators", "transformers"]))


def test_the_lora_recipe_on_vllm_as_its_comment_says_builds_a_lora_engine_covering_its_rank():
    from agentgym_core.rl.plugin_options import backend_factory_options

    vllm_config = pytest.importorskip("agentgym_backend_vllm.config")
    comment = (EXAMPLES / "babyai_grpo_lora_gpu.yaml").read_text()
    options = re.search(r"'rollout.backend_options=(\{.*?\})'", comment).group(1)
    config = load_config(EXAMPLES / "babyai_grpo_lora_gpu.yaml",
                         ["rollout.backend=vllm", f"rollout.backend_options={options}"])
    engine = vllm_config.VllmBackendConfig(**backend_factory_options(config, vllm_config.VllmBackendConfig))
    assert engine.mode == "engine" and engine.gpu_sharing == "colocate" and engine.lora is not None
    assert engine.lora.max_lora_rank >= config.model.lora.r == engine.lora.r
