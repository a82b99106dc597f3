"""The trainer drives a served adapter env over HTTP: one GRPO step with the tiny model on TextArena."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("textarena")
torch = pytest.importorskip("torch")
pytest.importorskip("agentgym_estimators")
pytest.importorskip("agentgym_backend_transformers")

from agentgym_core.plugins import PluginManager  # noqa: E402
from agentgym_core.rl.config import load_config  # noqa: E402
from agentgym_core.rl.trainer import train  # noqa: E402
from agentgym_core.testing import serve_env  # noqa: E402
from agentgym_core.testing.tiny_model import tiny_chat_model  # noqa: E402
from agentgym_env_textarena import TextArenaEnv  # noqa: E402


def test_one_grpo_step_against_a_served_textarena(tmp_path, one_rl_step):
    torch.set_num_threads(1)
    manager = PluginManager(autoload=True, allow=["estimators", "transformers", "textarena"])
    env_cls = TextArenaEnv.configured(games=["TowerOfHanoi-v0"])
    model, tokenizer = tiny_chat_model(seed=0)
    with serve_env(env_cls, {"games": ["TowerOfHanoi-v0"], "max_steps": 3}) as url:
        config = load_config(
            None,
            [f"envs=[{{name: textarena, url: '{url}', max_concurrency: 2}}]", *one_rl_step()],
        )
        train(config, plugin_manager=manager, model=model, tokenizer=tokenizer)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(x for x in lines if x["kind"] == "train")
    assert step["step"] == 1 and step["trajectories"] == 2 and step["turns"] >= 1
    saved = [
        json.loads(x)
        for x in (tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text().splitlines()
    ]
    assert all(record["env"] == "textarena" for record in saved)
    assert any(
        "Tower of Hanoi" in json.dumps(record) for record in saved
    )  # the served game's text reached the model
