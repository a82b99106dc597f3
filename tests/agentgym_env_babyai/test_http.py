"""BabyAI over HTTP: conformance, the expert through the client, AgentGym's legacy routes."""

from __future__ import annotations

import pytest
import requests

from agentgym_core.http.client import HTTPEnv
from agentgym_core.plugins import PluginManager
from agentgym_core.testing import check_env, check_env_http, serve_env
from agentgym_env_babyai import TEST_IDS, BabyAIEnv, solve


def test_plugin_registers_the_env():
    assert PluginManager(autoload=True, allow=["babyai"]).get("env", "babyai") is BabyAIEnv


def test_check_env_in_process():
    report = check_env(BabyAIEnv, [1, 12, 18])
    assert [episode.task_id for episode in report.episodes] == [1, 12, 18]
    # the checker's policy sends an invalid action at step 1; it must be answered, not raised
    assert all(episode.steps[1][1].startswith("Invalid action") for episode in report.episodes)


def test_check_env_http():
    check_env_http(BabyAIEnv, task_ids=[1, 11])


@pytest.fixture(scope="module")
def server():
    with serve_env(BabyAIEnv) as url:
        yield url


def test_expert_through_the_http_client_on_a_sample(server):
    # Two tasks of every fourth level: quick, and it crosses doors, keys and sequences.
    sample = [t for t in TEST_IDS if (t % 40) % 4 == 0][:20]
    env = HTTPEnv(server, env="babyai")
    try:
        results = [solve(env, task) for task in sample]
    finally:
        env.close()
    assert sum(r.success for r in results) >= 19, [(r.task_id, r.error) for r in results if not r.success]


@pytest.mark.slow
def test_expert_solves_95_percent_of_the_test_split_through_http(server):
    env = HTTPEnv(server, env="babyai")
    try:
        results = [solve(env, task) for task in TEST_IDS]
    finally:
        env.close()
    assert sum(r.success for r in results) / len(TEST_IDS) >= 0.95


def test_agentgym_legacy_routes(server):
    with requests.Session() as http:
        created = http.post(f"{server}/create").json()
        instance = created["id"]
        reset = http.post(f"{server}/reset", json={"id": instance, "data_idx": 1}).json()
        assert reset["observation"].startswith("Your goal: go to the red ball\n")
        assert reset["done"] is False and reset["reward"] == 0
        assert list(reset) == ["observation", "reward", "score", "deleted", "done"]  # AgentGym's fields
        status = http.get(f"{server}/observation", params={"id": instance}).json()
        assert status["observation"] == reset["observation"] and status["done"] is False
        stepped = http.post(f"{server}/step", json={"id": instance, "action": "go to red ball 1"}).json()
        assert list(stepped) == ["observation", "reward", "score", "done"]
        assert stepped["done"] is True and 0 < stepped["reward"] <= 1
        assert "\n The task is completed.\nAvailable actions: [" in stepped["observation"]
        again = http.post(f"{server}/step", json={"id": instance, "action": "turn left"})
        assert again.status_code == 200 and "error" in again.json()  # AgentGym answers errors with 200
        assert http.post(f"{server}/close", json={"id": instance}).json() is True
