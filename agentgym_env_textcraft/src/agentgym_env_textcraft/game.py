"""One TextCraft episode's state: the inventory, and what ``get`` and ``craft`` do to it.

Rules follow ADaPT's TextCraft so scores stay comparable with AgentGym: a craft action makes one
batch of the recipe (the recipe's output count, whatever count the agent wrote), ingredients must
match one recipe exactly (same items, same counts, nothing extra), a tag ingredient such as
``planks`` is satisfied by any member (``oak planks``), and only base items can be gathered.
Failure messages say what was wrong, where the original answered "Could not find ...".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from agentgym_env_textcraft.actions import Craft, Get
from agentgym_env_textcraft.recipes import Recipe, RecipeBook

__all__ = ["CraftingGame", "Outcome"]


@dataclass(frozen=True)
class Outcome:
    """What an action did: the text to show, whether it changed anything, and if so what."""

    message: str
    ok: bool
    obtained: str | None = None


class CraftingGame:
    """Inventory plus the crafting rules of one book. Cheap to create: one per episode."""

    def __init__(self, book: RecipeBook) -> None:
        self._book = book
        self.inventory: Counter[str] = Counter()

    def state_key(self) -> str:
        """The whole game state within a task: what is in the inventory, in a canonical order."""
        return ";".join(f"{item}={n}" for item, n in sorted(self.inventory.items()) if n) or "empty"

    def inventory_text(self) -> str:
        if not self.inventory:
            return "Inventory: You are not carrying anything."
        return "Inventory: " + " ".join(f"[{item}] ({n})" for item, n in self.inventory.items())

    def get(self, action: Get) -> Outcome:
        book, item = self._book, action.item
        if item in book.base_items:
            self.inventory[item] += action.count
            return Outcome(f"Got {action.count} {item}", True, item)
        if item in book.item_recipes:
            return Outcome(f"Could not get {item}: it is not a raw material; craft it instead.", False)
        if book.is_tag(item):
            example = book.tag_members[item][0]
            return Outcome(
                f"Could not get {item}: it is a generic ingredient; get or craft a specific kind, "
                f"e.g. {example}.",
                False,
            )
        return Outcome(f"Could not find {item}: there is no such item.", False)

    def craft(self, action: Craft) -> Outcome:
        book, output = self._book, action.output
        if book.is_tag(output):
            example = book.tag_members[output][0]
            return Outcome(f"Could not craft {output}: name a specific kind, e.g. {example}.", False)
        recipes = book.item_recipes.get(output)
        if recipes is None:
            why = (
                "it is a raw material; get it instead"
                if output in book.base_items
                else "there is no such item"
            )
            return Outcome(f"Could not craft {output}: {why}.", False)
        wanted: Counter[str] = Counter()
        for item, n in action.inputs:
            if book.is_tag(item):
                return Outcome(
                    f"Could not craft {output}: {item} is a generic ingredient; use a specific kind "
                    f"you have, e.g. {book.tag_members[item][0]}.",
                    False,
                )
            wanted[item] += n
        for item, n in wanted.items():
            if self.inventory[item] < n:
                return Outcome(
                    f"Could not craft {output}: you need {n} {item} but have {self.inventory[item]}.", False
                )
        recipe = next((r for r in recipes if self._matches(r, list(action.inputs))), None)
        if recipe is None:
            given = ", ".join(f"{n} {item}" for item, n in action.inputs)
            return Outcome(
                f"Could not craft {output} using {given}: no recipe takes exactly these ingredients. "
                "Use the counts of one crafting command.",
                False,
            )
        self.inventory.subtract(wanted)
        for item in wanted:
            if self.inventory[item] <= 0:
                del self.inventory[item]
        self.inventory[recipe.output] += recipe.count
        return Outcome(f"Crafted {recipe.count} {recipe.output}", True, recipe.output)

    def _matches(self, recipe: Recipe, given: list[tuple[str, int]]) -> bool:
        """Is there a one-to-one pairing of ingredients and given (item, count) with equal counts?"""
        if len(given) != len(recipe.inputs):
            return False

        def assign(i: int, free: list[tuple[str, int]]) -> bool:
            if i == len(recipe.inputs):
                return True
            ing = recipe.inputs[i]
            for j, (item, n) in enumerate(free):
                fits = item == ing.name or (ing.is_tag and self._book.item_tag.get(item) == ing.name)
                if fits and n == ing.count and assign(i + 1, free[:j] + free[j + 1 :]):
                    return True
            return False

        return assign(0, given)
