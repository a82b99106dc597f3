"""Registers the estimators with agentgym (entry point ``estimators``).

By reference: the estimators (and torch) are imported when a run first uses one, not when a
command lists what is installed or an env server looks for its env.
"""

from __future__ import annotations

from agentgym_core import hookimpl


@hookimpl
def agentgym_register_advantage_estimators(register) -> None:
    register("gae", "agentgym_estimators.gae:gae", summary="PPO's GAE with a critic, over policy tokens only.")
    register("grpo", "agentgym_estimators.grpo:grpo",
             summary="Group-normalised outcome advantages (norm_by_std=False: Dr. GRPO).")
    register("rloo", "agentgym_estimators.rloo:rloo", summary="Leave-one-out baseline over the samples of a task.")
    register("gigpo", "agentgym_estimators.gigpo:gigpo",
             summary="GRPO per episode plus a step-level advantage among turns taken in the same state.")
    register("reinforce_pp", "agentgym_estimators.reinforce_pp:reinforce_pp",
             summary="Discounted token returns, whitened over the batch.")
