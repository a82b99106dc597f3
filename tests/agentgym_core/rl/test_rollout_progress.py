"""Training shows each step's rollout, and each held-out evaluation, as a line that moves every turn."""

from __future__ import annotations

import re

from agentgym_core.rl.trainer import train


def test_training_rollouts_and_evaluations_show_turns_and_tokens_per_second(
    tmp_path, pm, tiny_config, capsys
):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    config = tiny_config(tmp_path / "run", **{"trainer.steps": 1, "trainer.progress": "true"})
    model, tokenizer = tiny_chat_model(seed=0)
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    shown = [f.strip() for f in re.split(r"[\r\n]", capsys.readouterr().err) if f.strip()]
    rollout = [f for f in shown if f.startswith("rollout step 0: ")]
    assert any(re.search(r"\d/6 traj \[.*\b\d+ turns?, \d+\.\d tok/s", f) for f in rollout), shown
    evals = [f for f in shown if f.startswith("eval word (step ")]
    assert any(re.search(r"\d/2 traj \[.*\b\d+ turns?, \d+\.\d tok/s", f) for f in evals), shown
