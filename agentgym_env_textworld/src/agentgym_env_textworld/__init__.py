"""TextWorld's generated text adventures as an agentgym environment (``textworld``), walkthrough as expert."""

from agentgym_env_textworld.env import (
    QUEST_LENGTHS,
    TEST_TASKS,
    TRAIN_TASKS,
    TextWorldEnv,
    default_cache_dir,
    game_file,
)
from agentgym_env_textworld.expert import play_walkthrough

__all__ = [
    "QUEST_LENGTHS",
    "TEST_TASKS",
    "TRAIN_TASKS",
    "TextWorldEnv",
    "default_cache_dir",
    "game_file",
    "play_walkthrough",
]
