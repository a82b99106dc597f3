"""Every CPU recipe in examples/ runs: one training step end to end with a tiny random model.

The recipe's environment is served on loopback by the trainer, as `agentgym train` does; only
the model is swapped for a tiny one and the step made small, so a broken recipe (wrong env name,
bad env options, a schedule the env rejects) fails here rather than on a user's machine.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agentgym_core.pipeline import run_rl_recipe as train
from agentgym_core.plugins import PluginManager
from agentgym_core.recipes import recipe_kind
from agentgym_core.rl.config import load_config
from agentgym_core.testing.tiny_model import tiny_chat_model

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# RL recipes; the SFT/DPO/rejection-sampling ones run in tests/agentgym_core/finetune.
CPU_RECIPES = sorted(p for p in EXAMPLES.glob("*_cpu.yaml") if recipe_kind(p) == "rl")


@pytest.mark.parametrize("recipe", CPU_RECIPES, ids=lambda p: p.stem)
def test_cpu_recipe_trains_one_step(recipe, tmp_path):
    small = [
        f"trainer.run_dir={tmp_path / 'run'}", "trainer.steps=1", "trainer.eval_tasks=1", "trainer.save_every=1",
        "rollout.tasks_per_step=1", "rollout.group_size=2", "rollout.max_new_tokens=8",
    ]
    if load_config(recipe).warm_start is not None:  # the warm start runs too, on 6 expert episodes
        small += ["warm_start.expert.n=6", "warm_start.sft.batch_size=2", "warm_start.data.max_tokens=null"]
    config = load_config(recipe, small)
    env_name = config.envs[0].name
    if env_name.startswith("webarena") and shutil.which("chromium") is None:
        pytest.skip("Debian chromium is not installed")
    if env_name == "sciworld" and shutil.which("java") is None:
        pytest.skip("java is not installed")
    model, tokenizer = tiny_chat_model(seed=0)
    train(config, plugin_manager=PluginManager(autoload=True), model=model, tokenizer=tokenizer)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if m.get("step") == 0]
    assert steps, f"no metrics for step 0 in {metrics}"
    assert any((tmp_path / "run" / "checkpoints").glob("step_*/DONE"))
    if config.warm_start is not None:
        assert any((tmp_path / "run" / "warm_start" / "checkpoints").glob("step_*/DONE"))
