"""A real kill -9 mid-run, then --resume: nothing but the step in progress is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentgym_core.rl.trainer import train

HERE = Path(__file__).parent

SCRIPT = """
import sys, torch
sys.path.insert(0, {here!r})
torch.set_num_threads(1)
from word_env import WordPlugin
from agentgym_core.plugins import PluginManager
from agentgym_core.rl.config import load_config
from agentgym_core.rl.trainer import train
from agentgym_core.testing.tiny_model import tiny_chat_model
pm = PluginManager(autoload=True, allow=["estimators", "transformers"])
pm.register(WordPlugin(), "word-test")
model, tokenizer = tiny_chat_model(seed=0)
train(load_config({config!r}), plugin_manager=pm, model=model, tokenizer=tokenizer)
"""


@pytest.mark.slow
def test_kill_9_then_resume_matches_uninterrupted(tmp_path, pm, tiny_config):
    from agentgym_core.rl.config import save_config
    from agentgym_core.testing.tiny_model import tiny_chat_model

    steps = {"trainer.steps": 4, "trainer.eval_tasks": 0}
    model, tokenizer = tiny_chat_model(seed=0)
    train(tiny_config(tmp_path / "full", **steps), plugin_manager=pm, model=model, tokenizer=tokenizer)
    full = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]

    config = tiny_config(tmp_path / "cut", **steps)
    (tmp_path / "cut").mkdir()
    save_config(config, tmp_path / "recipe.yaml")
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(here=str(HERE), config=str(tmp_path / "recipe.yaml"))],
                            env={**os.environ, "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD": "1"})
    done2 = tmp_path / "cut" / "checkpoints" / "step_000002" / "DONE"
    deadline = time.monotonic() + 300
    while not done2.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert done2.exists(), "the child never reached its second checkpoint"

    model, tokenizer = tiny_chat_model(seed=0)
    train(config, resume=True, plugin_manager=pm, model=model, tokenizer=tokenizer)
    resumed = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in resumed] == [1, 2, 3, 4]
    for a, b in zip(resumed, full, strict=True):
        for key in ("reward", "success", "sampled_tokens", "pg_loss", "grad_norm", "kl"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (a["step"], key)
