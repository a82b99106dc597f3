"""agentgym advantage estimators: pure functions ``estimate(batch, config) -> AdvantageOutput``."""

from agentgym_estimators.gae import gae
from agentgym_estimators.gigpo import gigpo
from agentgym_estimators.grpo import grpo
from agentgym_estimators.reinforce_pp import reinforce_pp
from agentgym_estimators.rloo import rloo

__all__ = ["gae", "gigpo", "grpo", "reinforce_pp", "rloo"]
