"""Fixed evaluation panels: the task ids each evaluation plays, per environment, the conditions it plays them
under, and a short hash of both.

Every run logs its panel at its start, so two runs (or a run and an ``agentgym eval``) can be seen to
evaluate the same tasks under the same conditions: equal hashes mean equal task ids *and* equal sampling
settings, horizon and token budget. The ids depend only on the catalog and the recipe, never on how many
workers, ranks or servers play them; :func:`panel_tasks` is the one place that picks them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym_core.rollout.backend import SamplingParams

__all__ = ["describe_panel", "evaluation_conditions", "evaluation_panel", "held_out_order", "panel_hash", "panel_record",
           "panel_tasks"]


def held_out_order(catalog: Any, split: str, categories: Sequence[str] | None = None) -> list[int]:
    """Every task of ``split`` in :meth:`agentgym_core.env.TaskCatalog.spread` order (round-robin across its
    categories), only those of ``categories`` when given: the order a panel of the first N is taken from, by
    the trainer and by ``agentgym eval`` alike."""
    ordered = catalog.spread(split, len(catalog.split(split)))
    return catalog.in_categories(ordered, list(categories), what=f"{split} tasks") if categories else ordered


def panel_tasks(spread: Sequence[int], n: int | None) -> list[int]:
    """The tasks an evaluation of ``n`` tasks of a split plays (all when ``n`` is None): the first ``n`` of the
    split in :meth:`agentgym_core.env.TaskCatalog.spread` order, round-robin across its categories, so a small
    panel covers every category. ``agentgym eval --limit N`` and the trainer's ``trainer.eval_tasks: N`` both
    take them here."""
    return list(spread if n is None else spread[:n])


def evaluation_panel(envs: Sequence[Any], eval_tasks: int) -> dict[str, list[int]]:
    """Environment name -> the held-out task ids its evaluations play (each env's ``test_tasks`` are its test
    split in spread order)."""
    return {env.name: panel_tasks(env.test_tasks, eval_tasks) for env in envs}


def evaluation_conditions(sampling: SamplingParams, *, horizon: int, max_total_tokens: int,
                          samples_per_task: int = 1) -> dict[str, Any]:
    """What besides the tasks decides an evaluation's numbers: how replies are sampled, the turn horizon, the
    token budget and the samples per task."""
    conditions = {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
                  "max_new_tokens": sampling.max_new_tokens, "seed": sampling.seed, "horizon": horizon,
                  "max_total_tokens": max_total_tokens, "samples_per_task": samples_per_task}
    if sampling.constrain_actions:  # only when on: panels of unconstrained evaluations keep their hashes
        conditions["constrain_actions"] = True
    return conditions


def panel_hash(panel: Mapping[str, Sequence[int]], conditions: Mapping[str, Any] | None = None) -> str:
    """A short hash of a panel and its conditions: the same tasks of the same environments under the same
    conditions give the same hash, whatever the order the environments are listed in."""
    canonical = json.dumps({"tasks": {name: [int(t) for t in ids] for name, ids in sorted(panel.items())},
                            "conditions": dict(sorted((conditions or {}).items()))}, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def panel_record(panel: Mapping[str, Sequence[int]], conditions: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a run logs about its panel: the hash, the task ids and the conditions."""
    return {"panel_hash": panel_hash(panel, conditions), "panel_tasks": {name: list(ids) for name, ids in panel.items()},
            "conditions": dict(conditions or {})}


def describe_panel(panel: Mapping[str, Sequence[int]], conditions: Mapping[str, Any] | None = None) -> str:
    """One line for the console: the hash and how many tasks of each environment."""
    sizes = ", ".join(f"{name} {len(ids)} tasks" for name, ids in panel.items())
    return f"evaluation panel {panel_hash(panel, conditions)}: {sizes or 'no tasks'}"
