import torch

from agentgym_core.rl import check_estimator
from agentgym_estimators import rloo


def test_rloo_hand_computed(multi_turn_batch):
    from agentgym_core.rl import AdvantageConfig

    out = rloo(multi_turn_batch, AdvantageConfig())
    # Scores 1.5, 0, 1 in one group: A_i = s_i - mean of the other two.
    for row, expected in [(0, 1.5 - 0.5), (1, 0.0 - 1.25), (2, 1.0 - 0.75)]:
        m = multi_turn_batch.response_mask[row]
        assert torch.allclose(out.advantages[row, m], torch.tensor(expected))
    assert (out.advantages[3] == 0).all()


def test_rloo_conforms():
    check_estimator(rloo)
