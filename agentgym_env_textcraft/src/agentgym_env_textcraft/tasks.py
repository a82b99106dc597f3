"""TextCraft tasks: one per craftable item, ordered by crafting depth as AgentGym orders them.

Task ``i`` is the ``i``-th goal when every item with a recipe is sorted by minimum crafting depth
(1 to 4), then by name. AgentGym sorts by depth only, so its order within a depth follows the
file system's directory order; the name tie-break makes ours the same on every machine.

The test split holds 100 tasks, stratified by depth: at least :data:`MIN_TEST_PER_DEPTH` of every
depth (depth 4 has only 11 items, and a per-depth success rate over 2 tasks says little), the
rest shared in proportion to each depth's size. Which items of a depth are drawn is fixed by a
SHA-256 of the item name, so the split never depends on Python's RNG or version. Every other task
is in the train split.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

from agentgym_core import InvalidTaskError, TaskCatalog
from agentgym_env_textcraft.recipes import load_recipe_book

__all__ = ["MIN_TEST_PER_DEPTH", "TEST_SIZE", "Goal", "goal_of", "goals", "task_catalog"]

TEST_SIZE = 100
MIN_TEST_PER_DEPTH = 5


@dataclass(frozen=True)
class Goal:
    """The item task `task_id` asks for and its minimum crafting depth."""

    task_id: int
    item: str
    depth: int

    @property
    def category(self) -> str:
        return f"depth{self.depth}"


@functools.cache
def goals() -> tuple[Goal, ...]:
    """Every task, in task-id order."""
    return tuple(Goal(i, item, depth) for i, (item, depth) in enumerate(load_recipe_book().goals(1)))


def goal_of(task_id: int) -> Goal:
    """The goal of `task_id`; raises InvalidTaskError with the valid range otherwise."""
    all_goals = goals()
    if isinstance(task_id, bool) or not isinstance(task_id, int) or not 0 <= task_id < len(all_goals):
        raise InvalidTaskError(
            f"textcraft has tasks 0..{len(all_goals) - 1}; got {task_id!r}. "
            "Use TextCraftEnv.tasks() for the splits."
        )
    return all_goals[task_id]


def _test_quota(sizes: dict[int, int]) -> dict[int, int]:
    quota = {d: min(n, MIN_TEST_PER_DEPTH) for d, n in sizes.items()}
    left = TEST_SIZE - sum(quota.values())
    spare = {d: sizes[d] - quota[d] for d in sizes}
    total_spare = sum(spare.values())
    shares = {d: left * spare[d] / total_spare for d in sizes}
    for d in sizes:
        quota[d] += int(shares[d])
    # Largest remainder first; ties go to the shallower depth.
    by_remainder = sorted(sizes, key=lambda d: (-(shares[d] - int(shares[d])), d))
    for d in by_remainder[: TEST_SIZE - sum(quota.values())]:
        quota[d] += 1
    return quota


def _draw_order(goal: Goal) -> str:
    return hashlib.sha256(f"agentgym-textcraft-test:{goal.item}".encode()).hexdigest()


def task_catalog() -> TaskCatalog:
    """Train/test splits (disjoint, covering every task) and depth categories (a fresh copy)."""
    return _catalog().model_copy(deep=True)


@functools.cache
def _catalog() -> TaskCatalog:
    by_depth: dict[int, list[Goal]] = {}
    for goal in goals():
        by_depth.setdefault(goal.depth, []).append(goal)
    quota = _test_quota({d: len(gs) for d, gs in by_depth.items()})
    test = sorted(g.task_id for d, gs in by_depth.items() for g in sorted(gs, key=_draw_order)[: quota[d]])
    test_set = set(test)
    train = [g.task_id for g in goals() if g.task_id not in test_set]
    categories = {f"depth{d}": [g.task_id for g in gs] for d, gs in sorted(by_depth.items())}
    return TaskCatalog(splits={"train": train, "test": test}, categories=categories)
