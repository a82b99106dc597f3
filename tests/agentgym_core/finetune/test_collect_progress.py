"""`agentgym collect`'s progress line moves every turn of a model policy, not per finished trajectory."""

from __future__ import annotations

import re
import time

import pytest


def test_collect_with_a_model_shows_turns_and_time_left_before_any_trajectory_ends(tmp_path, tiny, capsys):
    pytest.importorskip("agentgym_env_guess")
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.finetune.collect import collect
    from agentgym_core.finetune.config import CollectConfig
    from agentgym_env_guess.env import GuessEnv

    class SlowGuessEnv(GuessEnv):
        """The guessing game with a step that takes 0.3 s, as a remote or heavy env's does."""

        def step(self, action):
            time.sleep(0.3)
            return super().step(action)

    model, tokenizer = tiny
    result = collect(
        CollectConfig(
            env="guess",
            policy="tiny",
            n=1,
            max_turns=3,
            max_new_tokens=8,
            num_envs=1,
            out=str(tmp_path / "c.jsonl"),
        ),
        make_env=SlowGuessEnv,
        backend=TransformersBackend(model, tokenizer),
        tokenizer=tokenizer,
    )
    assert result.trajectories == 1
    shown = [f.strip() for f in re.split(r"[\r\n]", capsys.readouterr().err) if f.strip()]
    assert any(
        re.search(r"0/1 traj \[.*\b\d+ turns?, \d+\.\d tok/s, at most \d+:\d\d left", f) for f in shown
    ), shown
    assert "1/1 traj" in shown[-1] and "3 turns" in shown[-1], shown
