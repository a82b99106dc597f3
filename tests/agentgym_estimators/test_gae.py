import pytest
import torch

from agentgym_core.rl import AdvantageConfig, check_estimator
from agentgym_estimators import gae


def test_gae_hand_computed_across_observation(multi_turn_batch):
    out = gae(multi_turn_batch, AdvantageConfig(gamma=0.9, lam=0.8, whiten=False))
    # Policy tokens of row 0: r = [0, .5, 0, 0, 1], V = [.1, .2, .3, .4, .5], gamma*lam = .72.
    # A4 = 1 - .5 = .5
    # A3 = (.9*.5 - .4) + .72*.5 = .41
    # A2 = (.9*.4 - .3) + .72*.41 = .3552
    # A1 = (.5 + .9*.3 - .2) + .72*.3552 = .825744   <- bootstraps from turn 2's first token
    # A0 = (.9*.2 - .1) + .72*.825744 = .67453568
    expected = torch.tensor([0.67453568, 0.825744, 0.3552, 0.41, 0.5])
    policy = [2, 3, 6, 7, 8]
    assert torch.allclose(out.advantages[0, policy], expected, atol=1e-6)
    assert torch.allclose(out.returns[0, policy], expected + torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]), atol=1e-6)
    assert (out.advantages[0, [0, 1, 4, 5, 9]] == 0).all()


def test_gae_without_values_explains(multi_turn_batch):
    multi_turn_batch.values = None
    with pytest.raises(ValueError, match="critic"):
        gae(multi_turn_batch, AdvantageConfig())


def test_gae_conforms():
    check_estimator(gae)
    check_estimator(gae, AdvantageConfig(gamma=0.95, lam=0.9, whiten=False))
