"""Suite-wide fixtures. Entry-point autoload is off: a test that wants installed plugins asks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"] = "1"
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random chat model saved as a Hugging Face directory (what `--model DIR` loads)."""
    from agentgym_core.testing.tiny_model import tiny_chat_model

    path = tmp_path_factory.mktemp("tiny_model")
    model, tokenizer = tiny_chat_model()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def one_rl_step(tmp_path):
    """Recipe overrides for one small GRPO step into ``tmp_path / "run"``, quiet; keyword arguments
    change a dotted key (``group_size=4`` sets ``rollout.group_size``)."""

    def overrides(**changes: object) -> list[str]:
        keys = {
            "trainer.steps": 1, "trainer.save_every": 1, "trainer.eval_tasks": 1, "trainer.progress": "false",
            "trainer.tensorboard": "false", "rollout.tasks_per_step": 1, "rollout.group_size": 2,
            "rollout.max_new_tokens": 6, "rollout.max_total_tokens": 1024, "algorithm.rounds_ctrl.rounds": 3,
        }
        for name, value in changes.items():
            keys[next(k for k in keys if k.rsplit(".", 1)[1] == name)] = value
        return [f"trainer.run_dir={tmp_path / 'run'}", *(f"{k}={v}" for k, v in keys.items())]

    return overrides
