"""BabyAI for agentgym: minigrid levels as text, with AgentGym's macro actions and an expert."""

from agentgym_core.plugins import lazy_exports

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

# Loaded on first use, so that importing the plugin module (for `agentgym plugins`, or a server of
# another env) does not import this package's dependencies.
lazy_exports(__name__, {
    "HELDOUT_IDS": "agentgym_env_babyai.levels",
    "LEVELS": "agentgym_env_babyai.levels",
    "TEST_IDS": "agentgym_env_babyai.levels",
    "TRAIN_IDS": "agentgym_env_babyai.levels",
    "BabyAIConfig": "agentgym_env_babyai.env",
    "BabyAIEnv": "agentgym_env_babyai.env",
    "ExpertDesyncError": "agentgym_env_babyai.expert",
    "ExpertPolicy": "agentgym_env_babyai.expert",
    "ExpertResult": "agentgym_env_babyai.expert",
    "normalize_action": "agentgym_env_babyai.env",
    "solve": "agentgym_env_babyai.expert",
    "task_level_seed": "agentgym_env_babyai.levels",
})
