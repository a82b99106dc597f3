"""A scripted expert that solves TextCraft from the first observation's text alone.

It never looks at the recipe book: it parses the crafting commands and the goal out of the
observation, so it proves that the text an agent sees is enough to win. The plan is a depth-first
expansion of the goal with a simulated inventory:

* an item no listed command makes is a raw material: ``get`` exactly what is missing;
* an item with commands uses the cheapest one (fewest actions, counted recursively) and is crafted
  in as many batches as needed, after its ingredients are on hand;
* a generic ingredient ("planks") that no command makes is supplied by a listed output whose name
  ends with it ("oak planks") and that is not itself made from it (so "cobblestone" stays a raw
  material although "mossy cobblestone" is listed), the cheapest such output.

Because crafting one ingredient can use up another (sticks eat planks), ingredients are topped up
until every one is on hand before the batch is crafted. :func:`solve` plays the plan and reads the
answers: when a craft with a stand-in is refused, it drops that stand-in and plans again.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from agentgym_core import Env

__all__ = [
    "ExpertResult",
    "ListedRecipe",
    "PlannedStep",
    "parse_observation",
    "plan",
    "plan_actions",
    "solve",
]

_COMMAND = re.compile(r"craft (\d+) (.+?) using (.+)")
_GOAL = re.compile(r"Goal: craft (.+)\.\s*$", re.MULTILINE)


@dataclass(frozen=True)
class ListedRecipe:
    """One crafting command read from the observation."""

    output: str
    count: int
    inputs: tuple[tuple[str, int], ...]


def parse_observation(observation: str) -> tuple[dict[str, list[ListedRecipe]], str]:
    """(output -> its listed recipes in order, goal item) from a reset observation."""
    goal_match = _GOAL.search(observation)
    if goal_match is None:
        raise ValueError("observation has no 'Goal: craft X.' line; is it a TextCraft reset observation?")
    recipes: dict[str, list[ListedRecipe]] = {}
    for line in observation.splitlines():
        match = _COMMAND.fullmatch(line.strip())
        if match is None:
            continue
        inputs = []
        for part in match.group(3).split(","):
            n, name = part.strip().split(" ", 1)
            inputs.append((name, int(n)))
        recipe = ListedRecipe(match.group(2), int(match.group(1)), tuple(inputs))
        recipes.setdefault(recipe.output, []).append(recipe)
    return recipes, goal_match.group(1)


@dataclass(frozen=True)
class PlannedStep:
    """One planned action, what it does to the inventory, and the generic ingredients it assumes."""

    action: str
    changes: tuple[tuple[str, int], ...]
    stand_ins: tuple[tuple[str, str], ...] = ()  # (generic ingredient, item used for it)


class _Planner:
    def __init__(
        self,
        recipes: dict[str, list[ListedRecipe]],
        inventory: Counter[str] | None = None,
        rejected: frozenset[tuple[str, str]] = frozenset(),
    ) -> None:
        self.recipes = recipes
        self.inventory: Counter[str] = Counter(inventory or {})
        self.rejected = rejected  # (generic, item) pairs the game refused
        self.steps: list[PlannedStep] = []
        self._cost: dict[tuple[str, frozenset[str]], float] = {}

    def resolve(self, name: str, path: frozenset[str] = frozenset()) -> str:
        """The concrete item to use for an ingredient name (a generic one maps to a member)."""
        if name in self.recipes:
            return name
        # "oak planks" can stand in for "planks", but "mossy cobblestone" (made from cobblestone)
        # is not a kind of "cobblestone": a kind is never made from its generic ingredient.
        members = [
            out
            for out in self.recipes
            if out.endswith(" " + name)
            and out not in path
            and (name, out) not in self.rejected
            and not any(ing == name for r in self.recipes[out] for ing, _ in r.inputs)
        ]
        return min(members, key=lambda m: self.cost(m, path)) if members else name

    def cost(self, item: str, path: frozenset[str] = frozenset()) -> float:
        """Actions needed to make one batch of `item` (1 for a raw material) without using
        anything on `path` (the items being made further up); inf if impossible."""
        if item not in self.recipes:
            return 1.0
        if item in path:
            return math.inf
        key = (item, path)
        if key not in self._cost:
            self._cost[key] = min(self._recipe_cost(r, path | {item}) for r in self.recipes[item])
        return self._cost[key]

    def _recipe_cost(self, recipe: ListedRecipe, path: frozenset[str]) -> float:
        return 1.0 + sum(self.cost(self.resolve(name, path), path) for name, _ in recipe.inputs)

    def obtain(self, item: str, quantity: int, path: frozenset[str] = frozenset()) -> None:
        missing = quantity - self.inventory[item]
        if missing <= 0:
            return
        if item not in self.recipes:
            self.steps.append(PlannedStep(f"get {missing} {item}", ((item, missing),)))
            self.inventory[item] += missing
            return
        if item in path:
            raise ValueError(f"cannot plan: {item!r} is needed to make itself")
        inner = path | {item}
        recipe = min(self.recipes[item], key=lambda r: self._recipe_cost(r, inner))
        batches = math.ceil(missing / recipe.count)
        concrete = [(self.resolve(name, inner), n) for name, n in recipe.inputs]
        needs = [(name, n * batches) for name, n in concrete]
        for _ in range(len(needs) + 1):  # top up whatever a later ingredient consumed
            if all(self.inventory[name] >= n for name, n in needs):
                break
            for name, n in needs:
                self.obtain(name, n, inner)
        else:
            raise ValueError(f"cannot plan: gathering the ingredients of {item!r} keeps consuming each other")
        command = ", ".join(f"{n} {name}" for name, n in concrete)
        changes = tuple((name, -n) for name, n in concrete) + ((item, recipe.count),)
        stand_ins = tuple(
            (generic, used)
            for (generic, _), (used, _) in zip(recipe.inputs, concrete, strict=True)
            if generic != used
        )
        for _ in range(batches):
            self.steps.append(PlannedStep(f"craft {recipe.count} {item} using {command}", changes, stand_ins))
            _apply(self.inventory, changes)


def _apply(inventory: Counter[str], changes: tuple[tuple[str, int], ...]) -> None:
    for name, delta in changes:
        inventory[name] += delta


def plan(
    observation: str,
    inventory: Counter[str] | None = None,
    rejected: frozenset[tuple[str, str]] = frozenset(),
) -> list[PlannedStep]:
    """Plan from a reset observation, starting from `inventory`, avoiding `rejected` stand-ins."""
    recipes, goal = parse_observation(observation)
    planner = _Planner(recipes, inventory, rejected)
    planner.obtain(goal, 1)
    return planner.steps


def plan_actions(observation: str) -> list[str]:
    """The action sequence that crafts the goal of a reset observation, if no stand-in is refused."""
    return [step.action for step in plan(observation)]


@dataclass(frozen=True)
class ExpertResult:
    """How an expert episode went."""

    task_id: int
    success: bool
    steps: int
    actions: tuple[str, ...]
    last_observation: str


def solve(env: Env, task_id: int, seed: int | None = None, max_replans: int = 5) -> ExpertResult:
    """Play one episode of `env` (in-process or over HTTP), reading only observation text.

    The expert follows its plan; when a craft that used a stand-in for a generic ingredient is
    refused (the data's groups are not always what the names suggest: ``white wool`` is not in
    the ``wool`` group), it rules that stand-in out and plans again from what it holds.
    """
    first = env.reset(task_id, seed=seed).observation
    observation = first
    inventory: Counter[str] = Counter()
    rejected: frozenset[tuple[str, str]] = frozenset()
    taken: list[str] = []
    for _ in range(max_replans + 1):
        refused: PlannedStep | None = None
        for step in plan(first, inventory, rejected):
            result = env.step(step.action)
            taken.append(step.action)
            observation = result.observation
            if result.terminated or result.truncated:
                return ExpertResult(task_id, bool(result.success), len(taken), tuple(taken), observation)
            if observation.startswith("Could not"):
                refused = step
                break
            _apply(inventory, step.changes)
        if refused is None or not refused.stand_ins:
            break
        rejected = rejected | set(refused.stand_ins)
    return ExpertResult(task_id, False, len(taken), tuple(taken), observation)
