"""Pass-rate curriculum: draw a step's tasks from the categories most likely to give mixed groups.

Group-relative estimators (GRPO, RLOO, GiGPO) learn only from groups whose samples' outcomes
differ. If the policy passes a category's tasks (a BabyAI level, a TextCraft depth) with probability
p, a group of G samples is mixed with probability ``1 - p^G - (1-p)^G``: 0 when the category is
always or never solved, highest at p = 0.5. :class:`TaskCurriculum` keeps decayed counts of passes
and attempts per (environment, category); each step draws its tasks' categories in proportion to
that probability, floored so that no category starves, and takes the tasks within a category from
the category's own per-epoch shuffles (:func:`draw_tasks`).

Choices worth knowing:

* p is the add-one (Laplace) estimate ``(successes + 1) / (attempts + 2)``: 0.5 for a category not
  tried yet, which is then drawn with nearly the largest weight until it has been tried.
* One estimate per category, not per task: a task comes round once in many steps, while the tasks of
  a category share a difficulty. Categories are weighted alike whatever their number of tasks.
* A "pass" is the trajectory's ``success`` flag; trajectories the environment broke (``failed``)
  are not counted.
* Tasks without a category belong to one shared category (``None``).

Determinism: the draw is a pure function of (seed, step, label, counts). The counts change only in
:meth:`TaskCurriculum.update`, which the trainer calls once per step after its rollout, and they are
saved in checkpoints, so a resumed run draws the tasks an uninterrupted one does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgym_core.rl.batch import shuffled_slice, step_seed
from agentgym_core.rl.config import CurriculumConfig, RolloutConfig
from agentgym_core.rollout.trajectory import Trajectory

__all__ = [
    "Category",
    "PassCounts",
    "TaskCurriculum",
    "category_weight",
    "curriculum_for",
    "draw_tasks",
    "mixed_group_probability",
    "pass_rate",
    "tasks_by_category",
]

Category = str | None  # None: the shared category of tasks the environment names none for


@dataclass(frozen=True)
class PassCounts:
    """A category's decayed counts of passed and attempted samples."""

    successes: float = 0.0
    attempts: float = 0.0


# ---- the estimate and the weight (pure) -----------------------------------------------------------------
def pass_rate(counts: PassCounts) -> float:
    """Add-one estimate of the pass probability: 0.5 with no attempts, never exactly 0 or 1."""
    return (counts.successes + 1.0) / (counts.attempts + 2.0)


def mixed_group_probability(p: float, group_size: int) -> float:
    """Chance that ``group_size`` samples, each passing with probability ``p``, neither all pass nor all fail."""
    return 1.0 - p**group_size - (1.0 - p) ** group_size


def category_weight(counts: PassCounts, group_size: int, floor: float) -> float:
    """The category's drawing weight: its chance of a mixed group, at least ``floor``."""
    return max(floor, mixed_group_probability(pass_rate(counts), group_size))


def decayed(counts: PassCounts, decay: float) -> PassCounts:
    return PassCounts(counts.successes * decay, counts.attempts * decay)


# ---- the draw (pure) -----------------------------------------------------------------------------------
def tasks_by_category(task_ids: Sequence[int], categories: Mapping[int, str]) -> dict[Category, list[int]]:
    """``task_ids`` grouped by category (``categories``: task id -> name; absent: the shared ``None``).

    The categories come in a fixed order (the shared one first, then by name) and the tasks in their
    given order, so the draw does not depend on dictionary order.
    """
    groups: dict[Category, list[int]] = {}
    for task in task_ids:
        groups.setdefault(categories.get(task), []).append(task)
    return {name: groups[name] for name in sorted(groups, key=lambda c: (c is not None, c or ""))}


