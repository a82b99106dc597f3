"""The AgentGym routes answer as AgentGym's own BabyAI server, index for index.

``fixtures/agentgym_anchor_babyai.json.gz`` holds what AgentGym's server (WooooDyy/AgentGym at
3ef9235, ``agentenv-babyai`` unmodified) answered for ``data_idx`` 0-199: ``/reset``, then the
script ``turn left, move forward, turn right, move forward, toggle`` through ``/step`` (stopped
early on ``done``). Every answer here must be the recorded one, field for field.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import requests

from agentgym_core.http.client import HTTPEnv
from agentgym_core.testing import serve_env
from agentgym_env_babyai import BabyAIEnv
from agentgym_env_babyai.personality import AgentGymBabyAIEnv

ANCHOR = Path(__file__).parent / "fixtures" / "agentgym_anchor_babyai.json.gz"


@pytest.fixture(scope="module")
def anchor() -> list[dict]:
    with gzip.open(ANCHOR, "rt", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def server():
    with serve_env(BabyAIEnv) as url:
        yield url


def _replay(http: requests.Session, url: str, record: dict) -> tuple[dict, list[dict]]:
    instance = http.post(f"{url}/create", json={}).json()["id"]
    reset = http.post(f"{url}/reset", json={"id": instance, "data_idx": record["data_idx"]}).json()
    answers = [http.post(f"{url}/step", json={"id": instance, "action": s["action"]}).json()
               for s in record["steps"]]
    assert http.post(f"{url}/close", json={"id": instance}).json() is True
    return reset, answers


def test_every_recorded_index_answers_as_agentgym(server, anchor):
    assert [r["data_idx"] for r in anchor] == list(range(200))
    reset_diffs, step_diffs, steps = [], [], 0
    with requests.Session() as http:
        for record in anchor:
            reset, answers = _replay(http, server, record)
            # Same fields in the same order (observation, reward, score, deleted, done), same values.
            if list(reset.items()) != list(record["reset"].items()):
                reset_diffs.append(record["data_idx"])
            for k, (ours, step) in enumerate(zip(answers, record["steps"], strict=True)):
                steps += 1
                if list(ours.items()) != list(step["answer"].items()):
                    step_diffs.append((record["data_idx"], k, ours, step["answer"]))
    assert reset_diffs == [], f"{len(reset_diffs)} of 200 first observations differ: {reset_diffs}"
    assert step_diffs == [], f"{len(step_diffs)} of {steps} step answers differ, first: {step_diffs[0]}"
    assert steps == 998  # 199 scripts of 5 steps, one that ended after 3


def test_observation_route_answers_agentgym_status(server, anchor):
    record = anchor[87]  # its script succeeds on the 5th step (reward 0.973)
    with requests.Session() as http:
        instance = http.post(f"{server}/create", json={}).json()["id"]
        http.post(f"{server}/reset", json={"id": instance, "data_idx": 87}).raise_for_status()
        status = http.get(f"{server}/observation", params={"id": instance}).json()
        assert status == record["reset"]
        for step in record["steps"]:
            last = http.post(f"{server}/step", json={"id": instance, "action": step["action"]}).json()
        status = http.get(f"{server}/observation", params={"id": instance}).json()
        goal_line = record["reset"]["observation"].split("\n")[0]
        assert status == {"observation": f"{goal_line}\n{last['observation']}", "reward": last["reward"],
                          "score": last["score"], "done": True, "deleted": False}
        # As AgentGym: a finished episode answers an error (HTTP 200) until it is reset.
        after = http.post(f"{server}/step", json={"id": instance, "action": "turn left"})
        assert after.status_code == 200 and "error" in after.json()
        fresh = http.post(f"{server}/create", json={}).json()["id"]
        unreset = http.get(f"{server}/observation", params={"id": fresh}).json()
        assert "no episode yet" in unreset["error"]


def test_native_routes_keep_the_native_text(server, anchor):
    """The compat text is AgentGym's; /v1 keeps this package's own (numbering, goal wording)."""
    env = HTTPEnv(server, env="babyai")
    try:
        native = {t: env.reset(t).observation for t in (0, 36)}
    finally:
        env.close()
    recorded = {t: anchor[t]["reset"]["observation"] for t in (0, 36)}
    assert "open a purple door after you pick up a key" in native[36].split("\n")[0]
    assert "open a purple door and pick up a key" in recorded[36].split("\n")[0]
    # Task 0: the same room, numbered nearest-first natively and in AgentGym's scan order there.
    assert native[0] != recorded[0] and native[0].split("\n")[0] == recorded[0].split("\n")[0]


def test_macro_reports_the_last_primitive_as_agentgym_does():
    """OpenRedDoor: 'toggle and go through' succeeds at the toggle; AgentGym still walks through
    and answers the walk's reward and done (0, False). Native play ends at the success."""
    agentgym, native = AgentGymBabyAIEnv(), BabyAIEnv()
    action = "toggle and go through red closed door 1"
    task = next(t for t in range(12, 2000, 40) if action in (agentgym.reset(t).observation or ""))
    compat_step = agentgym.step(action)
    assert (compat_step.reward, compat_step.terminated) == (0.0, False)
    assert "The task is completed." not in compat_step.observation
    native.reset(task)
    native_step = native.step(action)
    assert native_step.success is True and native_step.reward > 0


def test_goal_wording_matches_agentgym():
    env = AgentGymBabyAIEnv()
    assert env.reset(36).observation.split("\n")[0] == (
        "Your goal: put the red box next to a grey door and open a purple door and pick up a key and go to "
        "the yellow box")
