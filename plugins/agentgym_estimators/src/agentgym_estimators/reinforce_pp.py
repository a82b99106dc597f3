"""REINFORCE++: discounted token-level returns, whitened over the batch (Hu 2025, arXiv 2501.03262).

With t running over the policy tokens of a row and t' the next policy token after t::

    G_t = r_t + gamma * G_{t'}                       (G = 0 after the last policy token)
    A_t = (G_t - mean(G)) / (std(G) + eps)           (mean/std over all policy tokens of the batch)

The per-token KL penalty of REINFORCE++ is added to ``token_rewards`` by the trainer when
``kl.in_reward`` is on, so it enters G_t here. Departures: environment tokens are not steps (the
discount counts sampled tokens only), and every reward sits on a policy token, so the outcome
reward is never masked away (the anchor places it on an environment token and loses it).
``whiten: false`` returns the raw returns as advantages.
"""

from __future__ import annotations

from agentgym_core.rl.estimator_api import AdvantageBatch, AdvantageConfig, AdvantageOutput
from agentgym_estimators._scan import discounted_returns_over_policy_tokens, masked_whiten

__all__ = ["reinforce_pp"]


def reinforce_pp(batch: AdvantageBatch, config: AdvantageConfig) -> AdvantageOutput:
    """Discounted returns over policy tokens, whitened over the batch."""
    mask = batch.mask  # (B, T)
    returns = discounted_returns_over_policy_tokens(batch.token_rewards, mask, config.gamma)  # (B, T)
    advantages = masked_whiten(returns, mask, config.eps) if config.whiten else returns.clone()
    return AdvantageOutput(advantages=advantages, returns=returns)
