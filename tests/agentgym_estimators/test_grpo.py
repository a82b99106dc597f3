import math

import torch

from agentgym_core.rl import AdvantageConfig, check_estimator
from agentgym_estimators import grpo


def test_grpo_hand_computed(multi_turn_batch):
    out = grpo(multi_turn_batch, AdvantageConfig())
    # Group 7 scores: row 0 = .5 + 1 = 1.5, row 1 = 0, row 2 = 1; mean 5/6; unbiased var 7/12.
    std = math.sqrt(7 / 12)
    for row, score in [(0, 1.5), (1, 0.0), (2, 1.0)]:
        m = multi_turn_batch.response_mask[row]
        assert torch.allclose(out.advantages[row, m], torch.tensor((score - 5 / 6) / std), atol=1e-5)
        assert (out.advantages[row, ~m] == 0).all()
    assert (out.advantages[3] == 0).all()  # a group of one has no baseline


def test_dr_grpo_skips_std(multi_turn_batch):
    out = grpo(multi_turn_batch, AdvantageConfig(norm_by_std=False))
    assert torch.allclose(out.advantages[0, 2], torch.tensor(1.5 - 5 / 6))
    assert torch.allclose(out.advantages[1, 2], torch.tensor(-5 / 6))


def test_grpo_conforms():
    check_estimator(grpo)
    check_estimator(grpo, AdvantageConfig(norm_by_std=False))
