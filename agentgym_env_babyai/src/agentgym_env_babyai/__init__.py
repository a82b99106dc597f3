"""BabyAI for agentgym: minigrid levels as text, with AgentGym's macro actions and an expert."""

from agentgym_env_babyai.env import BabyAIConfig, BabyAIEnv, normalize_action
from agentgym_env_babyai.expert import ExpertDesyncError, ExpertPolicy, ExpertResult, solve
from agentgym_env_babyai.levels import HELDOUT_IDS, LEVELS, TEST_IDS, TRAIN_IDS, task_level_seed

__all__ = [
    "HELDOUT_IDS",
    "LEVELS",
    "TEST_IDS",
    "TRAIN_IDS",
    "BabyAIConfig",
    "BabyAIEnv",
    "ExpertDesyncError",
    "ExpertPolicy",
    "ExpertResult",
    "normalize_action",
    "solve",
    "task_level_seed",
]
