"""The two bounded corrections where the cap bites: each gradient from samples of an old policy matches
its own exact expectation (truncated for tis, rejected tokens for decoupled), computed in closed form."""

from __future__ import annotations

import pytest
import torch

from agentgym_core.rl.losses import policy_loss
from agentgym_core.rl.off_policy import behaviour_weights

ADVANTAGE = torch.tensor([1.0, -0.5, 0.3, -1.0, 0.8, 0.0])  # (V,): a fixed advantage per action


def _step(theta: torch.Tensor) -> torch.Tensor:
    """grad of J(theta) = sum_a pi(a) A(a)."""
    return torch.autograd.functional.jacobian(lambda t: (torch.softmax(t, 0) * ADVANTAGE).sum(), theta)


def _sampled_gradient(theta: torch.Tensor, behaviour: torch.Tensor, correction: str, cap: float) -> torch.Tensor:
    """-grad of the update's loss on samples from the behaviour policy (old log-probs: the update's own)."""
    g = torch.Generator().manual_seed(0)
    actions = torch.multinomial(torch.softmax(behaviour, 0), 100_000, replacement=True, generator=g)  # (N,)
    t = theta.clone().requires_grad_(True)
    logp = torch.log_softmax(t, 0)[actions].unsqueeze(0)  # (1, N)
    mu_logp = torch.log_softmax(behaviour, 0)[actions].unsqueeze(0)  # (1, N): what the sampler recorded
    mask = torch.ones_like(logp)
    weights = behaviour_weights(logp.detach(), mu_logp, mask, correction=correction, cap=cap)
    loss, _ = policy_loss(logp, logp.detach(), ADVANTAGE[actions].unsqueeze(0), mask, weights=weights,
                          clip_ratio_c=None)
    loss.backward()
    return -t.grad


@pytest.mark.parametrize("correction", ["tis", "decoupled"])
def test_a_biting_cap_gives_the_bounded_expectation_exactly(correction):
    theta0 = torch.tensor([0.5, -0.2, 0.1, 0.3, -0.6, 0.0])  # the sampler's weights
    theta = theta0.clone()
    for _ in range(3):  # the learner, k = 3 updates later
        theta = theta + 4.0 * _step(theta)
    pi, mu = torch.softmax(theta, 0), torch.softmax(theta0, 0)
    rho = pi / mu  # (V,)
    cap = 1.5
    assert rho.max() > cap > rho.min()  # some actions past the cap, some not
    bounded = torch.clamp(rho, max=cap) if correction == "tis" else torch.where(rho <= cap, rho, torch.zeros_like(rho))
    grad_logpi = (torch.diag(pi) - pi[:, None] * pi[None, :]) / pi[:, None]  # (V, V): row a = grad log pi(a)
    expected = (mu * bounded * ADVANTAGE) @ grad_logpi  # E_mu[w(a) A(a) grad log pi(a)]
    got = _sampled_gradient(theta, theta0, correction, cap)
    assert torch.linalg.vector_norm(got - expected) < 0.05 * torch.linalg.vector_norm(expected)
    # and it is not the unbounded (importance-weighted) one: the cap changed the answer
    assert torch.linalg.vector_norm(_step(theta) - expected) > 0.1 * torch.linalg.vector_norm(expected)
