"""The plugin module named by the `agentgym` entry point: what this package adds to agentgym.

Each hook registers things by name; imports happen inside the hooks, so loading the plugin costs
nothing until a catalog is asked for.
"""

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


@hookimpl
def agentgym_register_round_schedulers(register):
    from agentgym_env_guess.schedule import WarmupRoundsConfig, make_warmup

    register("guess_warmup", make_warmup, options=WarmupRoundsConfig,
             summary="A short turn budget for the first steps, then the full one (options: warmup_steps, warmup_rounds).")


@hookimpl
def agentgym_observe_run_start(run_dir, config):
    from agentgym_env_guess.observer import tally

    tally.start(run_dir, config)


@hookimpl
def agentgym_observe_rollout(step, trajectories):
    from agentgym_env_guess.observer import tally

    tally.add(step, trajectories)


@hookimpl
def agentgym_observe_run_end(run_dir):
    from agentgym_env_guess.observer import tally

    tally.finish(run_dir)
