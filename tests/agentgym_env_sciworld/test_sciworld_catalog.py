"""Task numbering, splits and categories (no JVM needed except for the freshness check)."""

from __future__ import annotations

import pytest
from scienceworld.constants import TASKS
from sciworld_helpers import requires_java

from agentgym_core import InvalidTaskError
from agentgym_env_sciworld import EXCLUDED_FAMILIES, SciWorldEnv, families, task, task_catalog
from agentgym_env_sciworld.catalog import TEST_SET_SIZE, _data, build_catalog_data


def test_numbering_follows_agentgym_order_and_skips_its_seven_families():
    fams = families()
    kept = [t["task_name"] for t in TASKS if t["task_id"] not in EXCLUDED_FAMILIES]
    assert [f.name for f in fams] == kept
    assert len(fams) == 23
    assert {"grow-plant", "grow-fruit", "mendelian-genetics-known-plant"}.isdisjoint(f.name for f in fams)
    # AgentGym's data_idx: every variation of family k follows all variations of families < k.
    assert task(0).family.name == "boil" and task(0).variation == 0
    assert task(29).family.name == "boil" and task(29).variation == 29
    assert task(30).family.name == "melt" and task(30).variation == 0
    last = fams[-1]
    assert task(last.first_task_id + last.variations - 1).variation == last.variations - 1
    assert sum(f.variations for f in fams) == 4639


@pytest.mark.parametrize("bad", [-1, 4639, 10**9])
def test_unknown_task_ids_are_rejected_with_the_valid_range(bad):
    with pytest.raises(InvalidTaskError, match="0 to 4638"):
        task(bad)


def test_splits_are_the_official_variation_splits_and_cover_every_task():
    catalog = SciWorldEnv.tasks()
    sizes = catalog.sizes()
    assert sizes["test"] == TEST_SET_SIZE
    assert sum(sizes.values()) == 4639
    for fam in families():
        for split in ("train", "dev"):
            expected = {fam.first_task_id + v for v in fam.splits[split]}
            assert expected <= set(catalog.split(split)), (fam.name, split)
        official_test = {fam.first_task_id + v for v in fam.splits["test"]}
        assert official_test == (set(catalog.split("test")) | set(catalog.split("test_extra"))) & set(
            range(fam.first_task_id, fam.first_task_id + fam.variations))


def test_fixed_test_set_is_stratified_over_every_family():
    catalog = task_catalog()
    per_family = {}
    for tid in catalog.split("test"):
        per_family.setdefault(task(tid).family.name, []).append(tid)
    assert len(per_family) == 23
    # equal shares of ~8-9; the four small families give all their (4-5) official test variations
    assert min(len(v) for v in per_family.values()) >= 4
    assert max(len(v) for v in per_family.values()) <= 10
    assert catalog.split("test") == sorted(_data()["test_200"])


def test_categories_are_one_per_family_named_topic_slash_family():
    catalog = task_catalog()
    assert len(catalog.categories) == 23
    assert catalog.categories["Matter/boil"] == list(range(30))
    assert catalog.category_index()[task(4000).task_id] == task(4000).family.category


@requires_java
@pytest.mark.java
def test_frozen_catalog_matches_the_installed_engine():
    from agentgym_env_sciworld import POOL

    sim = POOL.acquire(heap="512m")
    try:
        assert build_catalog_data(sim) == _data()
    finally:
        POOL.release(sim)
