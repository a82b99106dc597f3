"""OpenEnv's routes on `agentgym serve` (issue 49), checked with the real ``openenv-core`` client and
its own wire models, over loopback."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from pydantic import Field

pytest.importorskip("openenv")
pytest.importorskip("agentgym_env_babyai")

from openenv.core import EnvClient  # noqa: E402 - after the skip
from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_server.types import (  # noqa: E402
    Action,
    EnvironmentMetadata,
    HealthResponse,
    Observation,
    ResetResponse,
    SchemaResponse,
    State,
    StepResponse,
)
from openenv.core.generic_client import GenericEnvClient  # noqa: E402

from agentgym_core.testing import serve_env, start_server_process  # noqa: E402
from agentgym_env_babyai.env import BabyAIEnv  # noqa: E402
from agentgym_env_babyai.expert import solve  # noqa: E402
from agentgym_env_guess import GuessEnv  # noqa: E402

AGENTGYM = str(Path(sys.executable).with_name("agentgym"))
# A separate `agentgym serve` process: it loads the installed plugins (the suite switches autoload off).
SERVER_ENV = {k: v for k, v in os.environ.items() if k not in ("AGENTGYM_DISABLE_PLUGIN_AUTOLOAD", "AGENTGYM_TOKEN")}
TASK = 3


@pytest.fixture(scope="module")
def url():
    """`agentgym serve babyai`, as a user starts it (on a free port it binds itself: --port 0)."""
    server, base = start_server_process([AGENTGYM, "serve", "babyai", "--port", "0"], env=SERVER_ENV)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"{base}/health", timeout=5)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "the server did not answer in 60 s"
                time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)


def _expert_actions(task: int) -> tuple[str, list[str]]:
    """The first observation of ``task`` and the expert's actions, from a local BabyAI."""
    env = BabyAIEnv()
    try:
        first = env.reset(task).observation
        played = solve(env, task)
    finally:
        env.close()
    assert played.success, played
    return first, played.actions


def test_an_openenv_client_plays_a_babyai_episode_over_the_websocket(url):
    first, actions = _expert_actions(TASK)
    with GenericEnvClient(base_url=url).sync() as env:
        reset = env.reset(task_id=TASK, episode_id="ep-1")
        assert reset.observation["text"] == first and reset.observation["task_id"] == TASK
        assert reset.done is False and reset.reward is None
        for number, action in enumerate(actions, 1):
            result = env.step({"action": action})
            assert result.done is (number == len(actions)), (number, result)
        assert result.reward > 0 and result.observation["success"] is True
        state = env.state()
        assert state == {"episode_id": "ep-1", "step_count": len(actions), "task_id": TASK, "done": True}
        with pytest.raises(RuntimeError, match="has ended"):  # the server's error, as OpenEnv's client raises it
            env.step({"action": "go forward"})
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"command": "go forward"})
        again = env.reset(task_id=TASK)  # the same session, a new episode
        assert again.observation["text"] == first
    # Each connection is its own instance, closed with it.
    assert requests.get(f"{url}/v1/health", timeout=10).json()["live_instances"] == 0


class BabyAIAction(Action):
    """The action model an OpenEnv user writes from /schema (``openenv init``'s template)."""

    action: str


class BabyAIObservation(Observation):
    text: str
    task_id: int | None = None
    success: bool | None = None
    invalid_action: bool | None = None
    truncated: bool = False
    info: dict[str, Any] = Field(default_factory=dict)


class BabyAIClient(EnvClient[BabyAIAction, BabyAIObservation, State]):
    """A typed client as ``openenv init``'s template writes one."""

    def _step_payload(self, action: BabyAIAction) -> dict[str, Any]:
        return {"action": action.action}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[BabyAIObservation]:
        # Observation models forbid unknown fields: the server must send what its /schema says.
        observation = BabyAIObservation(**payload["observation"], done=payload["done"], reward=payload["reward"])
        return StepResult(observation=observation, reward=payload["reward"], done=payload["done"])

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)


def test_a_typed_client_as_openenv_writes_them(url):
    schema = requests.get(f"{url}/schema", timeout=10).json()
    assert set(schema["observation"]["properties"]) == set(BabyAIObservation.model_fields) - {"done", "reward",
                                                                                               "metadata"}
    first, actions = _expert_actions(TASK)
    with BabyAIClient(base_url=url).sync() as env:
        assert env.reset(task_id=TASK).observation.text == first
        for action in actions:
            result = env.step(BabyAIAction(action=action))
        assert result.done and result.observation.success and result.reward > 0
        assert env.state().step_count == len(actions)


def test_sessions_are_independent(url):
    with GenericEnvClient(base_url=url).sync() as one, GenericEnvClient(base_url=url).sync() as two:
        one.reset(task_id=TASK)
        two.reset(task_id=TASK + 1)
        one.step({"action": "turn left"})
        assert (one.state()["step_count"], two.state()["step_count"]) == (1, 0)
        assert two.state()["task_id"] == TASK + 1


