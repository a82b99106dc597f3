"""TextArena's offline single-player games as one agentgym environment (``textarena``), a task family per game."""

from agentgym_env_textarena.env import GAMES, INSTANCES_PER_GAME, TEST_FROM, TextArenaEnv, task_id_of

__all__ = ["GAMES", "INSTANCES_PER_GAME", "TEST_FROM", "TextArenaEnv", "task_id_of"]
