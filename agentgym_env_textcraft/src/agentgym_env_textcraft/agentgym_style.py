"""AgentGym's TextCraft tasks and answers, reproduced for the compatibility routes.

AgentGym's TextCraft server (``agentenv-textcraft``) numbers its tasks, lists crafting commands and
words its answers differently from this package's native environment, whose rules are the same
but whose task order, command lists and messages were made reproducible and explanatory on purpose
(:mod:`.tasks`, :mod:`.game`). Clients of the AgentGym routes address tasks by ``data_idx`` and
parse AgentGym's answers, so this module reproduces them:

* **Which file came first matters.** AgentGym reads the recipe files in ``os.listdir`` order; that
  order decides which recipe is dropped to break a dependency cycle, the order of each item's
  recipes, and (items sorted by minimum crafting depth with a stable sort) which goal a
  ``data_idx`` names. Directory order is a property of the file system, not of the data, so the
  order of the server whose answers were recorded (``agentgym_recipe_order.txt``, one file name
  per line) is shipped with the package; with it, every recorded ``data_idx`` names the recorded
  goal.
* **The command list** is AgentGym's: the goal's recipe tree walked depth first (repeats allowed),
  up to 10 uses of each ingredient drawn with ``random.Random(42)`` as distractor candidates, up to
  10 of those that are not in the tree kept, and the lot shuffled with the same generator.
  AgentGym turns both lists into Python ``set`` objects before drawing from and shuffling them, so
  its order (and, past 10 candidates, its choice of distractors) depends on the string hash seed of
  its process and differs from one server start to the next; here the sets are iterated in sorted
  order, which makes the list reproducible. Lists of one command, and the goal line, always match.
* **Answers** use AgentGym's wording: ``Got 1 oak logs``, ``Crafted 4 minecraft:oak_planks``,
  ``Inventory: [oak planks] (4) ``, ``Could not find ...``; an episode goes on after the goal is
  crafted, as AgentGym's does.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import random
import re
from dataclasses import dataclass, field

from agentgym_env_textcraft.recipes import _recipes_dir

__all__ = ["AgentGymCraftingGame", "AgentGymRecipes", "agentgym_recipes", "item_name"]

_SHAPED, _SHAPELESS = "minecraft:crafting_shaped", "minecraft:crafting_shapeless"
_MAX_DISTRACTORS = 10
_SEED = 42  # AgentGym seeds Python's random module with 42 on every reset
_COUNTED = re.compile(r"([0-9]+) (.*)")
_CRAFT = re.compile(r"craft (.*) using (.*)")
_GET = re.compile(r"get ([0-9]+) (.*)")
_INVENTORY = re.compile(r"inventory")


def item_name(minecraft_id: str) -> str:
    """``minecraft:oak_planks`` -> ``oak planks``."""
    return minecraft_id.replace("minecraft:", "").replace("_", " ")


@dataclass
class _Part:
    """An ingredient or product: an item id, or a tag (a generic ingredient) when ``item`` is None."""

    item: str | None
    tag: str | None
    count: int

    @property
    def name(self) -> str:
        return self.item or self.tag or ""

    def __repr__(self) -> str:  # the wording AgentGym's "no valid recipe" message shows
        return f"ItemTagWithCount(item_tag=ItemTag(tag={self.tag!r}, item_id={self.item!r}), count={self.count!r})"


@dataclass
class _Recipe:
    inputs: list[_Part]
    output: _Part

    @property
    def command(self) -> str:
        parts = ", ".join(f"{p.count} {item_name(p.name)}" for p in self.inputs)
        return f"craft {self.output.count} {item_name(self.output.name)} using {parts}"


@dataclass(eq=False)  # identity hash: the per-goal cache keys on it
class AgentGymRecipes:
    """AgentGym's crafting table, built from the recipe files in a given order."""

    by_item: dict[str, list[_Recipe]] = field(default_factory=dict)
    by_tag: dict[str, list[_Recipe]] = field(default_factory=dict)
    items: set[str] = field(default_factory=set)
    tags: set[str] = field(default_factory=set)
    item_tag: dict[str, str] = field(default_factory=dict)
    _depth: dict[str, int] = field(default_factory=dict)

    def add_file(self, data: dict, depends_on: dict[str, set[str]]) -> None:
        """Read one recipe document; ``depends_on`` carries the cycle check across files."""
        if data["type"] not in (_SHAPED, _SHAPELESS):
            return
        inputs = self._inputs(data)
        result = data["result"]
        output_id = result if isinstance(result, str) else result["item"]
        count = 1 if isinstance(result, str) else result.get("count") or 1
        self.items.add(output_id)
        if len(inputs) == 1 and inputs[0].name.endswith("_block"):
            return  # recipes that unpack a block are left out
        output_tag = f"minecraft:{data['group']}" if "group" in data else None
        if output_tag is not None and output_tag != output_id:
            self.tags.add(output_tag)
            self.item_tag[output_id] = output_tag
        recipe = _Recipe(inputs, _Part(output_id, output_tag, count))
        closure = depends_on.setdefault(output_id, set())
        if any(output_id in depends_on.get(p.name, ()) for p in inputs):
            return  # would close a dependency cycle: the file read later loses
        self.by_item.setdefault(output_id, []).append(recipe)
        for part in inputs:
            closure.add(part.name)
            closure.update(depends_on.get(part.name, ()))
        if output_tag is not None:
            self.by_tag.setdefault(output_tag, []).append(recipe)

    def _inputs(self, data: dict) -> list[_Part]:
        parts: list[_Part] = []
        if data["type"] == _SHAPED:
            for key, spec in data["key"].items():
                spec = spec[0] if isinstance(spec, list) else spec
                count = sum(line.count(key) for line in data["pattern"])
                parts.append(self._part(spec, count))
            return parts
        index: dict[str, int] = {}
        for spec in data["ingredients"]:
            spec = spec[0] if isinstance(spec, list) else spec
            part = self._part(spec, 1)
            if part.name in index:
                parts[index[part.name]].count += 1
            else:
                index[part.name] = len(parts)
                parts.append(part)
        return parts

    def _part(self, spec: dict, count: int) -> _Part:
        if "item" in spec:
            self.items.add(spec["item"])
            return _Part(spec["item"], None, count)
        self.tags.add(spec["tag"])
        return _Part(None, spec["tag"], count)

    def demote_dead_tags(self) -> None:
        """A tag ingredient that no craftable item belongs to becomes a plain item."""
        dead = set()
        for recipes in self.by_item.values():
            for recipe in recipes:
                for part in recipe.inputs:
                    if part.item is None and not any(
                            item in self.by_item for item, tag in self.item_tag.items() if tag == part.tag):
                        dead.add(part.tag)
                        part.item, part.tag = part.tag, None
        self.items |= dead
        self.tags -= dead

    # -- tasks -------------------------------------------------------------------------------
    def depth(self, name: str, path: frozenset[str] = frozenset()) -> int:
        """Minimum crafting depth (0 for an item no recipe makes)."""
        if name not in self._depth:
            recipes = self.by_item.get(name) or self.by_tag.get(name)
            if not recipes or name in path:
                return 0
            inner = path | {name}
            self._depth[name] = min(max(self.depth(p.name, inner) + 1 for p in r.inputs) for r in recipes)
        return self._depth[name]

    @functools.cached_property
    def goals(self) -> tuple[str, ...]:
        """Goal item ids in ``data_idx`` order: depth >= 1, stably sorted by depth."""
        found = [(item, self.depth(item)) for item in self.by_item if self.depth(item) >= 1]
        return tuple(item for item, _ in sorted(found, key=lambda pair: pair[1]))

    def is_craftable(self, name: str) -> bool:
        return name in self.by_item or name in self.by_tag

    def _tree(self, name: str, visited: frozenset[str]) -> list[_Recipe]:
        if name in visited:
            return []
        recipes = self.by_item.get(name) or self.by_tag.get(name) or []
        found = list(recipes)
        for recipe in recipes:
            for part in recipe.inputs:
                found += self._tree(part.name, visited | {name})
        return found

    @functools.cached_property
    def _uses(self) -> dict[str, list[_Recipe]]:
        uses: dict[str, list[_Recipe]] = {}
        for table in (self.by_item, self.by_tag):
            for recipes in table.values():
                for recipe in recipes:
                    for part in recipe.inputs:
                        uses.setdefault(part.name, []).append(recipe)
        return uses

    def needed_commands(self, goal: str) -> frozenset[str]:
        """The commands of `goal`'s recipe tree: every list for `goal` shows all of them."""
        return frozenset(r.command for r in self._tree(goal, frozenset()))

    def distractor_candidates(self, goal: str) -> frozenset[str]:
        """Every command AgentGym could draw as a distractor for `goal`, whatever its hash seed."""
        tree = self._tree(goal, frozenset())
        uses = self._uses
        return frozenset(r.command for recipe in tree for part in recipe.inputs
                         for r in uses.get(part.name, ())) - self.needed_commands(goal)

    @functools.lru_cache(maxsize=1024)  # noqa: B019 - one table per process
    def commands(self, goal: str) -> tuple[str, ...]:
        """The crafting commands AgentGym lists for `goal` (sets iterated in sorted order)."""
        rng = random.Random(_SEED)
        tree = self._tree(goal, frozenset())
        candidates = []
        for recipe in tree:
            for part in recipe.inputs:
                uses = self._uses.get(part.name)
                if uses:
                    candidates += rng.sample(uses, min(len(uses), _MAX_DISTRACTORS))
        needed = sorted({r.command for r in tree})
        distractors = sorted({r.command for r in candidates} - set(needed))
        listed = needed + rng.sample(distractors, min(len(distractors), _MAX_DISTRACTORS))
        rng.shuffle(listed)
        return tuple(listed)

    def first_observation(self, goal: str) -> str:
        return "Crafting commands:\n{}\n\nGoal: craft {}.".format("\n".join(self.commands(goal)), item_name(goal))

    def part_named(self, name: str, count: int) -> _Part:
        minecraft_id = "minecraft:" + name.replace(" ", "_")
        return _Part(None, minecraft_id, count) if minecraft_id in self.tags else _Part(minecraft_id, None, count)

    def craft(self, given: list[_Part], output: _Part) -> _Part | None:
        """The product of the first recipe of `output` whose ingredients are exactly `given`."""
        for recipe in self.by_item.get(output.item or "", ()):
            left = list(given)
            for wanted in recipe.inputs:
                match = next((p for p in left if self._fits(p, wanted)), None)
                if match is None or match.count != wanted.count:
                    break
                left.remove(match)
            else:
                if not left:
                    return recipe.output
        return None

    def _fits(self, part: _Part, wanted: _Part) -> bool:
        if wanted.item is not None:
            return part.item == wanted.item
        return wanted.tag is not None and (part.tag == wanted.tag or self.item_tag.get(part.item or "") == wanted.tag)