def test_the_http_routes_answer_openenv_shapes(url):
    HealthResponse.model_validate(requests.get(f"{url}/health", timeout=10).json())
    schema = SchemaResponse.model_validate(requests.get(f"{url}/schema", timeout=10).json())
    assert schema.action["required"] == ["action"] and "text" in schema.observation["properties"]
    metadata = EnvironmentMetadata.model_validate(requests.get(f"{url}/metadata", timeout=10).json())
    assert metadata.name == "babyai"
    first, actions = _expert_actions(TASK)
    reset = ResetResponse.model_validate(requests.post(f"{url}/reset", json={"task_id": TASK}, timeout=10).json())
    assert reset.observation["text"] == first
    for action in actions:
        step = StepResponse.model_validate(
            requests.post(f"{url}/step", json={"action": {"action": action}}, timeout=10).json())
    assert step.done and step.reward > 0
    State.model_validate(requests.get(f"{url}/state", timeout=10).json())
    assert requests.get(f"{url}/state", timeout=10).json()["step_count"] == len(actions)
    # An empty /reset is OpenEnv's (a new episode on a task of the train split), not an error.
    assert requests.post(f"{url}/reset", timeout=10).json()["observation"]["task_id"] is not None
    bad = requests.post(f"{url}/step", json={"action": "go forward"}, timeout=10)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "malformed_request"


def test_a_reset_is_read_as_strictly_as_v1s(url):
    # Found by bench/attack.py: OpenEnv's reset took `true` as task 1 and seeds past what /v1 takes
    # (64 bits), and handed them to the environment; /v1 and AgentGym's routes refuse them.
    for body in ({"task_id": True}, {"task_id": 1.0}, {"seed": True}, {"seed": 2**64}, {"seed": "7"},
                 {"task_id": -1}, {"split": 7}):
        answer = requests.post(f"{url}/reset", json=body, timeout=10)
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "malformed_request", body
    assert requests.post(f"{url}/reset", json={"task_id": TASK, "seed": 2**63 - 1}, timeout=10).status_code == 200


def test_agentgym_routes_still_answer_on_the_shared_paths(url):
    instance = requests.post(f"{url}/create", timeout=10).json()["id"]
    reset = requests.post(f"{url}/reset", json={"id": instance, "data_idx": TASK}, timeout=10).json()
    assert set(reset) >= {"observation", "reward", "score", "done"} and isinstance(reset["observation"], str)
    step = requests.post(f"{url}/step", json={"id": instance, "action": "turn left"}, timeout=10).json()
    assert "error" not in step and isinstance(step["observation"], str)
    assert requests.post(f"{url}/close", json={"id": instance}, timeout=10).json() is not None


def test_openenv_sessions_need_the_token_and_take_it_in_the_base_url():
    token = "openenv-token-123"
    with serve_env(GuessEnv, token=token) as base:
        with pytest.raises(ConnectionError), GenericEnvClient(base_url=base).sync() as env:
            env.reset()
        with GenericEnvClient(base_url=f"{base}/token/{token}").sync() as env:
            assert "secret" in env.reset(task_id=5).observation["text"].lower()
            assert env.step({"action": "guess 50"}).observation["invalid_action"] is not True


def test_hostile_websocket_messages_get_openenv_errors_and_the_session_goes_on():
    from websockets.sync.client import connect

    hostile = ["", "{nope", "[]", "null", '"reset"', json.dumps({"type": None}), json.dumps({"type": "reset", "data": 5}),
               json.dumps({"type": "reset", "data": {"task_id": -7}}), json.dumps({"type": "reset", "data": {"seed": -1}}),
               json.dumps({"type": "reset", "data": {"task_id": 10**40}}), json.dumps({"type": "step", "data": None}),
               json.dumps({"type": "step", "data": {"action": "x" * 70_000}}), "[" * 5000 + "]" * 5000,
               json.dumps({"type": "step", "data": {"action": "\ud800"}}), json.dumps({"type": "state", "data": []})]
    with serve_env(GuessEnv, max_body_bytes=65536) as base:
        with connect(base.replace("http://", "ws://") + "/ws", proxy=None) as ws:
            for message in hostile:
                ws.send(message)
                answer = json.loads(ws.recv(timeout=10))
                assert answer["type"] in ("error", "state"), (message[:60], answer)
                if answer["type"] == "error":
                    assert answer["data"]["code"] in ("INVALID_JSON", "VALIDATION_ERROR", "UNKNOWN_TYPE",
                                                      "EXECUTION_ERROR"), answer
            ws.send(json.dumps({"type": "reset", "data": {"task_id": 5}}))  # and it still plays
            assert json.loads(ws.recv(timeout=10))["type"] == "observation"
        assert requests.get(f"{base}/v1/health", timeout=10).json()["live_instances"] == 0
