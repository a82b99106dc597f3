"""Generalized Advantage Estimation with a critic, over policy tokens only (PPO).

Formula (Schulman et al. 2016, "High-Dimensional Continuous Control Using GAE"), where t runs over
the tokens the policy sampled and t' is the next *policy* token after t in the same row::

    delta_t = r_t + gamma * V(t') - V(t)          (V(t') = 0 after the last policy token)
    A_t     = delta_t + gamma * lam * A_{t'}
    R_t     = A_t + V(t)                           (the critic's target)

Departures from the paper and from common LLM implementations:

* Environment and prompt tokens are not steps. Values and TD errors exist only on policy tokens;
  the last token of a turn bootstraps from the value at the first token of the *next* turn, across
  the observation in between. (Running GAE over every token with a loss mask, as the anchor does,
  mixes in values of environment tokens the critic never trains on.)
* Rewards sit on policy tokens (the outcome on the last sampled token), so none is masked away.
* A trajectory cut by the turn horizon bootstraps 0, like a terminal one: the next state was never
  shown to the critic.
* Optionally (``config.whiten``) advantages are whitened over the batch's policy tokens, as PPO
  implementations for LLMs usually do; the returns are not.
"""

from __future__ import annotations

import torch

from agentgym_core.rl.estimator_api import AdvantageBatch, AdvantageConfig, AdvantageOutput
from agentgym_estimators._scan import masked_whiten

__all__ = ["gae"]


def gae(batch: AdvantageBatch, config: AdvantageConfig) -> AdvantageOutput:
    """GAE advantages and value targets; needs ``batch.values`` (a critic)."""
    if batch.values is None:
        raise ValueError(
            "the 'gae' estimator needs critic values (batch.values) but got None. "
            "Enable the critic (algorithm.critic.enabled: true) or pick a critic-free estimator "
            "such as 'grpo', 'rloo' or 'reinforce_pp'."
        )
    rewards = batch.token_rewards  # (B, T)
    values = batch.values.to(rewards.dtype) * batch.mask  # (B, T)
    mask = batch.mask > 0  # (B, T)
    gamma, lam = config.gamma, config.lam

    advantages = torch.zeros_like(rewards)  # (B, T)
    next_value = torch.zeros_like(rewards[:, 0])  # (B,) V(t') of the next policy token
    next_adv = torch.zeros_like(rewards[:, 0])  # (B,) A_{t'}
    for t in range(rewards.shape[1] - 1, -1, -1):
        m = mask[:, t]  # (B,)
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # (B,)
        adv_t = delta + gamma * lam * next_adv  # (B,)
        advantages[:, t] = torch.where(m, adv_t, torch.zeros_like(adv_t))
        # Environment tokens leave the carried state untouched: that is the bootstrap across spans.
        next_value = torch.where(m, values[:, t], next_value)
        next_adv = torch.where(m, adv_t, next_adv)

    returns = (advantages + values) * batch.mask  # (B, T)
    if config.whiten:
        advantages = masked_whiten(advantages, batch.mask, config.eps)
    return AdvantageOutput(advantages=advantages, returns=returns)
