"""agentgym-env-sciworld: the ScienceWorld simulator as an agentgym environment plugin."""

from agentgym_core.plugins import lazy_exports

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

# Loaded on first use, so that importing the plugin module (for `agentgym plugins`, or a server of
# another env) does not import this package's dependencies.
lazy_exports(__name__, {
    "ACTION_TEMPLATES": "agentgym_env_sciworld.actions",
    "EXCLUDED_FAMILIES": "agentgym_env_sciworld.catalog",
    "INSTRUCTION": "agentgym_env_sciworld.actions",
    "POOL": "agentgym_env_sciworld.simulator",
    "ExpertEpisode": "agentgym_env_sciworld.expert",
    "Family": "agentgym_env_sciworld.catalog",
    "GoldPathExpert": "agentgym_env_sciworld.expert",
    "SciWorldConfig": "agentgym_env_sciworld.config",
    "SciWorldEnv": "agentgym_env_sciworld.env",
    "SciWorldTask": "agentgym_env_sciworld.catalog",
    "Simulator": "agentgym_env_sciworld.simulator",
    "SimulatorDiedError": "agentgym_env_sciworld.simulator",
    "SimulatorPool": "agentgym_env_sciworld.simulator",
    "families": "agentgym_env_sciworld.catalog",
    "task": "agentgym_env_sciworld.catalog",
    "task_catalog": "agentgym_env_sciworld.catalog",
})
