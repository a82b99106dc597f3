"""Registers the estimators with agentgym (entry point ``estimators``).

By reference: the estimators (and torch) are imported when a run first uses one, not when a
command lists what is installed or an env server looks for its env.
"""

from __future__ import annotations

from agentgym_core import hookimpl


@hookimpl
def agentgym_register_advantage_estimators(register) -> None:
    register("gae", "agentgym_estimators.gae:gae", critic=True,  # reads the critic's values
             summary="PPO's GAE with a critic, over policy tokens only.")
    # min_group_size=2: the baseline is the rest of the group, so one sample per task trains nothing
    register("grpo", "agentgym_estimators.grpo:grpo", min_group_size=2,
             summary="Group-normalised outcome advantages (norm_by_std=False: Dr. GRPO).")
    register("rloo", "agentgym_estimators.rloo:rloo", min_group_size=2, summary="Leave-one-out baseline over the samples of a task.")
    register("gigpo", "agentgym_estimators.gigpo:gigpo", min_group_size=2,  # both levels compare samples of a task
             options="agentgym_estimators.gigpo:GiGPOOptions",
             summary="GRPO per episode plus a step-level advantage among turns taken in the same state.")
    register("reinforce_pp", "agentgym_estimators.reinforce_pp:reinforce_pp",
             summary="Discounted token returns, whitened over the batch.")
