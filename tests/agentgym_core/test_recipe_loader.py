"""The one recipe loader (agentgym_core.recipes): the regrouped schema gives every recipe its old meaning.

``recipe_configs_main.json`` is the effective config (defaults filled in) of every recipe in
``examples/`` and ``bench/`` as the schema before the regrouping resolved them, taken on main. Mapped
with :data:`MOVED_KEYS`, it must equal what the recipes resolve to now, and a recipe in the old
layout must load to the same config with one deprecation line per moved key.

A recipe changed on purpose gets its entry replaced by its new effective config (``effective(path)``
below, written into the JSON); the comparison maps old keys only, so a new-layout entry compares as is.
So does a default changed on purpose (``algorithm.off_policy.stop_kl`` 1.0 -> 0.5 after the regrouping).
"""

from __future__ import annotations

import copy
import json
import logging
import re
from pathlib import Path

import pytest
import yaml

from agentgym_core.finetune.config import load_finetune_config
from agentgym_core.recipes import MOVED_KEYS, MOVED_KEYS_REMOVED_IN, ConfigError, recipe_kind
from agentgym_core.rl.config import load_config

ROOT = Path(__file__).resolve().parents[2]
BEFORE = json.loads((Path(__file__).with_name("recipe_configs_main.json")).read_text())


def effective(path: str) -> dict:
    load = load_config if recipe_kind(ROOT / path) == "rl" else load_finetune_config
    return load(ROOT / path).model_dump(mode="json")


def moved(config: dict) -> dict:
    """``config`` (old layout) with every key of MOVED_KEYS at its new place."""
    config = copy.deepcopy(config)
    for old, new in MOVED_KEYS.items():
        *old_sections, old_key = old.split(".")
        node = config
        for section in old_sections:
            node = node.get(section) or {}
        if old_key not in node:
            continue
        value = node.pop(old_key)
        *new_sections, new_key = new.split(".")
        node = config
        for section in new_sections:
            node = node.setdefault(section, {})
        node[new_key] = value
    return config


def test_every_recipe_of_the_snapshot_is_still_there():
    recipes = {str(p.relative_to(ROOT)) for d in ("examples", "bench") for p in (ROOT / d).glob("*.yaml")}
    assert set(BEFORE) <= recipes, "a recipe was removed or renamed: drop or rename its entry in the snapshot"


@pytest.mark.parametrize("path", sorted(BEFORE))
def test_every_recipe_resolves_as_before_the_regrouping(path):
    assert effective(path) == moved(BEFORE[path])


OLD_LAYOUT = """
model: {path: smollm2-135m-instruct, threads: 2, autocast_cache: false, onednn_primitive_cache: 32,
        heap_trim_interval_s: 0.5}
envs: [{name: guess}]
trainer:
  steps: 3
  launcher: ray
  optimizer_state_to_disk: true
  ray_address: auto
  rollout_workers: 2
  learner_resources: {num_cpus: 2}
  rollout_resources: {num_cpus: 1, num_gpus: 0.5}
  placement_timeout_s: 30
  remote_timeout_s: 60
  rollout_worker_restarts: 0
"""

NEW_LAYOUT = """
model: {path: smollm2-135m-instruct}
envs: [{name: guess}]
trainer:
  steps: 3
  launcher: ray
  ray:
    address: auto
    rollout_workers: 2
    learner_resources: {num_cpus: 2}
    rollout_resources: {num_cpus: 1, num_gpus: 0.5}
    placement_timeout_s: 30
    remote_timeout_s: 60
    rollout_worker_restarts: 0
runtime: {threads: 2, autocast_cache: false, onednn_primitive_cache: 32, heap_trim_interval_s: 0.5,
          optimizer_state_to_disk: true}
"""


def test_a_recipe_in_the_old_layout_loads_the_same_with_one_warning_per_moved_key(tmp_path, caplog):
    (tmp_path / "old.yaml").write_text(OLD_LAYOUT)
    (tmp_path / "new.yaml").write_text(NEW_LAYOUT)
    with caplog.at_level(logging.WARNING, logger="agentgym_core.recipes"):
        old = load_config(tmp_path / "old.yaml")
    warnings = [r.getMessage() for r in caplog.records if r.name == "agentgym_core.recipes"]
    assert len(warnings) == len(MOVED_KEYS)
    for (old_key, new_key), message in zip(MOVED_KEYS.items(), warnings, strict=True):
        assert f"{old_key} has moved to {new_key}" in message and "\n" not in message
        assert message.endswith(f"works until agentgym-core {MOVED_KEYS_REMOVED_IN}")
    caplog.clear()
    assert old == load_config(tmp_path / "new.yaml")
    assert not caplog.records  # the new layout loads silently
    assert old.trainer.ray.rollout_workers == 2 and old.runtime.threads == 2


