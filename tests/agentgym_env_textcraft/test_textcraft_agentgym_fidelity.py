"""The AgentGym routes answer as AgentGym's own TextCraft server, index for index.

``fixtures/agentgym_anchor_textcraft.json.gz`` holds what AgentGym's server (WooooDyy/AgentGym at
3ef9235, ``agentenv-textcraft`` unmodified) answered for ``data_idx`` 0-199: ``/reset``, then the
script ``inventory, get 1 oak logs, craft 4 oak planks using 1 oak logs, inventory``.

The goal, the recipe tree's commands, the number of commands and every step answer must match for
every index. The order of the command list (and, past 10 candidates, which distractors are drawn)
cannot: AgentGym draws from and shuffles Python ``set`` objects of strings, whose order follows the
per-process string hash seed, so AgentGym's own server lists them differently after each restart
(run against these records with three other hash seeds it reproduces 65-69 of the 200 lists
exactly and 137-138 as sets). Those two counts are pinned as floors at what this package measured.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import requests

from agentgym_core.testing import serve_env
from agentgym_env_textcraft import TextCraftEnv
from agentgym_env_textcraft.agentgym_style import agentgym_recipes
from agentgym_env_textcraft.personality import AgentGymTextCraftEnv
from agentgym_env_textcraft.tasks import goals

ANCHOR = Path(__file__).parent / "fixtures" / "agentgym_anchor_textcraft.json.gz"
EXACT_LISTS_FLOOR = 62  # measured: 62 of 200 first observations identical, character for character
SAME_SET_FLOOR = 137  # measured: 137 of 200 list the same commands in another order


@pytest.fixture(scope="module")
def anchor() -> list[dict]:
    with gzip.open(ANCHOR, "rt", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def server():
    with serve_env(TextCraftEnv) as url:
        yield url


def _commands(observation: str) -> tuple[list[str], str]:
    listing, goal = observation.split("\n\nGoal: ")
    header, *commands = listing.split("\n")
    assert header == "Crafting commands:"
    return commands, goal


def test_every_recorded_index_names_the_recorded_task(server, anchor):
    assert [r["data_idx"] for r in anchor] == list(range(200))
    table = agentgym_recipes()
    exact = same_set = 0
    mismatches, step_diffs = [], []
    with requests.Session() as http:
        for record in anchor:
            created = http.post(f"{server}/create", json={}).json()
            instance = created["id"]
            reset = http.post(f"{server}/reset", json={"id": instance, "data_idx": record["data_idx"]}).json()
            recorded = record["reset"]
            assert list(reset) == list(recorded) == ["id", "observation", "done", "reward"]
            assert reset["id"] == instance and (reset["done"], reset["reward"]) == (recorded["done"], recorded["reward"])
            ours, goal = _commands(reset["observation"])
            theirs, recorded_goal = _commands(recorded["observation"])
            item = table.goals[record["data_idx"]]
            needed, candidates = table.needed_commands(item), table.distractor_candidates(item)
            if not (goal == recorded_goal and len(ours) == len(theirs) and needed <= set(theirs)
                    and set(theirs) <= needed | candidates and needed <= set(ours)):
                mismatches.append(record["data_idx"])
            exact += reset["observation"] == recorded["observation"]
            same_set += sorted(ours) == sorted(theirs)
            for step in record["steps"]:
                answer = http.post(f"{server}/step", json={"id": instance, "action": step["action"]}).json()
                if list(answer.items()) != list(step["answer"].items()):
                    step_diffs.append((record["data_idx"], step["action"], answer, step["answer"]))
            assert http.post(f"{server}/close", json={"id": instance}).json() is True
    assert mismatches == [], f"goal or recipe tree differs for data_idx {mismatches}"
    assert step_diffs == [], f"{len(step_diffs)} step answers differ, first: {step_diffs[0]}"
    assert exact >= EXACT_LISTS_FLOOR and same_set >= SAME_SET_FLOOR, (exact, same_set)


def test_create_resets_onto_agentgyms_task_of_its_serial():
    """AgentGym's /create resets onto data_idx = how many it created before: 0, then 1 (emerald block)."""
    with serve_env(TextCraftEnv) as url, requests.Session() as http:
        first, second = (http.post(f"{url}/create", json={}).json() for _ in range(2))
    assert first["observation"].endswith("Goal: craft light blue dye.")
    assert second["observation"] == "Crafting commands:\ncraft 1 emerald block using 9 emerald\n\nGoal: craft emerald block."


def test_agentgym_keeps_answering_after_the_goal_is_crafted(server):
    with requests.Session() as http:
        instance = http.post(f"{server}/create", json={}).json()["id"]
        http.post(f"{server}/reset", json={"id": instance, "data_idx": 1}).raise_for_status()
        steps = ["get 9 emerald", "craft 1 emerald block using 9 emerald", "inventory", "get 1 stick"]
        answers = [http.post(f"{server}/step", json={"id": instance, "action": a}).json() for a in steps]
    assert answers == [
        {"observation": "Got 9 emerald", "reward": 0.0, "done": False},
        {"observation": "Crafted 1 minecraft:emerald_block", "reward": 1.0, "done": True},
        {"observation": "Inventory: [emerald block] (1) ", "reward": 0.0, "done": False},
        {"observation": "Could not find stick", "reward": 0.0, "done": False},
    ]


def test_agentgym_failure_wording():
    env = AgentGymTextCraftEnv()
    env.reset(1)
    assert env.step("craft 1 emerald block using 9 emerald").observation == (
        "Could not find enough items to craft minecraft:emerald_block")
    assert env.step("craft 1 emerald block using nine emerald").observation == "Wrong item format: nine emerald"
    assert env.step("dance").observation == "Could not execute dance"
    env.step("get 9 emerald")
    assert env.step("craft 1 stick using 9 emerald").observation == (
        "Could not find a valid recipe for "
        "ItemTagWithCount(item_tag=ItemTag(tag=None, item_id='minecraft:stick'), count=1)")


def test_native_routes_keep_the_native_task_order():
    """Native task ids stay sorted by depth then name (the same on every machine)."""
    native = TextCraftEnv().reset(1).observation
    assert not native.endswith("Goal: craft emerald block.")
    assert len(agentgym_recipes().goals) == len(goals()) == 544
    assert next(g.task_id for g in goals() if g.item == "emerald block") == 39
