"""RLOO: REINFORCE with a leave-one-out baseline (Kool et al. 2019; Ahmadian et al. 2024).

For trajectory i of a group G of size n (samples of the same task), with score s_i = the sum of
its rewards::

    A_i = s_i - 1/(n-1) * sum_{j in G, j != i} s_j  =  n/(n-1) * (s_i - mean_G s)

A_i is given to every policy token of trajectory i. Departures: a group of one sample gets
advantage 0 (no other sample to form a baseline), so its registration's ``min_group_size=2`` makes the
trainer refuse ``rollout.group_size: 1``; per-turn rewards enter through the score only.
(The anchor's RLOO raises NotImplementedError.)
"""

from __future__ import annotations

import torch

from agentgym_core.rl.estimator_api import AdvantageBatch, AdvantageConfig, AdvantageOutput
from agentgym_estimators._scan import group_sum_count, sequence_scores

__all__ = ["rloo"]


def rloo(batch: AdvantageBatch, config: AdvantageConfig) -> AdvantageOutput:
    """Leave-one-out baselined outcome advantages broadcast over each row's policy tokens."""
    mask = batch.mask  # (B, T)
    scores = sequence_scores(batch.token_rewards, mask)  # (B,)
    sums, counts = group_sum_count(scores, batch.group_ids)  # (B,), (B,)
    baseline = (sums - scores) / (counts - 1).clamp(min=1)  # (B,) mean of the others
    advantage = torch.where(counts > 1, scores - baseline, torch.zeros_like(scores))  # (B,)
    advantages = advantage[:, None] * mask  # (B, T)
    return AdvantageOutput(advantages=advantages, returns=advantages.clone())


