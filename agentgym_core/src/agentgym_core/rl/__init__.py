"""The RL trainer: estimator contract, losses, config, the training loop, checkpoints, logging."""

from agentgym_core.rl.checks import EstimatorCheckError, check_estimator
from agentgym_core.rl.estimator_api import AdvantageBatch, AdvantageConfig, AdvantageOutput, Estimator
from agentgym_core.rl.rewards import place_rewards, policy_spans

__all__ = [
    "AdvantageBatch",
    "AdvantageConfig",
    "AdvantageOutput",
    "Estimator",
    "EstimatorCheckError",
    "check_estimator",
    "place_rewards",
    "policy_spans",
]
