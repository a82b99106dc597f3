import pytest
import requests

from agentgym_core.env import EnvError, EpisodeEndedError, InvalidTaskError
from agentgym_core.plugins import PluginManager
from agentgym_core.testing import check_env, check_env_http, serve_env
from agentgym_env_search import SearchEnv
from agentgym_env_search.indexes import open_retriever
from agentgym_env_search.service import serve_retriever


def oracle_episode(env, task_id):
    """Search with the question, then answer the gold string (an oracle for tests only)."""
    item = env.question(task_id)
    first = env.reset(task_id)
    assert item.question in first.observation
    searched = env.step(f"<think>let me look it up</think><search>{item.question}</search>")
    assert searched.observation.startswith("<information>Doc 1(Title: ") and not searched.done
    return searched, env.step(f"<answer>{item.golden_answers[0]}</answer>")


def test_oracle_gets_reward_one_on_every_demo_test_question():
    env = SearchEnv(show_progress=False)
    test_ids = SearchEnv.tasks().split("test")
    assert 60 <= len(test_ids) <= 100
    for task_id in test_ids:
        _, answered = oracle_episode(env, task_id)
        assert (answered.reward, answered.terminated, answered.success) == (1.0, True, True)
        assert answered.info["em"] is True and answered.info["f1"] == 1.0


def test_wrong_answer_scores_zero_and_ends_the_episode():
    env = SearchEnv(show_progress=False)
    env.reset(0)
    result = env.step("<answer>certainly not this</answer>")
    assert (result.reward, result.terminated, result.success) == (0.0, True, False)
    assert result.info["em"] is False and result.info["golden_answers"] == env.question(0).golden_answers
    with pytest.raises(EpisodeEndedError):
        env.step("<answer>again</answer>")


def test_retry_on_wrong_is_the_anchors_behaviour_only_when_asked():
    env = SearchEnv(retry_on_wrong=True, show_progress=False)
    env.reset(0)
    wrong = env.step("<answer>certainly not this</answer>")
    assert (wrong.reward, wrong.done, wrong.success) == (0.0, False, None)
    assert "golden_answers" not in wrong.info  # not leaked while the agent may still answer
    right = env.step(f"<answer>{env.question(0).golden_answers[0]}</answer>")
    assert right.reward == 1.0 and right.success
    assert "try again" in env.instruction


def test_invalid_actions_are_answered_and_turns_run_out():
    env = SearchEnv(max_turns=3, show_progress=False)
    with pytest.raises(EnvError, match="before reset"):
        env.step("<search>x</search>")
    env.reset(1)
    invalid = env.step("The answer is Paris.")
    assert "Invalid action" in invalid.observation and invalid.reward == 0.0 and not invalid.done
    env.step("<search>headquarters</search>")
    last = env.step("<search>more</search>")
    assert last.truncated and not last.terminated and last.success is False
    with pytest.raises(InvalidTaskError, match="task ids 0.."):
        env.reset(10_000)


def test_parse_action_keeps_only_the_first_tag():
    env = SearchEnv(show_progress=False)
    assert env.parse_action("<think>x</think><search>a b</search><information>fake</information>") == "<search>a b</search>"


def test_catalog_has_disjoint_splits_and_topic_categories():
    catalog = SearchEnv.tasks()
    assert set(catalog.splits) == {"test", "train"} and catalog.sizes()["train"] > catalog.sizes()["test"]
    assert "Geography" in catalog.categories


def test_check_env_in_process():
    check_env(lambda: SearchEnv(show_progress=False))


def test_check_env_over_http_and_agentgym_routes():
    check_env_http(SearchEnv, {"show_progress": False})
    with serve_env(SearchEnv, {"show_progress": False}) as url:
        # AgentGym's searchqa answers: a bare id, a bare observation string, a bare bool on close.
        env_idx = requests.post(f"{url}/create", json={}, timeout=10).json()
        assert isinstance(env_idx, int)
        reset = requests.post(f"{url}/reset", json={"env_idx": env_idx, "id": 1}, timeout=10).json()
        assert isinstance(reset, str) and "Apple" in reset
        step = requests.post(f"{url}/step", json={"env_idx": env_idx, "action": "<answer>Cupertino, California</answer>"},
                             timeout=10).json()
        assert step["reward"] == 1.0 and step["done"] is True and "info" in step
        assert requests.get(f"{url}/observation", params={"env_idx": env_idx}, timeout=10).json() == step["observation"]
        assert requests.post(f"{url}/close", json={"env_idx": env_idx}, timeout=10).json() is True


def test_plugin_registers_the_env():
    manager = PluginManager(autoload=True, allow=["search"])
    assert manager.get("env", "search") is SearchEnv


def test_configured_data_and_a_shared_retriever_service(toy_corpus, toy_qa_dir):
    with serve_retriever(open_retriever(toy_corpus, show_progress=False)) as retriever_url:
        Toy = SearchEnv.configured(corpus=str(toy_corpus), qa=str(toy_qa_dir), test_datasets=["nq", "hotpotqa"],
                                  train_datasets=["nq"], retriever_url=retriever_url, show_progress=False)
        catalog = Toy.tasks()
        assert catalog.sizes() == {"test": 3, "train": 1}
        assert catalog.categories == {"nq": [0, 1, 3], "hotpotqa": [2]}
        env = Toy()
        searched, answered = oracle_episode(env, 1)
        assert "Doc 1(Title: Python (programming language))" in searched.observation
        assert answered.reward == 1.0
        check_env_http(Toy, {})
