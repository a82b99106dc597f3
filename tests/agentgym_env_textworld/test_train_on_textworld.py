"""The trainer plays TextWorld on its env threads: one GRPO step with the tiny model's sampled replies.

The tiny random model writes bytes no player would type, control characters among them; before the
adapter cut commands to printable ASCII, the first such reply reached jericho's frotz and segfaulted
the trainer's process (the crash of issue 41's learning run).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("textworld")
torch = pytest.importorskip("torch")
pytest.importorskip("agentgym_estimators")
pytest.importorskip("agentgym_backend_transformers")

from agentgym_core.plugins import PluginManager  # noqa: E402
from agentgym_core.rl.config import load_config  # noqa: E402
from agentgym_core.rl.trainer import train  # noqa: E402
from agentgym_core.testing.tiny_model import tiny_chat_model  # noqa: E402
from agentgym_env_textworld import game_file  # noqa: E402


@pytest.mark.slow  # generates two games, then an evaluation and a step of sampled episodes
def test_one_grpo_step_with_sampled_replies_on_textworld(tmp_path, one_rl_step):
    torch.set_num_threads(1)
    cache = tmp_path / "games"
    for task in (0, 1000):
        game_file(task, cache)
    manager = PluginManager(autoload=True, allow=["estimators", "transformers", "textworld"])
    model, tokenizer = tiny_chat_model(seed=0)
    config = load_config(
        None,
        [
            f"envs=[{{name: textworld, env_kwargs: {{cache_dir: '{cache}', max_steps: 4}}, train_tasks: [0], "
            "test_tasks: [1000], max_concurrency: 4}]",
            *one_rl_step(group_size=4, max_new_tokens=12, max_total_tokens=4096, rounds=4),
        ],
    )
    train(config, plugin_manager=manager, model=model, tokenizer=tokenizer)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(x for x in lines if x["kind"] == "train")
    assert step["step"] == 1 and step["trajectories"] == 4 and step["turns"] >= 1
    saved = (tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text()
    assert "Valid commands" in saved  # the game's text reached the model
