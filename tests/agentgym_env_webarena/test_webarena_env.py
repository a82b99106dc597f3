"""The environment in-process, in a real Chromium, on the bundled local sites."""

from __future__ import annotations

import base64

import pytest
from webarena_helpers import element_id, solve_navigation_task, solve_shop_price_task

from agentgym_core import EpisodeEndedError
from agentgym_core.testing import check_env

pytestmark = pytest.mark.browser


def _scripted_check_policy(env, step, observation):
    # A mix of real actions, an invalid one and a bad id, ending in an answer.
    return ["```scroll [down]```", "jump around", "```click [9999]```", "```scroll [up]```", "```stop [N/A]```"][step]


def test_check_env_in_process(local_env):
    report = check_env(lambda: local_env(), task_ids=[0, 2], policy=_scripted_check_policy)
    assert [len(e.steps) for e in report.episodes] == [5, 5]


def test_scripted_agent_answers_the_shop_price_task(local_env):
    env = local_env()
    result = solve_shop_price_task(env)
    assert (result.reward, result.success, result.terminated) == (1.0, True, True)
    assert result.info["grade"]["status"] == "success"
    with pytest.raises(EpisodeEndedError):
        env.step("```stop [x]```")


def test_wrong_answer_scores_zero(local_env):
    result = solve_shop_price_task(local_env(), answer="$47.49")
    assert (result.reward, result.success, result.terminated) == (0.0, False, True)


def test_navigation_task_is_graded_by_url(local_env):
    env = local_env()
    assert solve_navigation_task(env).reward == 1.0
    # Same task, wrong forum: the last page visited decides.
    assert solve_navigation_task(env, forum="books").reward == 0.0


def test_invalid_actions_are_answered_and_cost_a_step(local_env):
    env = local_env(max_steps=3)
    env.reset(0)
    first = env.step("I think I should click somewhere")
    assert first.info["invalid_action"] and "unknown action" in first.observation and not first.done
    assert "OBJECTIVE: What is the price of the Olive Desk Lamp?" in first.observation
    missing = env.step("```click [9999]```")
    assert "no element [9999]" in missing.observation and "failed" in missing.observation
    last = env.step("```scroll [down]```")
    assert last.truncated and last.success is False and last.reward == 0.0


def test_cookies_do_not_survive_a_reset(local_env):
    env = local_env()
    obs = env.reset(4).observation  # "Add 2 Copper Kettle to my cart"
    obs = env.step(f"```click [{element_id(obs, 'link', 'Copper Kettle')}]```").observation
    obs = env.step(f"```type [{element_id(obs, 'spinbutton', 'Qty')}] [2] [0]```").observation
    obs = env.step(f"```click [{element_id(obs, 'button', 'Add to Cart')}]```").observation
    assert "Copper Kettle × 2" in obs, obs
    assert env.step("```stop []```").reward == 1.0  # graded from the POST in the network trace
    obs = env.reset(4).observation
    obs = env.step(f"```click [{element_id(obs, 'link', 'My Cart')}]```").observation
    assert "no items in your shopping cart" in obs


def test_viewport_only_tree_changes_when_scrolling(local_env):
    env = local_env()
    top = env.reset(0).observation
    assert "'Aurora Desk Lamp'" in top and "'Willow Wall Clock'" not in top
    bottom = env.step("```scroll [down]```").observation
    for _ in range(5):
        bottom = env.step("```scroll [down]```").observation
    assert "'Willow Wall Clock'" in bottom and "'Aurora Desk Lamp'" not in bottom
    whole = local_env(current_viewport_only=False).reset(0).observation
    assert "'Aurora Desk Lamp'" in whole and "'Willow Wall Clock'" in whole


def test_tabs_history_and_goto(local_env):
    env = local_env(max_tabs=2)
    start = env.reset(2)
    forum = start.info["url"].rstrip("/")
    assert env.step("```new_tab```").info["url"] == "about:blank"
    assert "cannot open more than 2 tabs" in env.step("```new_tab```").observation
    obs = env.step(f"```goto [{forum}/f/books]```")
    assert obs.info["url"].endswith("/f/books") and "Tab 1 (current): /f/books" in obs.observation
    back = env.step("```tab_focus [0]```")
    assert back.info["url"].rstrip("/") == forum and "Tab 0 (current)" in back.observation
    assert "there is no tab 5" in env.step("```tab_focus [5]```").observation
    assert env.step("```close_tab```").info["url"].endswith("/f/books")
    home = env.step(f"```click [{element_id(env.step('```scroll [up]```').observation, 'link', 'Postmill')}]```")
    assert home.info["url"].rstrip("/") == forum
    assert env.step("```go_back```").info["url"].endswith("/f/books")
    assert env.step("```go_forward```").info["url"].rstrip("/") == forum
    assert "no page to go forward" in env.step("```go_forward```").observation


def test_press_hover_and_screenshots(local_env, tmp_path):
    env = local_env(screenshot="base64")
    obs = env.reset(0)
    assert base64.b64decode(obs.info["screenshot"])[:2] == b"\xff\xd8"  # a JPEG
    box = element_id(obs.observation, "searchbox", "Search products")
    env.step(f"```type [{box}] [kettle] [0]```")
    obs = env.step("```press [Enter]```")
    assert "10 results for 'kettle'" in obs.observation
    assert "error" not in env.step(f"```hover [{element_id(obs.observation, 'link', 'Copper Kettle')}]```").info
    files = local_env(screenshot="file", screenshot_dir=tmp_path).reset(1)
    assert files.info["screenshot"].startswith(str(tmp_path))
