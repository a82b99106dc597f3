"""A hand-laid multi-turn batch: prompt, two policy turns with an observation between, padding."""

from __future__ import annotations

import pytest
import torch

from agentgym_core.rl import AdvantageBatch, place_rewards


@pytest.fixture
def multi_turn_batch() -> AdvantageBatch:
    # Row 0: index 0-1 prompt, 2-3 turn 1, 4-5 observation, 6-8 turn 2, 9 padding.
    # Rows 1-2: the same task sampled again (group 0); row 3 a second task alone (group 1).
    mask = torch.tensor([
        [0, 0, 1, 1, 0, 0, 1, 1, 1, 0],
        [0, 0, 1, 0, 0, 1, 1, 0, 0, 0],
        [0, 0, 1, 1, 1, 0, 0, 0, 0, 0],
        [0, 0, 1, 1, 0, 1, 0, 0, 0, 0],
    ], dtype=torch.bool)
    # Turn reward 0.5 on row 0's first turn; outcomes 1.0, 0.0, 1.0, 1.0.
    rewards = place_rewards(mask, [1.0, 0.0, 1.0, 1.0], [[0.5, 0.0], [0.0, 0.0], [0.0], [0.0, 0.0]])
    values = torch.zeros(mask.shape)
    values[0, [2, 3, 6, 7, 8]] = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5])
    return AdvantageBatch(token_rewards=rewards, response_mask=mask, group_ids=torch.tensor([7, 7, 7, 3]),
                          values=values)
