"""agentgym-env-sciworld: the ScienceWorld simulator as an agentgym environment plugin."""

from agentgym_env_sciworld.actions import ACTION_TEMPLATES, INSTRUCTION
from agentgym_env_sciworld.catalog import (
    EXCLUDED_FAMILIES,
    Family,
    SciWorldTask,
    families,
    task,
    task_catalog,
)
from agentgym_env_sciworld.config import SciWorldConfig
from agentgym_env_sciworld.env import SciWorldEnv
from agentgym_env_sciworld.expert import ExpertEpisode, GoldPathExpert
from agentgym_env_sciworld.simulator import POOL, Simulator, SimulatorDiedError, SimulatorPool

__all__ = [
    "ACTION_TEMPLATES",
    "EXCLUDED_FAMILIES",
    "INSTRUCTION",
    "POOL",
    "ExpertEpisode",
    "Family",
    "GoldPathExpert",
    "SciWorldConfig",
    "SciWorldEnv",
    "SciWorldTask",
    "Simulator",
    "SimulatorDiedError",
    "SimulatorPool",
    "families",
    "task",
    "task_catalog",
]
