"""Helpers shared by the estimators: scans over policy tokens only, and group statistics."""

from __future__ import annotations

import torch


def discounted_returns_over_policy_tokens(
    token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float
) -> torch.Tensor:
    """G_t = r_t + gamma * G_{t'} where t' is the next *policy* token of the row (0 after the last).

    Environment and prompt tokens are skipped, not counted as steps: the discount is per sampled
    token, so a long observation does not shrink the reward that follows it.
    """
    # token_rewards, mask: (B, T)
    returns = torch.zeros_like(token_rewards)  # (B, T)
    running = torch.zeros_like(token_rewards[:, 0])  # (B,)
    for t in range(token_rewards.shape[1] - 1, -1, -1):
        m = mask[:, t] > 0  # (B,)
        g = token_rewards[:, t] + gamma * running  # (B,)
        returns[:, t] = torch.where(m, g, torch.zeros_like(g))
        running = torch.where(m, g, running)
    return returns


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
    """(x - mean) / (std + eps) over the masked entries of the whole batch; 0 off the mask."""
    # x, mask: (B, T)
    m = mask > 0
    n = m.sum().clamp(min=1)
    mean = (x * m).sum() / n
    var = (((x - mean) * m) ** 2).sum() / n
    return (x - mean) / (var.sqrt() + eps) * m


def sequence_scores(token_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) total reward of each trajectory (outcome plus per-turn rewards)."""
    return (token_rewards * (mask > 0)).sum(dim=1)


def group_sum_count(scores: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row sum of scores in the row's group and the group's size, both (B,)."""
    _, inverse = torch.unique(group_ids, return_inverse=True)  # (B,)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    sums = scores.new_zeros(n_groups).index_add_(0, inverse, scores)  # on the scores' device (the learner's)
    counts = scores.new_zeros(n_groups).index_add_(0, inverse, torch.ones_like(scores))
    return sums[inverse], counts[inverse]
