"""GRPO: group-relative outcome advantages (Shao et al. 2024, DeepSeekMath), and Dr. GRPO.

For trajectory i of a group G (samples of the same task), with score s_i = the sum of its rewards::

    A_i = (s_i - mean_{j in G} s_j) / (std_{j in G} s_j + eps)     (GRPO)
    A_i =  s_i - mean_{j in G} s_j                                 (Dr. GRPO, norm_by_std=False)

A_i is given to every policy token of trajectory i. ``std`` is the unbiased sample std, as in
the reference implementations. Departures: a group of one sample gets advantage 0 (there is no
baseline), so its registration's ``min_group_size=2`` makes the trainer refuse ``rollout.group_size: 1``;
per-turn rewards enter only through the score s_i (GRPO is an outcome-level estimator), so use ``reinforce_pp`` or ``gae`` to credit turns separately. Dr. GRPO (Liu et al. 2025) also
changes the loss aggregation; pick ``loss_agg: seq_mean_token_sum_norm`` in the policy loss for that.
"""

from __future__ import annotations

import torch

from agentgym_core.rl.estimator_api import AdvantageBatch, AdvantageConfig, AdvantageOutput
from agentgym_estimators._scan import group_sum_count, sequence_scores

__all__ = ["grpo"]


def grpo(batch: AdvantageBatch, config: AdvantageConfig) -> AdvantageOutput:
    """Group-normalised outcome advantages broadcast over each row's policy tokens."""
    mask = batch.mask  # (B, T)
    scores = sequence_scores(batch.token_rewards, mask)  # (B,)
    sums, counts = group_sum_count(scores, batch.group_ids)  # (B,), (B,)
    mean = sums / counts  # (B,)
    advantage = scores - mean  # (B,)
    if config.norm_by_std:
        sq_sums, _ = group_sum_count((scores - mean) ** 2, batch.group_ids)  # (B,)
        std = torch.sqrt(sq_sums / (counts - 1).clamp(min=1))  # (B,) unbiased
        advantage = advantage / (std + config.eps)
    advantage = torch.where(counts > 1, advantage, torch.zeros_like(advantage))
    advantages = advantage[:, None] * mask  # (B, T)
    return AdvantageOutput(advantages=advantages, returns=advantages.clone())


