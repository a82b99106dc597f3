"""Task ids, splits and categories: fixed, disjoint, depth-ordered."""

from __future__ import annotations

from agentgym_env_textcraft import TextCraftEnv, goal_of
from agentgym_env_textcraft.tasks import MIN_TEST_PER_DEPTH, goals


def test_tasks_are_ordered_by_depth_then_name():
    all_goals = goals()
    keys = [(g.depth, g.item) for g in all_goals]
    assert keys == sorted(keys)
    assert [g.task_id for g in all_goals] == list(range(544))
    assert goal_of(0).depth == 1 and goal_of(543).depth == 4


def test_splits_are_disjoint_cover_everything_and_have_100_test_tasks():
    catalog = TextCraftEnv.tasks()
    train, test = catalog.split("train"), catalog.split("test")
    assert len(test) == 100 and len(train) == 444
    assert not set(train) & set(test)
    assert sorted(train + test) == list(range(544))
    assert catalog.sizes() == {"train": 444, "test": 100}


def test_categories_are_depths_and_the_test_split_is_stratified():
    catalog = TextCraftEnv.tasks()
    assert sorted(catalog.categories) == ["depth1", "depth2", "depth3", "depth4"]
    assert {k: len(v) for k, v in catalog.categories.items()} == {
        "depth1": 125,
        "depth2": 291,
        "depth3": 117,
        "depth4": 11,
    }
    for name, ids in catalog.categories.items():
        assert all(goal_of(t).category == name for t in ids)
    test = set(catalog.split("test"))
    per_depth = {name: len(test & set(ids)) for name, ids in catalog.categories.items()}
    assert per_depth == {"depth1": 23, "depth2": 49, "depth3": 22, "depth4": 6}
    assert min(per_depth.values()) >= MIN_TEST_PER_DEPTH


def test_the_split_is_pinned():
    """Changing the split silently would make published results incomparable."""
    test = TextCraftEnv.tasks().split("test")
    pinned = [goal_of(t).item for t in test[:5]]
    assert pinned == [goal_of(t).item for t in sorted(test)[:5]]
    assert pinned == PINNED_FIRST_TEST_ITEMS


def test_catalog_copies_cannot_corrupt_the_split():
    catalog = TextCraftEnv.tasks()
    catalog.splits["test"].clear()
    assert len(TextCraftEnv.tasks().split("test")) == 100


PINNED_FIRST_TEST_ITEMS = ["black dye", "cobblestone stairs", "diamond boots", "diorite", "dried kelp block"]
