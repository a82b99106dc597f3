import statistics

import torch

from agentgym_core.rl import AdvantageConfig, check_estimator
from agentgym_estimators import reinforce_pp


def test_reinforce_pp_hand_computed(multi_turn_batch):
    out = reinforce_pp(multi_turn_batch, AdvantageConfig(gamma=0.9, whiten=False))
    # Row 0 policy rewards [0, .5, 0, 0, 1]: G = [.9*1.229, .5 + .9*.81, .81, .9, 1].
    g0 = [1.1061, 1.229, 0.81, 0.9, 1.0]
    assert torch.allclose(out.advantages[0, [2, 3, 6, 7, 8]], torch.tensor(g0), atol=1e-6)
    # Row 2: outcome 1 on its last token (index 4), two tokens before it.
    assert torch.allclose(out.advantages[2, [2, 3, 4]], torch.tensor([0.81, 0.9, 1.0]), atol=1e-6)


def test_reinforce_pp_whitens_over_batch(multi_turn_batch):
    raw = reinforce_pp(multi_turn_batch, AdvantageConfig(gamma=0.9, whiten=False)).advantages
    white = reinforce_pp(multi_turn_batch, AdvantageConfig(gamma=0.9, eps=1e-12)).advantages
    m = multi_turn_batch.response_mask
    values = raw[m].tolist()
    mean, std = statistics.fmean(values), statistics.pstdev(values)
    assert torch.allclose(white[m], (raw[m] - mean) / std, atol=1e-5)
    assert (white[~m] == 0).all()


def test_reinforce_pp_conforms():
    check_estimator(reinforce_pp)
