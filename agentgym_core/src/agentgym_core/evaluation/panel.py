"""Fixed evaluation panels: the task ids each evaluation plays, per environment, and a short hash of them.

Every run logs its panel at its start, so two runs (or a run and an ``agentgym eval``) can be seen to
evaluate the same tasks. The ids depend only on the catalog and the recipe, never on how many workers,
ranks or servers play them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["describe_panel", "evaluation_panel", "panel_hash", "panel_record"]


def evaluation_panel(envs: Sequence[Any], eval_tasks: int) -> dict[str, list[int]]:
    """Environment name -> the held-out task ids its evaluations play (the first ``eval_tasks`` of its test
    tasks, as :func:`agentgym_core.evaluation.held_out.evaluate_held_out` takes them)."""
    return {env.name: list(env.test_tasks[:eval_tasks]) for env in envs}


def panel_hash(panel: Mapping[str, Sequence[int]]) -> str:
    """A short hash of a panel: the same tasks of the same environments give the same hash, whatever the order
    the environments are listed in."""
    canonical = json.dumps({name: [int(t) for t in ids] for name, ids in sorted(panel.items())}, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def panel_record(panel: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """What a run logs about its panel: the hash and the task ids."""
    return {"panel_hash": panel_hash(panel), "panel_tasks": {name: list(ids) for name, ids in panel.items()}}


def describe_panel(panel: Mapping[str, Sequence[int]]) -> str:
    """One line for the console: the hash and how many tasks of each environment."""
    sizes = ", ".join(f"{name} {len(ids)} tasks" for name, ids in panel.items())
    return f"evaluation panel {panel_hash(panel)}: {sizes or 'no tasks'}"
