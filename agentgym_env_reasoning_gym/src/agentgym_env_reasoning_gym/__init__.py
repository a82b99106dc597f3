"""reasoning-gym's generators as an agentgym environment (``reasoning_gym``), scored by their own scorers."""

from agentgym_env_reasoning_gym.env import (
    LEVELS,
    TEST_ITEMS,
    TRAIN_ITEMS,
    ReasoningGymEnv,
    entry,
    gold_answer,
    task_id_of,
)
from agentgym_env_reasoning_gym.expert import play_gold_answer

__all__ = [
    "LEVELS",
    "TEST_ITEMS",
    "TRAIN_ITEMS",
    "ReasoningGymEnv",
    "entry",
    "gold_answer",
    "play_gold_answer",
    "task_id_of",
]
