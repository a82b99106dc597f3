"""agentgym environments as TRL ``environment_factory`` classes, and TRL's GRPOTrainer running on one."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

from agentgym_core.integrations.trl import trl_environment
from agentgym_core.testing import serve_env

pytest.importorskip("agentgym_env_guess")
from agentgym_env_guess.env import GuessEnv  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trl_grpo.py"


def binary_search(environment) -> list[str]:
    """Play guess through the ``step`` tool as a model would; the tool's answers."""
    low, high, answers = 1, 100, []
    while True:
        guess = (low + high) // 2
        answer = environment.step(f"guess {guess}")
        answers.append(answer)
        if "ended" in answer:
            return answers
        low, high = (guess + 1, high) if "higher" in answer else (low, guess - 1)


def test_an_episode_through_the_tool_pays_the_environments_reward():
    environment = trl_environment(GuessEnv)()
    prompt = environment.reset(task_id=3)
    assert "A secret integer between 1 and 100" in prompt and "`step` tool" in prompt
    answers = binary_search(environment)
    assert "is correct!" in answers[-1] and environment.get_reward() == 1.0 and environment.success is True
    assert environment.step("guess 1") == "The episode has ended; no more actions are taken."
    environment.reset(task_id=3)
    assert environment.get_reward() == 0.0 and "Invalid action" in environment.step("hello")


def test_a_served_environment_plays_the_same_over_its_url():
    with serve_env(GuessEnv, {}) as url:
        local, remote = trl_environment(GuessEnv)(), trl_environment(url=url)()
        assert local.reset(task_id=7) == remote.reset(task_id=7)
        assert binary_search(local) == binary_search(remote) and remote.get_reward() == 1.0


def test_trl_sees_one_documented_tool_and_the_rows_task_or_a_seeded_draw():
    from transformers.utils import get_json_schema

    cls = trl_environment(GuessEnv, split="test", seed=5)
    public = {name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")}
    assert public == {"reset", "step", "get_reward"}  # TRL makes every public function but these a tool
    schema = get_json_schema(cls().step)
    assert schema["function"]["name"] == "step" and "action" in schema["function"]["parameters"]["properties"]
    first = cls()
    first.reset()
    assert 900 <= first.task_id < 1000  # drawn from the test split
    with pytest.raises(ValueError, match="exactly one"):
        trl_environment(GuessEnv, url="http://127.0.0.1:1")


@pytest.mark.slow
def test_trls_grpo_trainer_runs_two_steps_through_the_shim(tmp_path):
    pytest.importorskip("trl")
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("trl_grpo_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    from agentgym_core.plugins import PluginManager, reset_plugin_manager

    reset_plugin_manager(PluginManager(autoload=True, allow=["guess"]))
    try:
        trainer = example.main(["--env", "guess", "--steps", "2", "--output-dir", str(tmp_path), "--max-completion-length", "16"])
    finally:
        reset_plugin_manager()
    assert trainer.state.global_step == 2
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2 and all("rewards/AgentgymToolEnvironment/mean" in entry for entry in logged)
    played = trainer._environment_pool[None]
    assert played and all(re.fullmatch(r"\d+", str(environment.task_id)) for environment in played)
