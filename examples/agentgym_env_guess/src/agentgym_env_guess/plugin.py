"""The plugin module named by the `agentgym` entry point: it registers the environment."""

from agentgym_core import hookimpl
from agentgym_core.experts import ExpertSpec, lazy_player


@hookimpl
def agentgym_register_envs(register):
    from agentgym_env_guess.env import GuessEnv

    register("guess", GuessEnv, summary="Find a secret number between 1 and 100 from higher/lower hints.")


@hookimpl
def agentgym_register_experts(register):
    # A third-party environment ships its expert the same way: agentgym collect --env guess --policy expert
    register("guess", ExpertSpec(play=lazy_player("agentgym_env_guess.env", "solve")), summary="binary search")
