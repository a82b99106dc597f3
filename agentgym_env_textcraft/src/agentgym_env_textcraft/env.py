"""The TextCraft environment: craft a Minecraft item from raw materials using listed recipes.

The first observation lists crafting commands (the goal's whole recipe tree plus up to
``max_distractors`` recipes that use the same ingredients for something else), shuffled, then the
goal::

    Crafting commands:
    craft 4 stick using 2 planks
    craft 3 dark oak sign using 6 dark oak planks, 1 stick
    ...

    Goal: craft dark oak sign.

Reward is 1 (and ``success``) on the step that puts the goal item in the inventory; the episode
is truncated with ``success=False`` after ``max_steps`` actions. With ``intermediate_reward: r``
the first craft of each ingredient in the goal's recipe tree also pays ``r`` (partial credit: two
failed episodes that got to different depths of the tree score differently, so a GRPO group in
which every episode fails can still carry a signal); success is still the goal alone. A generic
ingredient (``planks`` for a stick) pays once, for whichever kind is crafted first, so crafting
every kind of planks earns no more than crafting one.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentgym_core import Env, EnvError, EpisodeEndedError, ResetResult, StepResult, TaskCatalog
from agentgym_core.http.compat_spec import AgentGymCompat
from agentgym_env_textcraft.actions import Craft, Get, InvalidAction, Inventory, parse_action
from agentgym_env_textcraft.game import CraftingGame
from agentgym_env_textcraft.recipes import RecipeBook, load_recipe_book
from agentgym_env_textcraft.tasks import Goal, goal_of, task_catalog

__all__ = ["INSTRUCTION", "TextCraftConfig", "TextCraftEnv", "ingredient_slots"]

INSTRUCTION = """\
You are crafting items in Minecraft. The first message lists crafting commands of the form \
"craft <count> <target> using <count> <ingredient>, <count> <ingredient>, ..." and ends with your goal.
Each turn, reply with your reasoning and then exactly one action, in this format:
Thought: <your reasoning>
Action: <one action>

Actions:
- get <count> <item>: take raw materials (items no crafting command makes), e.g. get 1 oak logs
- craft <count> <item> using <count> <item>, ...: run one crafting command with exactly the \
ingredient counts it lists; each craft makes one batch, e.g. craft 4 oak planks using 1 oak logs
- inventory: list what you are carrying

Notes:
- Always write the counts. Use only the crafting commands you were given.
- A generic ingredient such as "planks" can be supplied by any specific kind, e.g. "oak planks", \
but all of it must be the same kind.
- You succeed as soon as the goal item is in your inventory."""


class TextCraftConfig(BaseModel):
    """Options of :class:`TextCraftEnv` (pass them as keyword arguments)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int = Field(
        default=50,
        ge=1,
        description="Actions per episode before it is truncated (the scripted expert needs at most 48).",
    )
    max_distractors: int = Field(
        default=10,
        ge=0,
        description="Extra crafting commands, not needed for the goal, mixed into the list (AgentGym: 10).",
    )
    intermediate_reward: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Reward for the first craft, in an episode, of each ingredient the goal's recipe tree needs on "
        "the way (a generic one such as planks once, whichever kind; not the goal, which pays 1): partial credit for "
        "failed episodes that got further. 0 (the default): only the goal pays, as in AgentGym's TextCraft. Success "
        "is the goal alone either way.",
    )


def ingredient_slots(book: RecipeBook, goal: str) -> dict[str, str]:
    """Each craftable item on the way to ``goal`` -> the ingredient it supplies in the goal's recipe tree:
    itself where a recipe of the tree names it, else the generic ingredient (tag) it is a kind of."""
    tree = book.recipe_tree(goal)
    named = {ing.name for recipe in tree for ing in recipe.inputs if not ing.is_tag}
    slots = {name: name for name in named if name in book.item_recipes}
    for recipe in tree:
        for ing in recipe.inputs:
            if ing.is_tag:
                for member in book.recipes_for(ing.name):
                    slots.setdefault(member.output, ing.name)
    slots.pop(goal, None)
    return slots


