"""The AgentGym routes answer as AgentGym's own SciWorld server does, route by route.

No recording of AgentGym's SciWorld server exists, so the expected answers are written here from
its source, WooooDyy/AgentGym at 3ef9235, ``agentenv-sciworld/agentenv_sciworld/environment.py``
(class ``SciWorldEnv``; the routes in ``server.py`` return its methods' values unchanged), which
drives ``scienceworld.ScienceWorldEnv()`` with its defaults (``envStepLimit=100``). Its client,
``agentenv/agentenv/envs/sciworld.py`` (``SciworldEnvClient``), reads ``id`` from /create,
``task_description`` and ``observation`` from /reset, and ``observation``, ``score`` (as the reward)
and ``done`` from /step.

One server (and, as instances are used one at a time, one pooled JVM) serves the whole module.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest
import requests
from sciworld_helpers import requires_java

from agentgym_core.testing import serve_env
from agentgym_env_sciworld import SciWorldEnv, task

pytestmark = [pytest.mark.java, requires_java]

# environment.py, SciWorldEnv.reset: the payload dict, in this order.
RESET_FIELDS = {"task_name": str, "var_num": int, "task_description": str, "observation": str,
                "reward": int, "score": int, "deleted": bool, "done": bool}
# environment.py, SciWorldEnv.step: ScienceWorldEnv.step's observation, reward, info["score"], done.
STEP_FIELDS = {"observation": str, "reward": int, "score": int, "done": bool}
UNKNOWN_ACTION = "No known action matches that input."  # the engine's own answer, passed through


def agentgym_games() -> list[tuple[str, int]]:
    """AgentGym's ``self.games`` (SciWorldEnv.__init__): data_idx -> (task name, variation).

    It walks ``ScienceWorldEnv().tasks`` (``OrderedDict(ID2TASK)``, i.e. ``scienceworld.constants.TASKS``
    in file order), skips seven task ids and lists ``range(getMaxVariations(name))`` for the others.
    The variation counts are the engine's, frozen in the package data (test_sciworld_catalog.py
    checks them against the jar).
    """
    from scienceworld.constants import TASKS

    exceptions = {"5-1", "5-2", "9-1", "9-2", "9-3", "10-1", "10-2"}
    data = json.loads((resources.files("agentgym_env_sciworld") / "data" / "catalog.json").read_text())
    return [(t["task_name"], i) for t in TASKS if t["task_id"] not in exceptions
            for i in range(data["families"][t["task_name"]]["variations"])]


@pytest.fixture(scope="module")
def url():
    with serve_env(SciWorldEnv) as base:
        yield base


@pytest.fixture
def http():
    with requests.Session() as session:
        yield session


def _create(http: requests.Session, url: str) -> int:
    created = http.post(f"{url}/create", timeout=60).json()
    assert list(created) == ["id"] and type(created["id"]) is int  # SciWorldEnv.create: {"id": idx}
    return created["id"]


def _post(http: requests.Session, url: str, route: str, body: dict) -> object:
    answer = http.post(f"{url}/{route}", json=body, timeout=120)
    assert answer.status_code == 200
    return answer.json()


def _assert_shape(answer: object, fields: dict[str, type]) -> None:
    assert isinstance(answer, dict) and list(answer) == list(fields), answer
    assert {k: type(v) for k, v in answer.items()} == fields, answer


def test_data_idx_maps_to_agentgym_task_and_variation_for_every_index():
    games = agentgym_games()
    ours = [(t.family.name, t.variation) for t in map(task, range(len(games)))]
    assert ours == games
    with pytest.raises(Exception, match="task ids run from 0"):
        task(len(games))  # AgentGym: IndexError, answered as {"error": ...}


def test_reset_loads_agentgym_task_and_answers_its_fields(url, http):
    games = agentgym_games()
    # first index, a family boundary, the first index past the skipped 5-x families, the last index
    boundary = next(i for i in range(1, len(games)) if games[i][0] != games[i - 1][0])
    after_skip = next(i for i, (name, _) in enumerate(games) if name == "chemistry-mix")
    env_id = _create(http, url)
    try:
        for data_idx in (0, boundary - 1, boundary, after_skip, len(games) - 1):
            reset = _post(http, url, "reset", {"id": env_id, "data_idx": data_idx})
            _assert_shape(reset, RESET_FIELDS)
            assert (reset["task_name"], reset["var_num"]) == games[data_idx]
            assert reset["task_description"].startswith("Your task is to")
            # 'observation' is the answer to a 'look around' step: the room alone, no trailing newline
            assert reset["observation"].startswith(("This room is called the ", "This outside location is called"))
            assert not reset["observation"].endswith("\n") and "Your task" not in reset["observation"]
            assert (reset["reward"], reset["score"], reset["deleted"], reset["done"]) == (0, 0, False, False)
        out_of_range = _post(http, url, "reset", {"id": env_id, "data_idx": len(games)})
        assert list(out_of_range) == ["error"]
    finally:
        _post(http, url, "close", {"id": env_id})


def test_step_observation_and_close_answer_as_agentgym(url, http):
    env_id = _create(http, url)
    reset = _post(http, url, "reset", {"id": env_id, "data_idx": 0})  # boil, variation 0, in the hallway
    # get_observation: info["observation"], which reset set to the 'look around' answer
    assert _observation(http, url, env_id) == reset["observation"]

    step = _post(http, url, "step", {"id": env_id, "action": "open door to kitchen"})
    assert step == {"observation": "The door is now open.", "reward": 0, "score": 0, "done": False}
    _assert_shape(step, STEP_FIELDS)
    assert _observation(http, url, env_id) == "The door is now open."

    # an unknown action: the engine's text as it is, no reward
    assert _post(http, url, "step", {"id": env_id, "action": "jump around"}) == {
        "observation": UNKNOWN_ACTION, "reward": 0, "score": 0, "done": False}

    # focusing on the wrong thing fails the task: the engine's score and reward are -100, and done
    failed = _post(http, url, "step", {"id": env_id, "action": "focus on door to kitchen"})
    assert failed == {"observation": "You focus on the door between kitchen and hallway.",
                      "reward": -100, "score": -100, "done": True}
    _assert_shape(failed, STEP_FIELDS)
    # _check_id: a finished episode answers {"error": ...} until it is reset
    assert list(_post(http, url, "step", {"id": env_id, "action": "look around"})) == ["error"]

    assert _post(http, url, "close", {"id": env_id}) is True  # close: a bare true
    assert list(_post(http, url, "step", {"id": env_id, "action": "look around"})) == ["error"]


def test_episode_ends_when_engine_moves_pass_100(url, http):
    # ScienceWorldEnv.step sets done once getNumMoves() > envStepLimit (100); a 'wait' is 11 moves
    # (ten iterations and the action itself), so the 10th 'wait' ends the episode, not the 100th action.
    env_id = _create(http, url)
    try:
        _post(http, url, "reset", {"id": env_id, "data_idx": 0})
        done = [_post(http, url, "step", {"id": env_id, "action": "wait"})["done"] for _ in range(10)]
        assert done == [False] * 9 + [True]
    finally:
        _post(http, url, "close", {"id": env_id})


def _observation(http: requests.Session, url: str, env_id: int) -> object:
    answer = http.get(f"{url}/observation", params={"id": env_id}, timeout=60)
    assert answer.status_code == 200
    return answer.json()
