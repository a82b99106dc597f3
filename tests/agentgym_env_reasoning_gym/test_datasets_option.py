"""reasoning-gym by any dataset, with its own configuration, size and seed (``datasets=[...]``)."""

from __future__ import annotations

import pytest

pytest.importorskip("reasoning_gym")

from agentgym_core.testing import check_env_http  # noqa: E402
from agentgym_env_reasoning_gym import ReasoningGymEnv  # noqa: E402
from agentgym_env_reasoning_gym.env import CUSTOM_STRIDE, entry, gold_answer, parse_datasets  # noqa: E402

SIX_TERMS = {"name": "chain_sum", "config": {"min_terms": 6, "max_terms": 6}, "size": 30, "seed": 1, "test_size": 5}
# sokoban is left out of the built-in levels (minutes per item at its defaults); named here with a small size
SOKOBAN = {"name": "sokoban", "size": 3, "test_size": 1, "label": "boxes"}


def test_the_catalog_is_the_entries_sizes_with_the_last_items_as_test():
    env_cls = ReasoningGymEnv.configured(datasets=[SIX_TERMS, SOKOBAN])
    catalog = env_cls.tasks()
    assert catalog.sizes() == {"train": 25 + 2, "test": 5 + 1}
    assert catalog.split("test")[:5] == list(range(25, 30)) and catalog.split("test")[5] == CUSTOM_STRIDE + 2
    assert sorted(catalog.categories) == ["boxes", "chain_sum"]


def test_the_configuration_and_seed_reach_the_generator():
    six = parse_datasets([SIX_TERMS])
    assert all(entry(k, six)["metadata"]["num_terms"] == 6 for k in range(5))
    again = parse_datasets([dict(SIX_TERMS)])
    other_seed = parse_datasets([{**SIX_TERMS, "seed": 2}])
    assert [entry(k, again)["question"] for k in range(5)] == [entry(k, six)["question"] for k in range(5)]
    assert [entry(k, other_seed)["question"] for k in range(5)] != [entry(k, six)["question"] for k in range(5)]


def test_the_gold_answer_scores_one_over_http_and_the_expert_plays_in_process():
    datasets = parse_datasets([SIX_TERMS])
    task = 27  # a test item
    answer = f"<answer>{gold_answer(task, datasets)}</answer>"
    report = check_env_http(
        ReasoningGymEnv.configured(datasets=[SIX_TERMS]),
        task_ids=[task],
        env_kwargs={"datasets": [SIX_TERMS]},
        policy=lambda env, step, observation: answer,
    )
    assert report.episodes[0].steps[-1][2] == 1.0
    from agentgym_env_reasoning_gym import play_gold_answer

    assert play_gold_answer(ReasoningGymEnv(datasets=[SIX_TERMS]), 3).success is True


@pytest.mark.parametrize(
    ("entry_", "message"),
    [
        ({"name": "chain_summ"}, "did you mean chain_sum"),
        ({"name": "maze", "config": {"min_dist": -3}}, "refused by MazeConfig"),
        ({"name": "maze", "cfg": {}}, "Extra inputs"),
        ({"name": "maze", "size": 5, "test_size": 5}, "must be below size"),
    ],
)
def test_a_bad_entry_is_refused_when_configured(entry_, message):
    with pytest.raises(ValueError, match=message):
        ReasoningGymEnv.configured(datasets=[entry_])
    with pytest.raises(ValueError, match="not both"):
        ReasoningGymEnv(generators=["maze"], datasets=[SIX_TERMS])
