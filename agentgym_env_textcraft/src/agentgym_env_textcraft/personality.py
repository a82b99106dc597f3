"""AgentGym's TextCraft server as an environment of its own: what the AgentGym compatibility routes play.

:class:`AgentGymTextCraftEnv` plays AgentGym's tasks as its server does: its task order (task i is its
``data_idx`` i), its command lists and wording, no step limit, and steps still answered after the goal
is crafted (the rules are in :mod:`agentgym_env_textcraft.agentgym_style`). ``TextCraftEnv.agentgym_compat``
names this class, so ``agentgym serve textcraft`` answers AgentGym's routes with it and its own routes
with the native environment.
"""

from __future__ import annotations

from typing import Any

from agentgym_core import EnvError, ResetResult, StepResult
from agentgym_env_textcraft.agentgym_style import AgentGymCraftingGame, agentgym_recipes, item_name
from agentgym_env_textcraft.env import TextCraftEnv
from agentgym_env_textcraft.game import CraftingGame
from agentgym_env_textcraft.tasks import goal_of

__all__ = ["AgentGymTextCraftEnv"]


class AgentGymTextCraftEnv(TextCraftEnv):
    """TextCraft as AgentGym's server plays it (see the module docstring). ``intermediate_reward`` is not part
    of that server and is refused; ``max_steps`` does not apply (it has no step limit)."""

    def __init__(self, **options: Any) -> None:
        if options.get("intermediate_reward"):
            raise ValueError("intermediate_reward is not part of AgentGym's TextCraft server, which "
                             "AgentGymTextCraftEnv reproduces: leave it 0 there")
        super().__init__(**options)
        self.max_episode_steps = None  # type: ignore[misc]
        self._agentgym: AgentGymCraftingGame | None = None

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        """Task ``task_id`` as AgentGym's server numbers and lists it (the seed changes nothing there)."""
        table = agentgym_recipes()
        item = table.goals[task_id]
        self._agentgym = AgentGymCraftingGame(table, item)
        self._game, self._goal, self._steps, self._done = CraftingGame(self._book), goal_of(task_id), 0, False
        depth = table.depth(item)
        info = {"task_id": task_id, "goal": item_name(item), "depth": depth, "category": f"depth{depth}"}
        return ResetResult(observation=table.first_observation(item), info=info)

    def step(self, action: str) -> StepResult:
        game = self._agentgym
        if game is None:
            raise EnvError("step() before reset(): call reset(task_id) to start an episode")
        self._steps += 1  # answered after the goal too, as AgentGym's server answers them
        observation, reward, reached = game.step(action)
        return StepResult(
            observation=observation,
            reward=float(reward),
            terminated=reached,
            truncated=False,
            success=True if reached else None,
            invalid_action=game.refused,
            info={"steps": self._steps, "action": action.split(" ", 1)[0]},
        )

    def close(self) -> None:
        super().close()
        self._agentgym = None