def test_an_old_key_as_an_override_is_moved_too(caplog):
    with caplog.at_level(logging.WARNING, logger="agentgym_core.recipes"):
        config = load_config(None, ["envs=[{name: guess}]", "model.threads=3", "trainer.launcher=ray",
                                    "trainer.learner_resources.num_gpus=1", "trainer.rollout_workers=2"])
    assert config.runtime.threads == 3
    assert config.trainer.ray.learner_resources.num_gpus == 1 and config.trainer.ray.rollout_workers == 2
    assert any("trainer.learner_resources has moved to trainer.ray.learner_resources" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("installed", [MOVED_KEYS_REMOVED_IN, "9.0.0.dev1"])
def test_from_the_removal_version_on_an_old_key_is_an_error_naming_the_new_one(tmp_path, monkeypatch, installed):
    import agentgym_core.recipes as recipes

    monkeypatch.setattr(recipes.importlib.metadata, "version", lambda name: installed)
    (tmp_path / "old.yaml").write_text("envs: [{name: guess}]\nmodel: {threads: 2}\n")
    with pytest.raises(ConfigError, match=rf"model.threads is no longer read \(removed in agentgym-core "
                                          rf"{re.escape(MOVED_KEYS_REMOVED_IN)}\); write it as runtime.threads"):
        load_config(tmp_path / "old.yaml")
    with pytest.raises(ConfigError, match=r"override: trainer.rollout_workers is no longer read .*trainer.ray"):
        load_config(None, ["envs=[{name: guess}]", "trainer.rollout_workers=2"])


def test_a_key_at_both_places_is_an_error_naming_both(tmp_path):
    (tmp_path / "both.yaml").write_text("envs: [{name: guess}]\nmodel: {threads: 2}\nruntime: {threads: 4}\n")
    with pytest.raises(ConfigError, match=r"sets both model.threads .* and runtime.threads; keep only runtime.threads"):
        load_config(tmp_path / "both.yaml")


def test_fine_tuning_recipes_take_the_old_layout_too(tmp_path):
    recipe = yaml.safe_load((ROOT / "examples/babyai_sft_cpu.yaml").read_text())
    recipe["model"]["threads"] = recipe.pop("runtime")["threads"]
    (tmp_path / "old_sft.yaml").write_text(yaml.safe_dump(recipe))
    assert load_finetune_config(tmp_path / "old_sft.yaml") == load_finetune_config(ROOT / "examples/babyai_sft_cpu.yaml")


@pytest.mark.parametrize("path", ["examples/babyai_grpo_cpu.yaml", "examples/babyai_sft_cpu.yaml"])
def test_print_config_shows_the_stated_keys_first_and_loads_back_to_the_same_config(path, tmp_path, capsys):
    from agentgym_core.cli import main
    from agentgym_core.plugins import PluginManager, reset_plugin_manager

    recipe = ROOT / path
    reset_plugin_manager(PluginManager(autoload=True))  # the recipe's env and estimator, as a user has them
    try:
        code = main(["train", str(recipe), "trainer.eval_tasks=3", "--print-config"])
    finally:
        reset_plugin_manager(None)
    assert code == 0
    printed = capsys.readouterr().out
    stated, folded = printed.split("\n# Every other key, at its default, by section", 1)
    own = yaml.safe_load(stated)
    written = yaml.safe_load(recipe.read_text())
    assert list(own) == [s for s in own if s in written]  # only what the recipe or an override states
    assert own["trainer"]["eval_tasks"] == 3 and own["model"] == written["model"]
    assert all(line.startswith("# ") or not line for line in folded.splitlines()[1:])
    if "kind" not in written:
        assert re.search(r"#   ray:  # .+\n#     address: null  # ", folded) and "ray" not in own["trainer"]
    (tmp_path / "printed.yaml").write_text(printed)  # the comments aside, the same config
    load = load_config if recipe_kind(recipe) == "rl" else load_finetune_config
    assert load(tmp_path / "printed.yaml") == load(recipe, ["trainer.eval_tasks=3"])


def test_the_recipe_reference_lists_every_moved_key():
    page = (ROOT / "docs" / "reference" / "recipe.md").read_text()
    assert f"until agentgym-core {MOVED_KEYS_REMOVED_IN}" in page
    for old, new in MOVED_KEYS.items():
        assert f"| `{old}` | `{new}` |" in page, old


def test_print_config_gives_every_folded_key_its_help_and_uncommented_loads_to_the_defaults():
    from agentgym_core.recipes import first_sentence, show_config

    config = load_config(ROOT / "examples/babyai_grpo_cpu.yaml")
    printed = show_config(config)
    folded = printed.split("uncomment a line to set it):\n", 1)[1]
    keyed = [line for line in folded.splitlines() if re.match(r"# +(- )?\w+:", line)]
    assert len(keyed) > 100 and all("  # " in line for line in keyed), [x for x in keyed if "  # " not in x][:3]
    assert "#   max_staleness: 0  # Most policy versions a trained trajectory may lag behind the learner" in folded
    defaults = yaml.safe_load("\n".join(line[2:] for line in folded.splitlines()))  # every line uncommented
    assert defaults["trainer"]["ray"]["learner_resources"] == {"num_cpus": 1.0, "num_gpus": 0.0, "resources": {}}
    assert defaults["optim"]["betas"] == [0.9, 0.999] and defaults["model"]["lora"]["r"] == 16
    assert defaults["envs"][0]["weight"] == 1.0 and defaults["envs"][0]["env_kwargs"] == {}
    assert first_sentence("Trajectories (e.g. JSONL files). More.") == "Trajectories (e.g. JSONL files)."
