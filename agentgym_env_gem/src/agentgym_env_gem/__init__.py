"""GEM's offline environments behind agentgym's ``Env`` (``gem``), through ``agentgym_core.text_gym``."""

from agentgym_env_gem.env import ENV_IDS, GAME_IDS, RG_IDS, GemEnv, task_id_of

__all__ = ["ENV_IDS", "GAME_IDS", "RG_IDS", "GemEnv", "task_id_of"]
