"""Task catalog, start URLs and grading with webarena-verified (no browser needed)."""

from __future__ import annotations

import collections

import pytest

from agentgym_core import InvalidTaskError
from agentgym_env_webarena import LocalWebArenaEnv, WebArenaConfig, WebArenaEnv
from agentgym_env_webarena.grading import agent_response, grade
from agentgym_env_webarena.tasks import (
    LOCAL_TASKS_FILE,
    TEST_IDS_ENV_VAR,
    VERIFIED_TASKS_FILE,
    TaskSet,
    render_start_urls,
)


def test_verified_catalog_has_812_tasks_a_50_task_test_split_and_site_categories():
    catalog = WebArenaEnv.tasks()
    assert catalog.sizes() == {"train": 762, "test": 50}
    assert sum(len(ids) for ids in catalog.categories.values()) == 812
    assert {"shopping", "shopping_admin", "reddit", "gitlab", "map", "gitlab-reddit"} <= set(catalog.categories)
    by_site = collections.Counter(catalog.category_index()[t] for t in catalog.split("test"))
    # Stratified: the five big sites each get 7-12 of the 50 tasks.
    assert all(7 <= by_site[site] <= 12 for site in ("shopping", "shopping_admin", "gitlab", "map", "reddit"))
    assert WebArenaEnv.tasks() == catalog  # fixed, not re-drawn


def test_test_split_can_be_set_to_the_anchor_list(monkeypatch):
    monkeypatch.setenv(TEST_IDS_ENV_VAR, "3, 7,44")
    catalog = TaskSet(VERIFIED_TASKS_FILE).catalog()
    assert catalog.split("test") == [3, 7, 44]
    assert len(catalog.split("train")) == 809
    monkeypatch.setenv(TEST_IDS_ENV_VAR, "99999")
    with pytest.raises(InvalidTaskError, match="99999"):
        TaskSet(VERIFIED_TASKS_FILE).catalog()


def test_start_urls_come_from_the_site_environment_variables(monkeypatch):
    taskset = TaskSet.load(VERIFIED_TASKS_FILE)
    task = taskset.get(44)  # gitlab
    monkeypatch.setenv("GITLAB", "http://gitlab.internal:8023/")
    assert render_start_urls(task, WebArenaConfig().resolved_sites()) == ["http://gitlab.internal:8023"]
    assert render_start_urls(task, WebArenaConfig(sites={"gitlab": "http://other:1"}).resolved_sites()) == ["http://other:1"]
    monkeypatch.delenv("GITLAB")
    with pytest.raises(InvalidTaskError, match="GITLAB environment variable"):
        render_start_urls(task, WebArenaConfig().resolved_sites())


def test_unknown_task_id_is_an_invalid_task():
    with pytest.raises(InvalidTaskError, match="no task 812"):
        TaskSet.load(VERIFIED_TASKS_FILE).get(812)


def _nav_entry(url: str) -> dict:
    return {
        "request": {"method": "GET", "url": url, "headers": [{"name": "Accept", "value": "text/html,*/*"}]},
        "response": {"status": 200, "headers": [], "redirectURL": "", "cookies": []},
    }


def test_legacy_answers_are_graded_by_the_verified_evaluators():
    tasks = TaskSet.load(LOCAL_TASKS_FILE)
    sites = {"shopping": "http://127.0.0.1:9", "reddit": "http://127.0.0.1:10"}
    price = tasks.get(0)
    assert grade(price, agent_response(price, "$118.99", "legacy"), [], sites)["score"] == 1.0
    assert grade(price, agent_response(price, "118.99", "legacy"), [], sites)["score"] == 1.0
    assert grade(price, agent_response(price, "$47.49", "legacy"), [], sites)["score"] == 0.0
    assert grade(price, agent_response(price, "N/A", "legacy"), [], sites)["score"] == 0.0
    # json mode: a plain answer is not the verified format, so it scores 0; the JSON object passes.
    assert grade(price, agent_response(price, "$118.99", "json"), [], sites)["score"] == 0.0
    good = '{"task_type": "RETRIEVE", "status": "SUCCESS", "retrieved_data": [118.99]}'
    assert grade(price, agent_response(price, good, "json"), [], sites)["score"] == 1.0


def test_navigation_is_graded_by_the_last_page_visited():
    tasks = TaskSet.load(LOCAL_TASKS_FILE)
    sites = {"shopping": "http://127.0.0.1:9", "reddit": "http://127.0.0.1:10"}
    nav = tasks.get(2)
    response = agent_response(nav, "", "legacy")
    assert grade(nav, response, [_nav_entry("http://127.0.0.1:10/f/gardening")], sites)["score"] == 1.0
    assert grade(nav, response, [_nav_entry("http://127.0.0.1:10/f/books")], sites)["score"] == 0.0
    assert grade(nav, response, [], sites)["score"] == 0.0


def test_local_catalog_splits_and_categories():
    catalog = LocalWebArenaEnv.tasks()
    assert catalog.split("test") == [0, 1, 2]
    assert set(catalog.categories) == {"shopping", "reddit"}


def test_the_plugin_registers_both_environments_through_its_entry_point():
    from agentgym_core.plugins import PluginManager

    manager = PluginManager(autoload=True, allow=["webarena"])
    assert manager.get("env", "webarena") is WebArenaEnv
    assert manager.get("env", "webarena_local") is LocalWebArenaEnv


def test_categories_from_the_raw_file_match_webarena_verified_sites_str():
    # Categories are read from the JSON without webarena-verified's model (so listing envs stays light);
    # they must name every task as the model's own sites_str does.
    taskset = TaskSet(VERIFIED_TASKS_FILE)
    by_model: dict[str, list[int]] = {}
    for task_id in sorted(taskset.tasks):
        by_model.setdefault(taskset.get(task_id).sites_str, []).append(task_id)
    assert taskset.categories() == by_model
