"""Task ids, splits and categories."""

from __future__ import annotations

from agentgym_env_babyai import HELDOUT_IDS, LEVELS, TEST_IDS, TRAIN_IDS, BabyAIEnv, task_level_seed


def test_anchor_mapping():
    assert task_level_seed(0) == ("BabyAI-GoToRedBallGrey-v0", 0)
    assert task_level_seed(39) == ("BabyAI-BossLevelNoUnlock-v0", 0)
    assert task_level_seed(40 * 7 + 25) == ("BabyAI-KeyInBox-v0", 7)


def test_splits_are_fixed_disjoint_and_sized_like_the_anchor():
    catalog = BabyAIEnv.tasks()
    assert catalog.sizes() == {"train": 1804, "test": 90, "heldout": 120}
    assert set(catalog.split("train")).isdisjoint(catalog.split("test"))
    assert catalog.split("test") == list(TEST_IDS) and catalog.split("train") == list(TRAIN_IDS)
    assert catalog.split("heldout") == list(HELDOUT_IDS)
    pairs = [task_level_seed(t) for t in (*TRAIN_IDS, *TEST_IDS, *HELDOUT_IDS)]
    assert len(set(pairs)) == len(pairs)  # no (level, seed) layout is in two splits


def test_heldout_split_weighs_every_level_the_same():
    index = BabyAIEnv.tasks().category_index()
    per_level: dict[str, int] = {}
    for task in HELDOUT_IDS:
        per_level[index[task]] = per_level.get(index[task], 0) + 1
    assert len(per_level) == 40 and set(per_level.values()) == {3}
    assert BabyAIEnv.tasks().spread("heldout", 40) == sorted(HELDOUT_IDS)[:40]  # one of each level first


def test_categories_are_levels_and_cover_the_test_split():
    catalog = BabyAIEnv.tasks()
    assert len(catalog.categories) == len(LEVELS) == 40
    index = catalog.category_index()
    assert index[1] == "GoToRedBall" and index[3] == "GoToObjS6"
    per_level = {}
    for task in TEST_IDS:
        per_level[index[task]] = per_level.get(index[task], 0) + 1
    assert len(per_level) == 40 and min(per_level.values()) == 2 and max(per_level.values()) == 3