def draw_tasks(by_category: Mapping[Category, Sequence[int]], weights: Sequence[float], n: int, step: int,
               seed: int, label: str) -> list[int]:
    """The ``n`` tasks of step ``step``: categories drawn by weight, tasks from each category's own shuffles.

    ``weights[i]`` belongs to the i-th category of ``by_category``. The n categories are drawn with
    replacement by a generator seeded by (seed, label, "curriculum", step). A category drawn k times
    gives the first k of the n positions ``[step * n, (step + 1) * n)`` of its stream of per-epoch
    shuffles (:func:`~agentgym_core.rl.batch.shuffled_slice`): consecutive steps read disjoint
    windows, so its tasks rotate, none twice in a pass over its shuffle (a category with fewer than
    k tasks repeats some), and the positions of a window it did not use are skipped.
    """
    names = list(by_category)
    if not names:
        raise ValueError(f"no training tasks for {label or 'the environment'}; check its train split/train_tasks")
    g = torch.Generator().manual_seed(step_seed(seed, label, "curriculum", step))
    drawn = torch.multinomial(torch.tensor(list(weights), dtype=torch.float64), n, replacement=True,
                              generator=g).tolist()  # (n,): a category index per task
    windows = {i: iter(shuffled_slice(by_category[names[i]], step * n, k, seed, (label, "category", names[i])))
               for i, k in Counter(drawn).items()}
    return [next(windows[i]) for i in drawn]


# ---- the state ------------------------------------------------------------------------------------------
class TaskCurriculum:
    """Pass counts per (environment, category), the draw they weight, and their checkpointable state."""

    def __init__(self, config: CurriculumConfig, group_size: int) -> None:
        self.config, self.group_size = config, group_size
        self.counts: dict[tuple[str, Category], PassCounts] = {}

    def weights(self, env: str, categories: Iterable[Category]) -> list[float]:
        """Drawing weights of ``env``'s ``categories``, in their order."""
        return [category_weight(self.counts.get((env, c), PassCounts()), self.group_size, self.config.floor)
                for c in categories]

    def tasks_for_step(self, env: str, by_category: Mapping[Category, Sequence[int]], n: int, step: int, seed: int,
                       label: str) -> list[int]:
        """The ``n`` tasks of ``env`` for step ``step`` (``label`` names the env and the sampling round)."""
        return draw_tasks(by_category, self.weights(env, by_category), n, step, seed, label)

    def metrics(self, env: str, categories: Sequence[Category]) -> dict[str, float]:
        """``curriculum/{env}/expected_mixed``: the chance that a group drawn now is mixed (each category's
        chance weighted by how likely it is drawn); ``curriculum/{env}/categories_weighted``: categories
        whose chance is above the floor."""
        mixed = [mixed_group_probability(pass_rate(self.counts.get((env, c), PassCounts())), self.group_size)
                 for c in categories]
        weights = self.weights(env, categories)
        total = sum(weights)
        return {f"curriculum/{env}/expected_mixed": sum(w * m for w, m in zip(weights, mixed, strict=True)) / total
                if total else 0.0,
                f"curriculum/{env}/categories_weighted": float(sum(m > self.config.floor for m in mixed))}

    def update(self, trajectories: Iterable[Trajectory]) -> None:
        """Decay every count by ``config.decay``, then add the step's passes and attempts (failed ones left out)."""
        counts = {key: decayed(c, self.config.decay) for key, c in self.counts.items()}
        for t in trajectories:
            if t.failed:  # the environment's failure, not the policy's
                continue
            old = counts.get((t.env, t.category), PassCounts())
            counts[(t.env, t.category)] = PassCounts(old.successes + float(t.success), old.attempts + 1.0)
        self.counts = counts

    def state_dict(self) -> dict[str, Any]:
        """The counts as plain lists ``[env, category, successes, attempts]`` (checkpoints, Ray calls)."""
        return {"counts": [[env, c, n.successes, n.attempts] for (env, c), n in self.counts.items()]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.counts = {(env, c): PassCounts(float(s), float(a)) for env, c, s, a in state["counts"]}


def curriculum_for(rollout: RolloutConfig) -> TaskCurriculum | None:
    """The curriculum ``rollout.curriculum`` asks for; None when it is off (``kind: none``)."""
    if rollout.curriculum.kind == "none":
        return None
    return TaskCurriculum(rollout.curriculum, rollout.group_size)