def _recipe_order() -> list[str]:
    text = importlib.resources.files("agentgym_env_textcraft").joinpath("agentgym_recipe_order.txt").read_text()
    return [line for line in text.splitlines() if line]


@functools.cache
def agentgym_recipes() -> AgentGymRecipes:
    """AgentGym's table as its recorded server built it (recipe files in its directory order)."""
    root = _recipes_dir()
    table = AgentGymRecipes()
    depends_on: dict[str, set[str]] = {}
    for name in _recipe_order():
        table.add_file(json.loads(root.joinpath(f"{name}.json").read_text(encoding="utf-8")), depends_on)
    table.demote_dead_tags()
    return table


class _Failed(Exception):
    pass


class AgentGymCraftingGame:
    """One episode's inventory, answering actions in AgentGym's words."""

    def __init__(self, table: AgentGymRecipes, goal: str) -> None:
        self.table, self.goal = table, goal
        self.inventory: dict[str, int] = {}
        self.refused = False  # the last action failed (AgentGym's "Could not ..." answers)

    def step(self, action: str) -> tuple[str, int, bool]:
        """(observation, reward, goal reached) for one action; ``refused`` then says whether it failed."""
        self.refused = False
        try:
            for pattern, handler in ((_CRAFT, self._craft), (_GET, self._get), (_INVENTORY, self._inventory)):
                match = pattern.match(action)
                if match:
                    return handler(match)
            raise _Failed(f"Could not execute {action}")
        except _Failed as failure:
            self.refused = True
            return str(failure), 0, False

    def _craft(self, match: re.Match[str]) -> tuple[str, int, bool]:
        counted = _COUNTED.match(match.group(1))
        output = self.table.part_named(counted.group(2), int(counted.group(1))) if counted else \
            self.table.part_named(match.group(1), 1)
        given = []
        for text in match.group(2).split(","):
            part = _COUNTED.match(text.strip())
            if part is None:
                raise _Failed(f"Wrong item format: {text.strip()}")
            given.append(self.table.part_named(part.group(2), int(part.group(1))))
        if any(p.item not in self.inventory or self.inventory[p.item] < p.count for p in given):
            raise _Failed(f"Could not find enough items to craft {output.item}")
        product = self.table.craft(given, output)
        if product is None:
            raise _Failed(f"Could not find a valid recipe for {output!r}")
        for part in given:
            self.inventory[part.item] -= part.count  # type: ignore[index]
            if self.inventory[part.item] == 0:  # type: ignore[index]
                del self.inventory[part.item]  # type: ignore[arg-type]
        self.inventory[product.item] = self.inventory.get(product.item, 0) + product.count  # type: ignore[index]
        reached = product.item == self.goal
        return f"Crafted {product.count} {product.item}", int(reached), reached

    def _get(self, match: re.Match[str]) -> tuple[str, int, bool]:
        count, name = int(match.group(1)), match.group(2)
        part = self.table.part_named(name, count)
        if self.table.is_craftable(part.name) or part.item is None or part.item not in self.table.items:
            raise _Failed(f"Could not find {name}")
        self.inventory[part.item] = self.inventory.get(part.item, 0) + count
        reached = part.item == self.goal
        return f"Got {count} {name}", int(reached), reached

    def _inventory(self, _: re.Match[str]) -> tuple[str, int, bool]:
        if not self.inventory:
            return "Inventory: You are not carrying anything.", 0, False
        return "Inventory: " + "".join(f"[{item_name(i)}] ({n}) " for i, n in self.inventory.items()), 0, False
