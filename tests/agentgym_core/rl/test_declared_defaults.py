"""The trainer's defaults follow what a plugin declares, never its name: a third-party backend or
estimator that declares what ours declare gets what ours get, and the recipe is refused when it loads."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from agentgym_core import hookimpl
from agentgym_core.plugins import PluginManager
from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import load_config
from agentgym_core.rl.plugin_options import backend_capabilities, bind_plugin_options
from agentgym_core.rollout.backend import BackendCapabilities

pytest.importorskip("agentgym_estimators")
transformers_config = pytest.importorskip("agentgym_backend_transformers.config")
vllm_config = pytest.importorskip("agentgym_backend_vllm.config")


class ThirdPartyOptions(BaseModel):
    """``rollout.backend_options`` of the made-up backends."""

    model_config = ConfigDict(extra="forbid")
    model: str
    batch: int = 8


class ThirdParty:
    """Two backends declaring what transformers and vLLM declare, one declaring nothing, and an estimator that
    reads a critic."""

    @hookimpl
    def agentgym_register_rollout_backends(self, register):
        register("like_transformers", lambda options: None, capabilities=transformers_config.CAPABILITIES,
                 options=ThirdPartyOptions)
        register("like_vllm", lambda options: None, capabilities=vllm_config.CAPABILITIES)
        register("no_adapters", lambda options: None, capabilities=BackendCapabilities())

    @hookimpl
    def agentgym_register_advantage_estimators(self, register):
        register("critic_based", lambda batch, config: None, critic=True)


@pytest.fixture
def plugins():
    manager = PluginManager(autoload=True, allow=["estimators", "transformers", "vllm"])
    manager.register(ThirdParty(), "third-party")
    return manager


def recipe(*overrides: str):
    return load_config(None, ["envs=[{name: word}]", "model.path=tiny", *overrides])


SERVER_MODE = ["rollout.backend_options={mode: server, urls: ['http://127.0.0.1:9']}"]  # needs no vllm here


@pytest.mark.parametrize(("ours", "theirs"), [("transformers", "like_transformers"), ("vllm", "like_vllm")])
def test_a_third_party_backend_with_our_declarations_gets_our_defaults(plugins, ours, theirs):
    options = SERVER_MODE if ours == "vllm" else []
    for extra in ([], ["rollout.max_staleness=1"], ["model.mixed_precision=bf16"]):
        mine = bind_plugin_options(recipe(f"rollout.backend={ours}", *options, *extra), plugins)
        other = bind_plugin_options(recipe(f"rollout.backend={theirs}", *extra), plugins)
        assert mine.off_policy_correction == other.off_policy_correction, extra
        assert (backend_capabilities(mine, plugins).expandable_segments
                == backend_capabilities(other, plugins).expandable_segments)
    # The defaults themselves: only a backend sampling from the learner's own module, in its precision and in
    # step with it, needs no correction; vLLM's memory pool keeps the allocator as PyTorch sets it.
    shares = ours == "transformers"
    assert bind_plugin_options(recipe(f"rollout.backend={theirs}"), plugins).off_policy_correction == (
        "none" if shares else "tis")
    assert backend_capabilities(recipe(f"rollout.backend={theirs}"), plugins).expandable_segments is shares


def test_an_estimator_that_declares_a_critic_needs_one_whatever_its_name(plugins):
    for name in ("gae", "critic_based"):
        with pytest.raises(ConfigError, match=f"algorithm.estimator={name} reads critic values.*"
                                              "algorithm.critic.enabled=true"):
            bind_plugin_options(recipe(f"algorithm.estimator={name}"), plugins)
        bind_plugin_options(recipe(f"algorithm.estimator={name}", "algorithm.critic.enabled=true"), plugins)


def test_backend_options_are_checked_against_the_declared_schema(plugins):
    with pytest.raises(ConfigError, match=r"rollout.backend=like_transformers does not take these options: unknown "
                                          r"key 'rollout.backend_options.bach' \(did you mean 'batch'\?\)"):
        bind_plugin_options(recipe("rollout.backend=like_transformers", "rollout.backend_options.bach=2"), plugins)
    with pytest.raises(ConfigError, match=r"rollout.backend_options.batch: Input should be a valid integer"):
        bind_plugin_options(recipe("rollout.backend=like_transformers", "rollout.backend_options.batch=x"), plugins)
    bind_plugin_options(recipe("rollout.backend=like_transformers", "rollout.backend_options.batch=2"), plugins)
    # Ours are checked the same way: the GPU docs' vLLM options are not the transformers backend's.
    with pytest.raises(ConfigError, match="unknown key 'rollout.backend_options.gpu_sharing'"):
        bind_plugin_options(recipe("rollout.backend_options.gpu_sharing=colocate"), plugins)
    with pytest.raises(ConfigError, match="unknown key 'rollout.backend_options.kv_cache_dtype'"):
        bind_plugin_options(recipe("rollout.backend=vllm", "rollout.backend_options.mode=server",
                                   "rollout.backend_options.urls=[http://127.0.0.1:9]",
                                   "rollout.backend_options.kv_cache_dtype=bfloat16"), plugins)


def test_lora_on_several_learners_needs_a_backend_that_declares_it_takes_adapters(plugins):
    """The ranks send only the adapters after an update: a backend that does not declare ``lora_adapters`` is
    refused when the recipe loads, as is one with weights of its own on one learner; ours declare it (vLLM: in
    engine mode, its server mode refuses LoRA)."""
    lora = ["model.lora.enabled=true", "trainer.learners=2", "runtime.optimizer_state_to_disk=false"]
    for name in ("transformers", "like_transformers", "like_vllm"):
        bind_plugin_options(recipe(f"rollout.backend={name}", *lora), plugins)
    with pytest.raises(ConfigError, match=r"rollout.backend=no_adapters does not declare it takes \(lora_adapters\)"):
        bind_plugin_options(recipe("rollout.backend=no_adapters", *lora), plugins)
    # one learner too: a backend with weights of its own receives the adapters alone after every update
    with pytest.raises(ConfigError, match=r"rollout.backend=no_adapters, which keeps its own weights: .*"
                                          r"does not declare it takes \(lora_adapters\)"):
        bind_plugin_options(recipe("rollout.backend=no_adapters", "model.lora.enabled=true"), plugins)
    bind_plugin_options(recipe("rollout.backend=transformers", "model.lora.enabled=true"), plugins)  # samples the module
    with pytest.raises(ConfigError, match=r"rollout.backend=vllm does not take these options: .*model.lora.enabled "
                                          r"with mode 'server'"):
        bind_plugin_options(recipe("rollout.backend=vllm", *SERVER_MODE, *lora), plugins)


def test_a_backend_whose_options_have_a_lora_field_gets_the_recipes_lora(plugins):
    """As ``model`` from ``model.path``: the adapters' shape from ``model.lora``, None when LoRA is off."""
    from agentgym_core.rl.plugin_options import backend_factory_options

    on = recipe("model.lora.enabled=true", "model.lora.r=8", "model.lora.alpha=4", "model.lora.target_modules=[q_proj]")
    assert backend_factory_options(on, vllm_config.VllmBackendConfig)["lora"] == {
        "r": 8, "alpha": 4, "dropout": 0.0, "target_modules": ["q_proj"]}
    assert backend_factory_options(recipe(), vllm_config.VllmBackendConfig)["lora"] is None
    assert "lora" not in backend_factory_options(on, ThirdPartyOptions)  # a class without the field: nothing added


def test_lora_on_ray_is_refused_when_the_recipe_loads():
    with pytest.raises(ConfigError, match=r"model.lora.enabled with trainer.launcher=ray"):
        recipe("model.lora.enabled=true", "trainer.launcher=ray")
