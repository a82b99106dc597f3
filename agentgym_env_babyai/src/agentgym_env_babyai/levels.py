"""The 40 BabyAI levels, the task-id mapping and the fixed train/test splits.

Task ids follow AgentGym's BabyAI server: task ``i`` is level ``LEVELS[i % 40]`` generated with
minigrid seed ``i // 40``. The level order is AgentGym's (its ``all_levels`` table, 1-based there,
0-based here), so task ``i`` here is the same layout as AgentGym's ``data_idx = i``, except where
AgentGym's minigrid 2 differed (a 4x4 ``GoToObjS6-v0``; a locked room leaking between draws of the
generated levels): :mod:`agentgym_env_babyai.agentgym_style` reproduces those for the AgentGym routes.

Splits. AgentGym trains on ids below 1804 and evaluates BabyAI on 90 held-out tasks; its exact list
of test ids is not published with the environment, so ours is fixed by rule instead:

* ``train``: ids ``0 .. 1803`` (minigrid seeds 0-45), every level.
* ``test``: the next 90 ids, ``1804 .. 1893`` (seeds 45-47). Contiguous ids cycle through the
  levels, so every level has 2 test tasks and levels 4-13 have 3. No test id is a train id, and
  no (level, seed) pair repeats across the splits because the mapping is a bijection.
* ``heldout``: the next 120 ids, ``1894 .. 2013`` (seeds 47-50), exactly 3 tasks of every level.
  A second held-out set for learning studies (``bench/learn_babyai.py``): 90 tasks with uneven
  per-level counts cannot resolve a change of less than about 15 points, and a balanced set
  weighs every level the same. Disjoint from ``train`` and ``test``.

The test split deliberately keeps the two levels the minigrid bot cannot solve (KeyInBox and
PutNextS7N4Carrying); the expert's solve rate is reported over all 90 tasks.
"""

from __future__ import annotations

import logging
from functools import cache

import gymnasium
import minigrid  # noqa: F401 - importing minigrid registers the BabyAI-* ids with gymnasium
from gymnasium.envs.registration import load_env_creator
from minigrid.envs.babyai.core import roomgrid_level
from minigrid.minigrid_env import MiniGridEnv

from agentgym_core.env import InvalidTaskError, TaskCatalog

__all__ = [
    "LEVELS",
    "NUM_LEVELS",
    "HELDOUT_IDS",
    "TEST_IDS",
    "TRAIN_IDS",
    "build_catalog",
    "level_name",
    "make_level",
    "task_level_seed",
]

log = logging.getLogger(__name__)

LEVELS: tuple[str, ...] = (
    "BabyAI-GoToRedBallGrey-v0",
    "BabyAI-GoToRedBall-v0",
    "BabyAI-GoToRedBallNoDists-v0",
    "BabyAI-GoToObjS6-v1",  # AgentGym names v0; minigrid 3 only registers the fixed v1
    "BabyAI-GoToLocalS8N7-v0",
    "BabyAI-GoToObjMazeS7-v0",
    "BabyAI-GoToImpUnlock-v0",
    "BabyAI-GoToSeqS5R2-v0",
    "BabyAI-GoToRedBlueBall-v0",
    "BabyAI-GoToDoor-v0",
    "BabyAI-GoToObjDoor-v0",
    "BabyAI-Open-v0",
    "BabyAI-OpenRedDoor-v0",
    "BabyAI-OpenDoorLoc-v0",
    "BabyAI-OpenRedBlueDoorsDebug-v0",
    "BabyAI-OpenDoorsOrderN4Debug-v0",
    "BabyAI-Pickup-v0",
    "BabyAI-UnblockPickup-v0",
    "BabyAI-PickupLoc-v0",
    "BabyAI-PickupDistDebug-v0",
    "BabyAI-PickupAbove-v0",
    "BabyAI-PutNextLocalS6N4-v0",
    "BabyAI-PutNextS7N4Carrying-v0",
    "BabyAI-Unlock-v0",
    "BabyAI-UnlockLocalDist-v0",
    "BabyAI-KeyInBox-v0",
    "BabyAI-UnlockPickupDist-v0",
    "BabyAI-BlockedUnlockPickup-v0",
    "BabyAI-UnlockToUnlock-v0",
    "BabyAI-ActionObjDoor-v0",
    "BabyAI-FindObjS7-v0",
    "BabyAI-KeyCorridorS6R3-v0",
    "BabyAI-OneRoomS20-v0",
    "BabyAI-MoveTwoAcrossS8N9-v0",
    "BabyAI-SynthS5R2-v0",
    "BabyAI-SynthLoc-v0",
    "BabyAI-SynthSeq-v0",
    "BabyAI-MiniBossLevel-v0",
    "BabyAI-BossLevel-v0",
    "BabyAI-BossLevelNoUnlock-v0",
)
NUM_LEVELS = len(LEVELS)

TRAIN_IDS: tuple[int, ...] = tuple(range(0, 1804))
TEST_IDS: tuple[int, ...] = tuple(range(1804, 1804 + 90))
HELDOUT_IDS: tuple[int, ...] = tuple(range(1894, 1894 + 3 * NUM_LEVELS))


def level_name(level: str) -> str:
    """Short category name of a level id: ``BabyAI-GoToRedBall-v0`` -> ``GoToRedBall``."""
    return level.removeprefix("BabyAI-").rsplit("-v", 1)[0]


def task_level_seed(task_id: int) -> tuple[str, int]:
    """Map a task id to (minigrid level id, minigrid seed), as AgentGym does."""
    if isinstance(task_id, bool) or not isinstance(task_id, int) or task_id < 0:
        raise InvalidTaskError(
            f"BabyAI task ids are non-negative integers (level = id % {NUM_LEVELS}, "
            f"seed = id // {NUM_LEVELS}); got {task_id!r}"
        )
    return LEVELS[task_id % NUM_LEVELS], task_id // NUM_LEVELS


@cache
def build_catalog() -> TaskCatalog:
    """The fixed splits, with one category per level (short level name)."""
    categories: dict[str, list[int]] = {level_name(level): [] for level in LEVELS}
    for task_id in (*TRAIN_IDS, *TEST_IDS, *HELDOUT_IDS):
        categories[level_name(LEVELS[task_id % NUM_LEVELS])].append(task_id)
    return TaskCatalog(splits={"train": list(TRAIN_IDS), "test": list(TEST_IDS), "heldout": list(HELDOUT_IDS)},
                       categories=categories)


def _quiet_print(*args: object, **_: object) -> None:
    # roomgrid_level prints "Sampling rejected: ..." to stdout on every rejected layout draw. That is
    # routine rejection sampling, not an error, and it would pollute server logs and captured
    # prompts; demote it to DEBUG logging instead of hiding it.
    log.debug(" ".join(str(a) for a in args))


# Shadowing the module-global name (not redirecting sys.stdout) is thread-safe and touches only
# this module's two prints; real exceptions from minigrid still propagate.
roomgrid_level.print = _quiet_print  # type: ignore[attr-defined]


def make_level(level: str) -> MiniGridEnv:
    """Instantiate a level's env class directly (no gymnasium wrappers: they only add overhead
    and the levels enforce their own ``max_steps``)."""
    spec = gymnasium.spec(level)
    creator = load_env_creator(spec.entry_point)
    return creator(**spec.kwargs)
