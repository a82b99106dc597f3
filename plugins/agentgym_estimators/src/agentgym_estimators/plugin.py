"""Registers the estimators with agentgym (entry point ``estimators``)."""

from __future__ import annotations

from agentgym_core import hookimpl
from agentgym_estimators.gae import gae
from agentgym_estimators.gigpo import gigpo
from agentgym_estimators.grpo import grpo
from agentgym_estimators.reinforce_pp import reinforce_pp
from agentgym_estimators.rloo import rloo


@hookimpl
def agentgym_register_advantage_estimators(register) -> None:
    register("gae", gae, summary="PPO's GAE with a critic, over policy tokens only.")
    register("grpo", grpo, summary="Group-normalised outcome advantages (norm_by_std=False: Dr. GRPO).")
    register("rloo", rloo, summary="Leave-one-out baseline over the samples of a task.")
    register("gigpo", gigpo, summary="GRPO per episode plus a step-level advantage among turns taken in the same state.")
    register("reinforce_pp", reinforce_pp, summary="Discounted token returns, whitened over the batch.")
