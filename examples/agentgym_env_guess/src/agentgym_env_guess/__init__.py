"""Guess the number: the smallest complete agentgym environment, as a template for your own."""

from agentgym_env_guess.env import GuessEnv

__all__ = ["GuessEnv"]
