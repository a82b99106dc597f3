import math

import pytest
import torch

from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import AlgorithmConfig, load_config
from agentgym_core.rl.losses import (
    LOG_RATIO_BOUND,
    aggregate,
    clamped_log_ratio,
    dual_clip,
    entropy_from_logits,
    kl_penalty,
    policy_loss,
    token_logprobs,
    value_loss,
)


def test_ppo_clip_hand_computed():
    # Three policy tokens with ratios e^0.5, e^-0.5, 1 and advantages +1, -1, +2; one masked token.
    old = torch.zeros(1, 4)
    new = torch.tensor([[0.5, -0.5, 0.0, 3.0]])
    adv = torch.tensor([[1.0, -1.0, 2.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, metrics = policy_loss(new, old, adv, mask, clip_low=0.2)
    # token 0: min(1.6487*1, 1.2*1) -> 1.2 ; token 1: A<0, ratio .6065 -> max(-.6065*-1... ) surrogate
    #   min(r*A, clip(r)*A) = min(-.6065, -.8) = -.8 ; token 2: 2.
    expected = -(1.2 - 0.8 + 2.0) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert metrics["clip_frac"] == pytest.approx(2 / 3)


def test_clip_higher_is_asymmetric():
    old = torch.zeros(1, 1)
    new = torch.tensor([[0.5]])  # ratio 1.6487
    adv = torch.ones(1, 1)
    mask = torch.ones(1, 1)
    sym, _ = policy_loss(new, old, adv, mask, clip_low=0.2)
    hi, _ = policy_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.28)
    assert sym.item() == pytest.approx(-1.2) and hi.item() == pytest.approx(-1.28)


def test_gradient_only_from_policy_tokens():
    new = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    loss, _ = policy_loss(new, torch.zeros(2, 3), torch.ones(2, 3), mask)
    loss.backward()
    assert (new.grad[mask == 0] == 0).all() and (new.grad[mask == 1] != 0).all()


def test_aggregations_differ_as_documented():
    x = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    assert aggregate(x, mask, "token_mean").item() == pytest.approx(8 / 5)
    assert aggregate(x, mask, "seq_mean_token_mean").item() == pytest.approx((1 + 4) / 2)
    assert aggregate(x, mask, "seq_mean_token_sum_norm", norm_length=8).item() == pytest.approx((4 / 8 + 4 / 8) / 2)
    with pytest.raises(ValueError, match="token_mean"):
        aggregate(x, mask, "tokens")


def test_shared_tokens_net_gradient_depends_on_aggregation_when_failures_are_longer():
    # A GRPO group of one success (2 tokens) and one failure that ran to the horizon (6 tokens),
    # advantages +1 / -1 (they sum to zero). Every token is one the two episodes share (a template
    # token such as "Action:"), so its log-prob is one shared parameter: the net push on it shows.
    shared = torch.zeros((), requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0, 0, 0, 0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    adv = torch.tensor([[1.0] * 6, [-1.0] * 6])
    grads = {}
    for agg in ("token_mean", "seq_mean_token_mean"):
        loss, _ = policy_loss(shared.expand(2, 6), torch.zeros(2, 6), adv, mask, agg=agg)
        (grads[agg],) = torch.autograd.grad(loss, shared)
    # token_mean weighs the longer failure 3x: a net push *down* on what both episodes say (positive
    # gradient of the loss), which is why the BabyAI CPU recipe trains with seq_mean_token_mean.
    assert grads["token_mean"].item() == pytest.approx((6 - 2) / 8)
    assert grads["seq_mean_token_mean"].item() == pytest.approx(0.0, abs=1e-7)


def test_kl_estimators_hand_computed():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    log_r = math.log(0.5)
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(-log_r)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(0.5 - 1 - log_r)
    assert kl_penalty(logp, ref, "low_var_kl").item() == pytest.approx(0.5 - 1 - log_r)
    assert kl_penalty(logp, logp, "k3").item() == 0.0


def test_logprobs_and_entropy_of_uniform():
    logits = torch.zeros(1, 2, 4)
    assert torch.allclose(token_logprobs(logits, torch.tensor([[1, 3]])), torch.full((1, 2), math.log(0.25)))
    assert torch.allclose(entropy_from_logits(logits), torch.full((1, 2), math.log(4)))


def test_value_loss_clips():
    v = torch.tensor([[1.0]])
    old = torch.tensor([[0.0]])
    ret = torch.tensor([[0.0]])
    assert value_loss(v, old, ret, torch.ones(1, 1), clip=0.2).item() == pytest.approx(0.5)
    assert value_loss(v, old, ret, torch.ones(1, 1), clip=None).item() == pytest.approx(0.5)
    ret = torch.tensor([[2.0]])  # clipped value 0.2 is further from 2 than 1 is: max picks it
    assert value_loss(v, old, ret, torch.ones(1, 1), clip=0.2).item() == pytest.approx(0.5 * 1.8**2)


def test_tied_rows_still_get_the_kl_gradient():
    # A row whose advantage is 0 everywhere moves under the KL term alone: the reason not to drop it.
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    mask = torch.ones(1, 2)
    pg, _ = policy_loss(logp, logp.detach(), torch.zeros(1, 2), mask)
    kl = (kl_penalty(logp, ref) * mask).sum() / 2
    (pg + 0.001 * kl).backward()
    assert (logp.grad != 0).all()


# -- dual clip and log-ratio clamp ----------------------------------------------------------------


def test_dual_clip_hand_computed():
    per_token = torch.tensor([[5.0, 0.8, -1.2, 4.0]])  # (B, T) clipped-surrogate losses
    adv = torch.tensor([[-1.0, -1.0, 1.0, -2.0]])
    # A=-1: min(5, 3) = 3 ; min(0.8, 3) = 0.8 ; A>0 untouched ; A=-2: min(4, 6) = 4
    assert torch.allclose(dual_clip(per_token, adv, 3.0), torch.tensor([[3.0, 0.8, -1.2, 4.0]]))


def test_policy_loss_dual_clip_caps_a_bad_token_pushed_far_up():
    old = torch.zeros(1, 1)
    new = torch.tensor([[math.log(5.0)]], requires_grad=True)  # ratio 5
    adv = -torch.ones(1, 1)
    mask = torch.ones(1, 1)
    loss, metrics = policy_loss(new, old, adv, mask, clip_low=0.2)  # default clip_ratio_c = 3
    # single clip: max(-A r, -A clip(r)) = max(5, 1.2) = 5; dual clip: min(5, 3 * 1) = 3
    assert loss.item() == pytest.approx(3.0)
    assert metrics["dual_clip_frac"] == 1.0
    loss.backward()
    assert new.grad.item() == 0.0  # capped: no further push
    plain, _ = policy_loss(new, old, adv, mask, clip_low=0.2, clip_ratio_c=None)
    assert plain.item() == pytest.approx(5.0)
    good, _ = policy_loss(new, old, -adv, mask, clip_low=0.2)  # positive advantage: single clip only, -1.2
    assert good.item() == pytest.approx(-1.2)
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        policy_loss(new, old, adv, mask, clip_ratio_c=1.0)


def test_clip_ratio_c_is_a_config_key_defaulting_to_verls_value():
    assert AlgorithmConfig().clip_ratio_c == 3.0
    assert load_config(None, ["envs=[{name: x}]", "algorithm.clip_ratio_c=null"]).algorithm.clip_ratio_c is None
    with pytest.raises(ConfigError, match="clip_ratio_c"):
        load_config(None, ["envs=[{name: x}]", "algorithm.clip_ratio_c=0.5"])


def test_log_ratio_clamp_keeps_the_surrogate_finite():
    assert clamped_log_ratio(torch.tensor([100.0, -100.0, 1.5]), torch.zeros(3)).tolist() == [20.0, -20.0, 1.5]
    old = torch.zeros(1, 1)
    new = torch.tensor([[100.0]], requires_grad=True)  # exp(100) overflows float32
    loss, metrics = policy_loss(new, old, -torch.ones(1, 1), torch.ones(1, 1), clip_ratio_c=None)
    assert loss.item() == pytest.approx(math.exp(LOG_RATIO_BOUND), rel=1e-6)  # e^20, not inf
    assert math.isfinite(metrics["approx_kl"])
    loss.backward()
    assert new.grad.item() == 0.0


def test_kl_estimators_clamp_the_log_ratio():
    logp = torch.tensor([[0.0, 0.0]])
    ref = torch.tensor([[30.0, -30.0]])  # log r = +30 and -30 -> clamped to +-20
    k3 = kl_penalty(logp, ref, "k3")
    assert k3[0, 0].item() == pytest.approx(math.exp(20.0) - 21.0, rel=1e-6)  # e^30 - 31 without the clamp
    assert k3[0, 1].item() == pytest.approx(math.exp(-20.0) + 19.0, rel=1e-6)
    assert kl_penalty(logp, ref, "low_var_kl")[0].tolist() == [10.0, 10.0]
    assert kl_penalty(logp, ref, "k1")[0].tolist() == [-20.0, 20.0]
    assert kl_penalty(logp, ref, "k2")[0].tolist() == [200.0, 200.0]
