"""SciWorld task ids: (task family, variation) flattened the way AgentGym numbers them.

AgentGym's SciWorld server walks ScienceWorld's task list in its published order (``1-1`` boil,
``1-2`` melt, ... ``10-2``), skips seven families, and appends every variation of each remaining
family, so task id ``i`` is the ``i``-th (family, variation) pair of that walk. We keep exactly that
numbering (AgentGym's ``data_idx`` values mean the same task here) and add:

* splits from ScienceWorld's official train/dev/test variation lists; the official test variations
  are cut into a fixed, family-stratified 200-task ``test`` split and the rest (``test_extra``);
* one category per family, named ``<topic>/<family>`` (e.g. ``Matter/boil``).

The variation counts and official splits come from the engine; they are frozen in
``data/catalog.json`` so that listing tasks needs no JVM. ``python -m agentgym_env_sciworld.catalog``
rebuilds that file from the installed ``scienceworld`` jar (and a test checks it still matches).
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from agentgym_core import InvalidTaskError, TaskCatalog

__all__ = [
    "EXCLUDED_FAMILIES",
    "TEST_SET_SIZE",
    "Family",
    "SciWorldTask",
    "build_catalog_data",
    "families",
    "task",
    "task_catalog",
]

#: Task families AgentGym leaves out (by ScienceWorld task id): grow plant / grow fruit (5-1, 5-2),
#: the three inclined-plane tasks (9-1..9-3) and both Mendelian genetics tasks (10-1, 10-2).
EXCLUDED_FAMILIES = ("5-1", "5-2", "9-1", "9-2", "9-3", "10-1", "10-2")
TEST_SET_SIZE = 200
_TEST_SET_SEED = "agentgym-sciworld-test-200"


@dataclass(frozen=True)
class Family:
    """One ScienceWorld task family and the task ids it owns."""

    family_id: str  # ScienceWorld's id, e.g. "1-1"
    name: str  # engine name, e.g. "boil"
    topic: str  # e.g. "Matter"
    title: str  # e.g. "Changes of State (Boiling)"
    first_task_id: int
    variations: int
    splits: dict[str, list[int]]  # official split -> variation ids

    @property
    def category(self) -> str:
        return f"{self.topic}/{self.name}"


@dataclass(frozen=True)
class SciWorldTask:
    """The (family, variation) pair behind one task id."""

    task_id: int
    family: Family
    variation: int


def _package_tasks() -> list[dict[str, str]]:
    from scienceworld.constants import TASKS

    return list(TASKS)


def _data_path() -> Path:
    return Path(str(resources.files("agentgym_env_sciworld") / "data" / "catalog.json"))


@functools.lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    with open(_data_path()) as f:
        return json.load(f)


@functools.lru_cache(maxsize=1)
def families() -> tuple[Family, ...]:
    """The task families in AgentGym's order, with their task-id ranges."""
    data = _data()["families"]
    out: list[Family] = []
    next_id = 0
    for meta in _package_tasks():
        if meta["task_id"] in EXCLUDED_FAMILIES:
            continue
        entry = data[meta["task_name"]]
        out.append(Family(meta["task_id"], meta["task_name"], meta["topic"], meta["task"], next_id,
                          entry["variations"], {k: entry[k] for k in ("train", "dev", "test")}))
        next_id += entry["variations"]
    return tuple(out)


def task(task_id: int) -> SciWorldTask:
    """Map a task id to its family and variation; unknown ids raise :class:`InvalidTaskError`."""
    fams = families()
    total = fams[-1].first_task_id + fams[-1].variations
    if not isinstance(task_id, int) or isinstance(task_id, bool) or not 0 <= task_id < total:
        raise InvalidTaskError(f"sciworld task ids run from 0 to {total - 1}; got {task_id!r}")
    for fam in reversed(fams):
        if task_id >= fam.first_task_id:
            return SciWorldTask(task_id, fam, task_id - fam.first_task_id)
    raise AssertionError("unreachable: task id below the first family")


@functools.lru_cache(maxsize=1)
def task_catalog() -> TaskCatalog:
    """Splits (train, dev, test = fixed 200, test_extra = other official test ids) and categories."""
    fams = families()
    test_200 = set(_data()["test_200"])
    splits: dict[str, list[int]] = {"train": [], "dev": [], "test": [], "test_extra": []}
    categories: dict[str, list[int]] = {}
    for fam in fams:
        ids = range(fam.first_task_id, fam.first_task_id + fam.variations)
        categories[fam.category] = list(ids)
        splits["train"] += [fam.first_task_id + v for v in fam.splits["train"]]
        splits["dev"] += [fam.first_task_id + v for v in fam.splits["dev"]]
        for v in fam.splits["test"]:
            tid = fam.first_task_id + v
            splits["test" if tid in test_200 else "test_extra"].append(tid)
    return TaskCatalog(splits={k: sorted(v) for k, v in splits.items()}, categories=categories)


# -- rebuilding data/catalog.json from the engine ---------------------------------------------------
def _choose_test_set(fams: list[tuple[int, list[int]]]) -> list[int]:
    """A family-stratified pick of TEST_SET_SIZE ids from (first_task_id, official test variations).

    Every family gets an equal share (capped by how many test variations it has); the leftover is
    handed out one at a time in family order to families that still have spare variations. Within a
    family the variations are a seeded sample, so the set is reproducible and spread out.
    """
    quota = [0] * len(fams)
    remaining = TEST_SET_SIZE
    while remaining:
        progressed = False
        for i, (_, tests) in enumerate(fams):
            if remaining and quota[i] < len(tests):
                quota[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError(f"the families hold fewer than {TEST_SET_SIZE} test variations")
    chosen: list[int] = []
    for (first, tests), k in zip(fams, quota, strict=True):
        rng = random.Random(f"{_TEST_SET_SEED}:{first}")
        chosen += sorted(first + v for v in rng.sample(sorted(tests), k))
    return chosen


def build_catalog_data(sim: Any) -> dict[str, Any]:
    """Read every family's variation count and official splits from a live simulator."""
    fam_data: dict[str, Any] = {}
    for name in sim.task_names():
        sim.load(name, 0)
        fam_data[name] = {"variations": sim.max_variations(name), **sim.variation_splits()}
    kept: list[tuple[int, list[int]]] = []
    first = 0
    for meta in _package_tasks():
        if meta["task_id"] in EXCLUDED_FAMILIES:
            continue
        entry = fam_data[meta["task_name"]]
        kept.append((first, entry["test"]))
        first += entry["variations"]
    import scienceworld

    return {"scienceworld_version": scienceworld.__version__, "families": fam_data,
            "test_200": _choose_test_set(kept)}


def _main() -> None:
    from agentgym_env_sciworld.simulator import Simulator

    sim = Simulator()
    try:
        data = build_catalog_data(sim)
    finally:
        sim.close()
    path = _data_path()
    path.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {path}: {len(data['families'])} families, {len(data['test_200'])} test tasks")


if __name__ == "__main__":
    _main()
