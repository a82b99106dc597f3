"""The plugin module named by the `agentgym` entry point: it registers the environment."""

from agentgym_core import hookimpl


@hookimpl
def agentgym_register_envs(register):
    from agentgym_env_guess.env import GuessEnv

    register("guess", GuessEnv, summary="Find a secret number between 1 and 100 from higher/lower hints.")
