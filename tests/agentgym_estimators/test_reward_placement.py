import torch


def test_rewards_sit_on_policy_tokens(multi_turn_batch):
    r = multi_turn_batch.token_rewards
    assert r[0, 3] == 0.5  # end of turn 1, not the observation token after it
    assert r[0, 8] == 1.0  # last token the policy sampled, not the padding after it
    assert r[1, 6] == 0.0 and r[2, 4] == 1.0
    assert (r[~multi_turn_batch.response_mask] == 0).all()
    assert torch.isclose(r.sum(), torch.tensor(3.5))