class TextCraftEnv(Env):
    """TextCraft as an agentgym environment (in-process; serve it with ``agentgym serve textcraft``)."""

    name: ClassVar[str] = "textcraft"
    max_episode_steps: ClassVar[int | None] = TextCraftConfig.model_fields["max_steps"].default
    # AgentGym's TextCraft server: {"id", "data_idx"} / {"id", "action"}; answers carry
    # observation, reward and done but no score.
    # AgentGym's TextCraft /create resets the new instance onto task index = its id and answers
    # the first observation; its indices wrap modulo the number of goals.
    # Steps take microseconds: the server calls them on its event loop, not in worker threads.
    inline_calls: ClassVar[bool] = True
    # Its /reset (and /create) answer {"id", "observation", "done", "reward"}, /close a bare true.
    agentgym_compat: ClassVar[AgentGymCompat | None] = AgentGymCompat(
        include_score=False, create_resets=True, wrap_task_index=True, step_after_done=True,
        reset_fields=("id", "observation", "done", "reward"), close_answer="bool",
        env_class="agentgym_env_textcraft.personality:AgentGymTextCraftEnv",
    )

    def __init__(self, **options: Any) -> None:
        self.config = TextCraftConfig(**options)
        # The class attribute is the default; an instance reports the limit it was built with.
        self.max_episode_steps = self.config.max_steps  # type: ignore[misc]
        self._book = load_recipe_book()
        self._game: CraftingGame | None = None
        self._goal: Goal | None = None
        self._steps = 0
        self._done = False
        self._slots: dict[str, str] = {}  # craftable item -> the ingredient of the goal's tree it supplies
        self._unpaid: set[str] = set()  # ingredients whose first craft still pays intermediate_reward

    # -- what the agent is told -------------------------------------------------------------
    @property
    def instruction(self) -> str:
        return INSTRUCTION

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return task_catalog()

    # -- the episode ---------------------------------------------------------------------------
    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        """Start task `task_id`. The seed picks the distractors and the order of the commands
        (None means 0); the same (task_id, seed) always gives the same observation."""
        goal = goal_of(task_id)
        rng = random.Random(f"textcraft:{task_id}:{0 if seed is None else seed}")
        commands = list(dict.fromkeys(r.command for r in self._book.recipe_tree(goal.item)))
        pool = [r.command for r in self._book.distractor_pool(goal.item)]
        commands += rng.sample(pool, min(len(pool), self.config.max_distractors))
        rng.shuffle(commands)
        self._game = CraftingGame(self._book)
        self._goal = goal
        self._steps = 0
        self._done = False
        self._slots = ingredient_slots(self._book, goal.item) if self.config.intermediate_reward else {}
        self._unpaid = set(self._slots.values())
        observation = "Crafting commands:\n{}\n\nGoal: craft {}.".format("\n".join(commands), goal.item)
        info = {"task_id": task_id, "goal": goal.item, "depth": goal.depth, "category": goal.category,
                "state_key": self._game.state_key()}
        return ResetResult(observation=observation, info=info)

    def step(self, action: str) -> StepResult:
        if self._game is None or self._goal is None:
            raise EnvError("step() before reset(): call reset(task_id) to start an episode")
        if self._done:
            raise EpisodeEndedError("the episode has ended; call reset(task_id) to start another")
        self._steps += 1
        parsed = parse_action(action)
        if isinstance(parsed, InvalidAction):
            observation, valid, obtained = parsed.message, False, None
        elif isinstance(parsed, Inventory):
            observation, valid, obtained = self._game.inventory_text(), True, None
        else:
            outcome = self._game.get(parsed) if isinstance(parsed, Get) else self._game.craft(parsed)
            observation, valid, obtained = outcome.message, outcome.ok, outcome.obtained
        kind = "invalid" if isinstance(parsed, InvalidAction) else type(parsed).__name__.lower()
        success = obtained == self._goal.item
        truncated = not success and self._steps >= self.config.max_steps
        self._done = success or truncated
        partial = 0.0
        slot = self._slots.get(obtained) if isinstance(parsed, Craft) and obtained else None
        if slot in self._unpaid:
            self._unpaid.discard(slot)
            partial = self.config.intermediate_reward
        return StepResult(
            observation=observation,
            reward=1.0 if success else partial,
            terminated=success,
            truncated=truncated,
            success=True if success else (False if truncated else None),
            invalid_action=not valid,
            info={"steps": self._steps, "action": kind, "valid": valid, "state_key": self._game.state_key()},
        )

    def close(self) -> None:
        self._game = None
        self._goal = None
