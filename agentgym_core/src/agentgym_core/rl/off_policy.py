"""Behaviour-policy correction: training on tokens a different policy sampled.

Three policies meet in an update. The *behaviour* policy mu sampled the tokens (the rollout
backend: another precision, other kernels, or weights k updates old under asynchronous rollouts);
the *proximal* policy pi_prox is the learner's before this step's update (the recomputed "old"
log-probs, or the update's own log-probs detached when nothing is recomputed); pi_theta is trained.
PPO's ratio pi_theta / pi_prox bounds how far one update moves; it says nothing about mu. Without
a correction the gradient is the on-policy gradient evaluated on samples from mu, biased by
however far mu is from pi_prox.

The correction multiplies each token's surrogate loss by a behaviour weight
``w = pi_prox(a) / mu(a)``, detached (so the gradient of the surrogate is an importance-weighted
policy gradient), and bounds it, since a rare token can carry a huge weight:

* ``tis``: truncated importance sampling, ``w = min(pi_prox / mu, C)`` (Ionides 2008; used for the
  sampler/learner mismatch by Yao et al. 2025, "Your efficient RL framework secretly brings you
  off-policy RL training", and by verl's and SkyRL's token-level truncated IS).
* ``decoupled``: decoupled PPO (Hilton et al. 2022, "Batch size-invariance for policy
  optimization"; AReaL's asynchronous PPO): the same weight, but tokens whose weight exceeds C are
  left out (weight 0) instead of clipped, and pi_prox is always the recomputed learner policy.

All functions are pure; tensors are (B, T) with an explicit policy mask.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch

from agentgym_core.rl.losses import clamped_log_ratio

__all__ = ["Correction", "MismatchAlarm", "behaviour_weights", "mismatch_alarm", "mismatch_by_label", "mismatch_stats",
           "mismatch_sums"]

Correction = Literal["none", "tis", "decoupled"]


def behaviour_weights(
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    correction: Correction,
    cap: float,
) -> torch.Tensor | None:
    """Per-token behaviour weights ``pi_prox / mu``, bounded as ``correction`` says; (B, T) -> (B, T).

    Returns None for ``none`` (no weighting). The weights are detached: they rescale each token's
    surrogate, they are not trained. Off the mask they are 0.
    """
    if correction == "none":
        return None
    if cap <= 0:
        raise ValueError(f"the importance-weight cap must be positive, got {cap}")
    with torch.no_grad():
        ratio = torch.exp(clamped_log_ratio(proximal_logprobs, behaviour_logprobs))  # (B, T)
        if correction == "tis":
            weights = torch.clamp(ratio, max=cap)  # (B, T)
        elif correction == "decoupled":
            weights = torch.where(ratio <= cap, ratio, torch.zeros_like(ratio))  # (B, T)
        else:
            raise ValueError(f"unknown off-policy correction {correction!r}; expected none, tis or decoupled")
        return weights * mask.to(weights.dtype)


def mismatch_stats(
    learner_logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    cap: float,
) -> dict[str, float]:
    """How far the sampler was from the learner on the sampled tokens (all (B, T)).

    With ``r = pi_learner(a) / mu(a)`` per policy token: ``sampler_ratio_mean`` and
    ``sampler_ratio_max``; ``sampler_ratio_over_cap``, the share of tokens with r > cap; and
    ``sampler_kl``, the k3 estimate ``E_mu[r - 1 - log r]`` of KL(mu || pi_learner) (unbiased for
    tokens drawn from mu, never negative). Identical policies give 1, 1, 0 and 0.
    """
    with torch.no_grad():
        m = mask > 0
        n = int(m.sum())
        if n == 0:
            return {"sampler_ratio_mean": 1.0, "sampler_ratio_max": 1.0, "sampler_ratio_over_cap": 0.0,
                    "sampler_kl": 0.0}
        log_r = clamped_log_ratio(learner_logprobs.float(), sampler_logprobs.float())[m]  # (N,)
        r = torch.exp(log_r)  # (N,)
        return {
            "sampler_ratio_mean": float(r.mean()),
            "sampler_ratio_max": float(r.max()),
            "sampler_ratio_over_cap": float((r > cap).float().mean()),
            "sampler_kl": float((r - 1.0 - log_r).mean()),
        }


def mismatch_sums(
    learner_logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    mask: torch.Tensor,
    labels: Sequence[Sequence[str]],
) -> dict[str, float]:
    """The k3 terms of ``sampler_kl`` summed per label, and their token counts, over rows that carry it:
    ``sampler_kl_sum/{label}`` and ``sampler_kl_tokens/{label}``. ``labels[i]`` names row i's groups
    (its environment, the worker that sampled it). Sums add over micro-batches and ranks; see
    :func:`mismatch_by_label`. A batch mean would let one broken group hide among healthy ones."""
    with torch.no_grad():
        m = mask > 0
        log_r = clamped_log_ratio(learner_logprobs.float(), sampler_logprobs.float())  # (B, T)
        k3 = ((torch.exp(log_r) - 1.0 - log_r) * m).sum(dim=1).tolist()  # (B,)
        tokens = m.sum(dim=1).tolist()  # (B,)
    sums: dict[str, float] = {}
    for row_labels, row_k3, row_tokens in zip(labels, k3, tokens, strict=True):
        for label in row_labels:
            sums[f"sampler_kl_sum/{label}"] = sums.get(f"sampler_kl_sum/{label}", 0.0) + float(row_k3)
            sums[f"sampler_kl_tokens/{label}"] = sums.get(f"sampler_kl_tokens/{label}", 0.0) + float(row_tokens)
    return sums


def mismatch_by_label(sums: dict[str, float]) -> dict[str, float]:
    """``sampler_kl/{label}`` for each label of :func:`mismatch_sums`' (summed) output, and
    ``sampler_kl_worst``, the largest of them (0 without labels); other keys are dropped."""
    out: dict[str, float] = {}
    for key, total in sums.items():
        if key.startswith("sampler_kl_sum/"):
            label = key.removeprefix("sampler_kl_sum/")
            tokens = sums.get(f"sampler_kl_tokens/{label}", 0.0)
            out[f"sampler_kl/{label}"] = total / tokens if tokens > 0 else 0.0
    # NaN is the worst of all: it means a log-prob was NaN or infinite
    out["sampler_kl_worst"] = max(out.values(), key=lambda v: math.inf if math.isnan(v) else v, default=0.0)
    return out


MismatchAlarm = Literal["ok", "warn", "stop"]


def mismatch_alarm(kl: float, *, warn: float | None, stop: float | None) -> MismatchAlarm:
    """``stop`` when the sampler/learner KL passes ``stop``, ``warn`` past ``warn``, else ``ok``.

    A NaN or infinite KL stops (when a stop threshold is set): it means a log-prob was NaN/inf.
    """
    if stop is not None and (not math.isfinite(kl) or kl > stop):
        return "stop"
    if warn is not None and (not math.isfinite(kl) or kl > warn):
        return "warn"
    return "ok"
