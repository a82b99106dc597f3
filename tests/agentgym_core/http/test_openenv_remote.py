"""The other way (issue 49): agentgym's trainer trains on an OpenEnv server.

The server is ``openenv-core``'s own FastAPI app (``create_fastapi_app``) serving a small OpenEnv
environment written here, on loopback; agentgym reaches it through ``protocol: openenv``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("openenv")
torch = pytest.importorskip("torch")
pytest.importorskip("agentgym_estimators")
pytest.importorskip("agentgym_backend_transformers")

from openenv.core.env_server.http_server import create_fastapi_app  # noqa: E402 - after the skips
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402

from agentgym_core.env import EnvError  # noqa: E402
from agentgym_core.http.openenv_remote import OpenEnvRemote  # noqa: E402
from agentgym_core.http.serving import serve_app  # noqa: E402
from agentgym_core.plugins import PluginManager  # noqa: E402
from agentgym_core.rl.config import load_config  # noqa: E402
from agentgym_core.rl.trainer import train  # noqa: E402
from agentgym_core.testing.tiny_model import tiny_chat_model  # noqa: E402

WORDS = ["apple", "river", "stone", "cloud"]


class SayAction(Action):
    message: str


class SayObservation(Observation):
    prompt: str


class SayTheWord(Environment):
    """Say the word you are shown (an OpenEnv environment, as its authors write them)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=None, step_count=0)
        self._word = WORDS[0]

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> SayObservation:
        self._word = WORDS[(seed or 0) % len(WORDS)]
        self._state = State(episode_id=episode_id, step_count=0)
        return SayObservation(prompt=f"Say the word {self._word}.")

    def step(self, action: SayAction, timeout_s: float | None = None, **kwargs: Any) -> SayObservation:
        self._state.step_count += 1
        said = self._word in action.message
        return SayObservation(prompt="Right." if said else f"No: say {self._word}.", reward=1.0 if said else 0.0,
                              done=said or self._state.step_count >= 2)

    @property
    def state(self) -> State:
        return self._state


@pytest.fixture(scope="module")
def url():
    app = create_fastapi_app(SayTheWord, SayAction, SayObservation, max_concurrent_envs=16)
    with serve_app(app) as base:
        yield base


def test_an_openenv_environment_plays_as_an_agentgym_env(url):
    env = OpenEnvRemote(url)
    try:
        assert env.action_field == "message"  # read from the server's /schema
        assert env.reset(2).observation == "Say the word stone."
        wrong = env.step("pebble")
        assert (wrong.observation, wrong.reward, wrong.done) == ("No: say stone.", 0.0, False)
        right = env.step("stone")
        assert (right.reward, right.done) == (1.0, True)
        assert env.instruction.startswith("SayTheWord environment")  # the server's /metadata
    finally:
        env.close()
    with pytest.raises(EnvError, match="did not answer GET /schema"):
        OpenEnvRemote("http://127.0.0.1:9", timeout_s=2)


def test_two_training_steps_on_an_openenv_server(url, tmp_path, one_rl_step):
    torch.set_num_threads(1)
    manager = PluginManager(autoload=True, allow=["estimators", "transformers"])
    model, tokenizer = tiny_chat_model(seed=0)
    config = load_config(None, [f"envs=[{{name: say, url: '{url}', protocol: openenv, max_concurrency: 2, "
                                "env_kwargs: {train_tasks: 8, test_tasks: 4}}]", *one_rl_step(steps=2)])
    train(config, plugin_manager=manager, model=model, tokenizer=tokenizer)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if x["kind"] == "train"]
    assert [x["step"] for x in steps] == [1, 2] and all(x["trajectories"] == 2 for x in steps)
    saved = [json.loads(x) for x in (tmp_path / "run" / "trajectories" / "step_000002.jsonl").read_text().splitlines()]
    assert all(record["env"] == "say" for record in saved)
    assert all("Say the word" in json.dumps(record) for record in saved)  # the OpenEnv server's text reached the model


def test_a_recipe_with_protocol_openenv_needs_a_url():
    from agentgym_core.recipes import ConfigError

    with pytest.raises(ConfigError, match="protocol: openenv but no url"):
        load_config(None, ["envs=[{name: say, protocol: openenv}]"])
