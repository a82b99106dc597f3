"""agentgym advantage estimators: pure functions ``estimate(batch, config) -> AdvantageOutput``."""

from agentgym_core.plugins import lazy_exports

__all__ = ["gae", "gigpo", "grpo", "reinforce_pp", "rloo"]

# Loaded on first use, so that importing the plugin module (for `agentgym plugins`, or a server of
# another env) does not import this package's dependencies.
lazy_exports(__name__, {
    "gae": "agentgym_estimators.gae",
    "gigpo": "agentgym_estimators.gigpo",
    "grpo": "agentgym_estimators.grpo",
    "reinforce_pp": "agentgym_estimators.reinforce_pp",
    "rloo": "agentgym_estimators.rloo",
})
