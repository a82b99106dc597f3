"""Config: YAML + dotted overrides, anchor keys, teaching errors, the saved resolved config."""

from __future__ import annotations

import pytest

from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import load_config, save_config


def test_yaml_plus_overrides(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("envs: [{name: babyai}]\nalgorithm: {estimator: rloo}\ntrainer: {steps: 5}\n")
    config = load_config(recipe, ["trainer.steps=7", "algorithm.rounds_ctrl.type=scaling_inter_stepwise",
                                  "algorithm.rounds_ctrl.rounds=[10,20,30]", "envs.0.url=http://127.0.0.1:9"])
    assert config.trainer.steps == 7 and config.algorithm.estimator == "rloo"
    assert config.algorithm.rounds_ctrl.stages == [10, 20, 30]
    assert config.envs[0].url == "http://127.0.0.1:9"


def test_an_unquoted_no_is_the_mixed_precision_setting_no(tmp_path):
    # YAML 1.1 reads `no` as false; the docs write `model.mixed_precision=no`
    assert load_config(None, ["envs=[{name: x}]", "model.mixed_precision=no"]).model.mixed_precision == "no"
    recipe = tmp_path / "r.yaml"
    recipe.write_text("envs: [{name: x}]\nmodel: {mixed_precision: no}\n")
    assert load_config(recipe, []).model.mixed_precision == "no"


def test_unknown_key_suggests_the_right_one():
    with pytest.raises(ConfigError, match=r"'algorithm\.ppo_epoch'.*Did you mean 'algorithm\.ppo_epochs'"):
        load_config(None, ["envs=[{name: x}]", "algorithm.ppo_epoch=2"])
    with pytest.raises(ConfigError, match=r"envs\[0\]\.ulr.*envs\[0\]\.url"):
        load_config(None, ["envs=[{name: x, ulr: y}]"])


def test_invalid_values_name_the_key():
    with pytest.raises(ConfigError, match="rollout.group_size"):
        load_config(None, ["envs=[{name: x}]", "rollout.group_size=0"])
    with pytest.raises(ConfigError, match="trainer.learners=2 does not support algorithm.critic.enabled"):
        load_config(None, ["envs=[{name: x}]", "trainer.learners=2", "algorithm.critic.enabled=true"])
    with pytest.raises(ConfigError, match="no '='"):
        load_config(None, ["trainer.steps"])


def test_env_categories_must_be_a_non_empty_list_without_repeats():
    assert load_config(None, ["envs=[{name: x, categories: [a, b]}]"]).envs[0].categories == ["a", "b"]
    with pytest.raises(ConfigError, match="categories is empty"):
        load_config(None, ["envs=[{name: x, categories: []}]"])
    with pytest.raises(ConfigError, match="categories lists 'a' more than once"):
        load_config(None, ["envs=[{name: x, categories: [a, b, a]}]"])


def test_resolved_config_round_trips(tmp_path):
    config = load_config(None, ["envs=[{name: x}]", "algorithm.clip_high=0.28"])
    save_config(config, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == config


def test_recipes_in_examples_validate():
    from pathlib import Path

    from agentgym_core.finetune.config import load_finetune_config
    from agentgym_core.recipes import recipe_kind

    recipes = sorted((Path(__file__).parents[3] / "examples").glob("*.yaml"))
    assert recipes
    for recipe in recipes:
        (load_config if recipe_kind(recipe) == "rl" else load_finetune_config)(recipe)


def test_train_command_dispatches_on_the_recipe_kind(capsys):
    from pathlib import Path

    from agentgym_core.cli import main
    from agentgym_core.plugins import PluginManager, reset_plugin_manager

    pytest.importorskip("agentgym_env_babyai")
    # --print-config looks the estimator and the recipe's envs up
    reset_plugin_manager(PluginManager(autoload=True, allow=["estimators", "transformers", "babyai"]))

    examples = Path(__file__).parents[3] / "examples"
    assert main(["train", str(examples / "babyai_sft_cpu.yaml"), "--print-config"]) == 0
    assert capsys.readouterr().out.startswith("kind: sft")
    assert main(["train", str(examples / "babyai_grpo_cpu.yaml"), "kind=rl", "--print-config"]) == 0
    assert "algorithm:" in capsys.readouterr().out
    assert main(["train", str(examples / "babyai_grpo_cpu.yaml"), "kind=ppo"]) == 2
    assert "unknown recipe kind 'ppo'" in capsys.readouterr().err
    reset_plugin_manager(None)


@pytest.mark.parametrize(("override", "message"), [
    ("trainer.ray.rollout_workers=2", "needs trainer.launcher=ray"),
    ("trainer.ray.rollout_resources={num_cpus: 0}", "must ask for some resource"),
    ("trainer.launcher=slurm", "trainer.launcher"),
    ("rollout.max_staleness=-1", "rollout.max_staleness"),
    ("rollout.curriculum.kind=easy_first", "rollout.curriculum.kind"),
    ("rollout.curriculum.decay=0", "rollout.curriculum.decay"),
    ("rollout.curriculum.floor=1.5", "rollout.curriculum.floor"),
    ("rollout.curriculum={kind: pass_rate, flor: 0.1}", "Did you mean 'rollout.curriculum.floor'"),
])
def test_launcher_and_staleness_options_are_checked(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["envs=[{name: word}]", override])


def test_the_curriculum_is_off_by_default_and_refuses_asynchronous_rollouts():
    assert load_config(None, ["envs=[{name: word}]"]).rollout.curriculum.kind == "none"
    with pytest.raises(ConfigError, match=r"rollout.curriculum.kind=pass_rate needs rollout.max_staleness=0.*"
                                          r"Set rollout.max_staleness=0, or rollout.curriculum.kind=none"):
        load_config(None, ["envs=[{name: word}]", "rollout.curriculum.kind=pass_rate", "rollout.max_staleness=1"])
    # Synchronous, on either launcher: accepted (the Ray workers get the counts with each step's collect).
    config = load_config(None, ["envs=[{name: word}]", "rollout.curriculum.kind=pass_rate", "trainer.launcher=ray"])
    assert config.rollout.curriculum.kind == "pass_rate"


def test_a_model_path_this_machine_lacks_is_refused_with_the_fix_before_any_work(tmp_path):
    """What ``run_rl_recipe`` checks first: a missing model is one teaching error, not a failure per rank later."""
    from agentgym_core.models import ModelNotFoundError
    from agentgym_core.pipeline import run_rl_recipe

    config = load_config(None, ["envs=[{name: nowhere}]", "model.path=/models/not-here",
                                f"trainer.run_dir={tmp_path / 'run'}"])
    with pytest.raises(ModelNotFoundError, match="cannot find model '/models/not-here'"):
        config.model.check_present()
    with pytest.raises(ModelNotFoundError, match="cannot find model"):
        run_rl_recipe(config)
    assert not (tmp_path / "run").exists()  # no phase started
