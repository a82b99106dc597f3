"""An RL run keeps only the newest `trainer.keep_checkpoints` checkpoints on disk (one is 1.6 GB for SmolLM2)."""

from __future__ import annotations

import pytest

from agentgym_core.rl.trainer import train
from agentgym_core.training.checkpoint import latest_checkpoint


@pytest.mark.parametrize(("keep", "left"), [(None, ["step_000002", "step_000003"]), (1, ["step_000003"])])
def test_old_checkpoints_are_deleted(tmp_path, pm, tiny_config, keep, left):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    overrides = {"trainer.eval_tasks": 0}  # tiny_config saves after every one of its 3 steps
    if keep is not None:
        overrides["trainer.keep_checkpoints"] = keep
    config = tiny_config(tmp_path / "run", **overrides)
    model, tokenizer = tiny_chat_model(seed=0)
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    root = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("step_")) == left
    assert latest_checkpoint(tmp_path / "run") == root / "step_000003"
