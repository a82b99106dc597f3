"""AgentGym's BabyAI server as an environment of its own: what the AgentGym compatibility routes play.

:class:`AgentGymBabyAIEnv` answers exactly as AgentGym's server does (its object numbering, wording,
goal text, macro planning and rewards; the rules are in :mod:`agentgym_env_babyai.agentgym_style`),
on the same tasks as :class:`~agentgym_env_babyai.env.BabyAIEnv`, without this package's verifier
repair. ``BabyAIEnv.agentgym_compat`` names this class, so ``agentgym serve babyai`` answers AgentGym's
routes with it and its own routes with the native environment.
"""

from __future__ import annotations

from typing import Any

from minigrid.minigrid_env import MiniGridEnv

from agentgym_core.env import EnvError, EpisodeEndedError, ResetResult, StepResult
from agentgym_env_babyai.agentgym_style import AgentGymEpisode, make_agentgym_level, reset_agentgym_level
from agentgym_env_babyai.env import BabyAIEnv
from agentgym_env_babyai.grid import grid_map
from agentgym_env_babyai.levels import task_level_seed

__all__ = ["AgentGymBabyAIEnv"]


class AgentGymBabyAIEnv(BabyAIEnv):
    """BabyAI as AgentGym's server plays it (see the module docstring); the same options as ``BabyAIEnv``
    (``repair_strict_order`` is ignored: AgentGym does not repair minigrid's verifier)."""

    def __init__(self, config: Any = None, **options: Any) -> None:
        super().__init__(config, **options)
        self._agentgym: AgentGymEpisode | None = None
        self._score = 0.0

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        level, level_seed = task_level_seed(task_id)
        if self._agentgym is not None:
            self._agentgym.game.close()
        game = make_agentgym_level(level)  # a fresh level each episode, as AgentGym's server builds it
        obs = reset_agentgym_level(game, level_seed)
        self._agentgym, self._score = AgentGymEpisode(game, obs), 0.0
        return self._started(task_id, seed, game, obs)

    def _first_observation(self, game: MiniGridEnv, obs: Any) -> str:
        return self._agentgym.observation(with_goal=True)  # type: ignore[union-attr]

    def step(self, action: str) -> StepResult:
        episode = self._agentgym
        if self._ended or episode is None:
            raise EpisodeEndedError(
                "no episode in progress: the last one ended (or none was started); call reset(task_id)"
            )
        self._turns += 1
        valid, primitives = episode.step(action)
        self._score += episode.reward  # AgentGym's score adds the answered reward at every step
        terminated = episode.done
        truncated = not terminated and self.config.max_turns is not None and self._turns >= self.config.max_turns
        self._ended = terminated or truncated
        game = episode.game
        info = {
            "action": action.lower().strip(),
            "action_valid": valid,
            "primitive_steps": primitives,
            "steps_used": game.step_count,
            "max_steps": game.max_steps,
            "turns": self._turns,
        }
        if self.config.grid_in_info:
            info["grid"] = grid_map(game)
        return StepResult(
            observation=episode.observation(),
            reward=episode.reward,
            terminated=terminated,
            truncated=truncated,
            success=True if terminated else (False if truncated else None),
            invalid_action=not valid,
            info=info,
        )

    def agentgym_status(self) -> dict[str, Any]:
        """What AgentGym's ``GET /observation`` answers: the goal and current text, the last reward, the score
        so far and the done flag."""
        episode = self._agentgym
        if episode is None:
            raise EnvError("no episode: reset(task_id) first")
        return {"observation": episode.observation(with_goal=True), "reward": episode.reward,
                "score": self._score, "done": episode.done, "deleted": False}

    def available_actions(self) -> list[str] | None:
        if self._ended or self._agentgym is None:
            return []
        return list(self._agentgym.view.actions)

    def close(self) -> None:
        if self._agentgym is not None:
            self._agentgym.game.close()
        super().close()
        self._agentgym = None
