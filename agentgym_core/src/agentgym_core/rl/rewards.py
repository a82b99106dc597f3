"""Where rewards go in a padded multi-turn row: always on tokens the policy sampled.

:func:`place_rewards` is the one placement function: the trainer's batch
(:func:`agentgym_core.rl.batch.build_batch`, each turn's reward at its ``reward_index``) and the
estimator checker both use it.

A row holds several policy turns separated by environment observations. A turn's own reward goes
on the last token of that turn; the outcome reward goes on the last token the policy sampled.
Putting a reward on an environment token (mask 0), as the anchor does, makes GAE and REINFORCE++
lose it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["place_rewards", "policy_spans"]


def policy_spans(response_mask_row: torch.Tensor) -> list[tuple[int, int]]:
    """[(start, end_exclusive), ...] of the contiguous runs of policy tokens in one (T,) row."""
    m = (response_mask_row > 0).to(torch.int8)
    edges = torch.diff(torch.cat([m.new_zeros(1), m, m.new_zeros(1)]))
    starts = torch.nonzero(edges == 1).flatten().tolist()
    ends = torch.nonzero(edges == -1).flatten().tolist()
    return list(zip(starts, ends, strict=True))


def place_rewards(
    response_mask: torch.Tensor,
    outcome_rewards: Sequence[float],
    turn_rewards: Sequence[Sequence[float]] | None = None,
    *,
    turn_ends: Sequence[Sequence[int]] | None = None,
) -> torch.Tensor:
    """(B, T) token rewards from outcome rewards (B,) and optional per-turn rewards [B][turns].

    ``turn_rewards[i][k]`` lands on the last token of row i's k-th policy span; the outcome reward
    is added on the row's last policy token. ``turn_ends[i]`` gives the index of each turn's last
    token; without it turns are the contiguous runs of the mask (an observation separates them). A row without policy tokens gets no reward (it was
    cut before the model spoke; nothing could be trained on it anyway).
    """
    # response_mask: (B, T)
    rewards = torch.zeros(response_mask.shape, dtype=torch.float32)  # (B, T)
    for i in range(response_mask.shape[0]):
        if turn_ends is not None:
            spans = [(e, e + 1) for e in turn_ends[i]]
        else:
            spans = policy_spans(response_mask[i])
        if not spans:
            continue
        if turn_rewards is not None:
            per_turn = list(turn_rewards[i])
            if len(per_turn) > len(spans):
                raise ValueError(
                    f"row {i} has {len(per_turn)} turn rewards but only {len(spans)} policy turns; "
                    "a turn whose tokens were cut by the length limit cannot carry a reward"
                )
            for (_, end), r in zip(spans, per_turn, strict=False):
                rewards[i, end - 1] += float(r)
        rewards[i, spans[-1][1] - 1] += float(outcome_rewards[i])
    return rewards
