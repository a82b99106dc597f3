"""Policy, KL, entropy and value losses over padded (B, T) tensors with an explicit policy mask.

Every function is pure. ``mask`` is 1 on tokens the policy sampled and 0 on prompt, environment
and padding tokens; nothing off the mask contributes to any loss.

Aggregation (``agg``), the choice between token-level and sequence-level losses:

* ``token_mean``: sum over all policy tokens of the mini-batch / their number. Every token weighs
  the same, so long trajectories weigh more (DAPO's recommendation for long multi-turn outputs).
* ``seq_mean_token_mean``: mean over each trajectory's tokens, then mean over trajectories (the
  original GRPO). Every trajectory weighs the same, so a token of a short one weighs more. In
  agent tasks where a failure runs to the turn horizon and a success ends early, this is the one
  that keeps group-relative advantages balanced: with ``token_mean`` the longer failures outweigh
  the successes, and tokens every episode shares (templates, "Action:") are pushed down on net.
* ``seq_mean_token_sum_norm``: sum over each trajectory's tokens / a constant ``norm_length``,
  then mean over trajectories (Dr. GRPO): no length bias in either direction.

When a mini-batch is split into micro-batches, pass the mini-batch's ``num_tokens`` /
``num_seqs`` so that accumulating micro-batch gradients equals one big step.

Departures from the papers, for numerical safety: every log-ratio (new/old in the surrogate,
ref/new in the KL) is clamped to [-20, 20] before ``exp`` (:func:`clamped_log_ratio`), so one
token whose probability collapsed cannot turn the loss into inf/NaN; and the surrogate has PPO's
dual clip (Ye et al. 2020) on negative advantages, on by default with ``clip_ratio_c = 3`` as in verl.
"""

from __future__ import annotations

import torch

from agentgym_core.rl.config import Aggregation, KLEstimator

__all__ = [
    "LOG_RATIO_BOUND",
    "aggregate",
    "clamped_log_ratio",
    "dual_clip",
    "entropy_from_logits",
    "kl_penalty",
    "masked_mean",
    "policy_loss",
    "token_logprobs",
    "value_loss",
]


LOG_RATIO_BOUND = 20.0
"""|log(p / q)| is clamped to this before ``exp``: e^20 ~ 5e8 is finite in fp32 and bf16, and any ratio
beyond it is already clipped away by PPO or dominated by the KL clamp."""


def clamped_log_ratio(logp: torch.Tensor, logq: torch.Tensor, bound: float = LOG_RATIO_BOUND) -> torch.Tensor:
    """``log(p / q) = logp - logq`` clamped to [-bound, bound]; (B, T), (B, T) -> (B, T).

    The clamp keeps ``exp`` of it finite; the gradient is 0 where it is active, as a token that far
    from the old (or reference) policy carries no trustworthy signal.
    """
    return torch.clamp(logp - logq, -bound, bound)  # (B, T)


def dual_clip(per_token: torch.Tensor, advantages: torch.Tensor, clip_ratio_c: float) -> torch.Tensor:
    """PPO dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL").

    For a negative advantage the clipped surrogate loss ``-min(r A, clip(r) A)`` grows without
    bound as the ratio r grows; dual clip caps it at ``-c * A`` (c > 1)::

        L = min(L_clip, -c * A)   where A < 0
        L = L_clip                 where A >= 0

    All (B, T) -> (B, T). At c * A the gradient is 0: a token the new policy made c times more
    likely than the old one, while the advantage says it was bad, is not pushed further.
    """
    capped = torch.minimum(per_token, -clip_ratio_c * advantages)  # (B, T)
    return torch.where(advantages < 0, capped, per_token)  # (B, T)


def aggregate(
    x: torch.Tensor,
    mask: torch.Tensor,
    agg: Aggregation = "token_mean",
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    norm_length: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss ``x`` (B, T) to a scalar over masked tokens (see module docstring)."""
    m = mask.to(x.dtype)  # (B, T)
    if agg == "token_mean":
        denom = num_tokens if num_tokens is not None else m.sum().clamp(min=1.0)
        return (x * m).sum() / denom
    seqs = num_seqs if num_seqs is not None else x.shape[0]
    if agg == "seq_mean_token_mean":
        per_seq = (x * m).sum(1) / m.sum(1).clamp(min=1.0)  # (B,)
        return per_seq.sum() / seqs
    if agg == "seq_mean_token_sum_norm":
        length = norm_length if norm_length is not None else x.shape[1]
        return ((x * m).sum(1) / length).sum() / seqs
    raise ValueError(
        f"unknown loss aggregation {agg!r}; expected token_mean, seq_mean_token_mean or seq_mean_token_sum_norm"
    )


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p(labels) under ``logits / temperature``; logits (B, T, V), labels (B, T) -> (B, T).

    The temperature must match the one used for sampling, so the ratio to the rollout's log-probs
    is 1 before the first update.
    """
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # (B, T, V)
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (B, T)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of the sampling distribution per position: (B, T, V) -> (B, T)."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # (B, T, V)
    return -(logp.exp() * logp).sum(-1)  # (B, T)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    clip_ratio_c: float | None = 3.0,
    agg: Aggregation = "token_mean",
    weights: torch.Tensor | None = None,
    **agg_kwargs: float | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate (Schulman et al. 2017), with optional asymmetric clip-higher (DAPO)
    and dual clip (Ye et al. 2020).

        ratio = exp(clamp(logp - logp_old, -20, 20))
        L     = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)
        L     = min(L, -clip_ratio_c * A)   where A < 0   (dual clip; clip_ratio_c=None disables)

    ``weights`` (B, T), detached, multiplies each token's loss: the behaviour-policy correction
    (:mod:`agentgym_core.rl.off_policy`), ``pi_old / mu`` bounded. None: every token weighs 1.

    ``clip_high=None`` uses ``clip_low`` (symmetric PPO). All tensors (B, T). Returns the scalar
    loss and metrics: ``clip_frac`` (share of policy tokens where the clip was active),
    ``dual_clip_frac`` (share where the dual clip was) and ``approx_kl`` (k3 estimate of
    KL(old || new) on policy tokens).
    """
    clip_high = clip_low if clip_high is None else clip_high
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (the dual clip caps the loss at c * |A|); got {clip_ratio_c}")
    log_ratio = clamped_log_ratio(logprobs, old_logprobs) * mask  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    unclipped = -advantages * ratio  # (B, T)
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)  # (B, T)
    single = torch.maximum(unclipped, clipped)  # (B, T)
    per_token = dual_clip(single, advantages, clip_ratio_c) if clip_ratio_c is not None else single  # (B, T)
    weighted = per_token if weights is None else per_token * weights  # (B, T)
    loss = aggregate(weighted, mask, agg, **agg_kwargs)
    with torch.no_grad():
        m = mask > 0
        n = m.sum().clamp(min=1)
        clip_frac = ((clipped > unclipped) & m).sum() / n
        dual_clip_frac = ((per_token < single) & m).sum() / n
        approx_kl = ((ratio - 1 - log_ratio) * m).sum() / n
    return loss, {"clip_frac": float(clip_frac), "dual_clip_frac": float(dual_clip_frac),
                  "approx_kl": float(approx_kl)}


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: KLEstimator = "low_var_kl") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled tokens (Schulman, "Approximating KL").

    With log r = logp_ref - logp (tokens sampled from pi)::

        k1 = -log r                      unbiased, high variance, can be negative
        k2 = (log r)^2 / 2
        k3 = r - 1 - log r               unbiased, non-negative, low variance ("low_var_kl")

    ``log r`` is clamped to [-20, 20] first (:func:`clamped_log_ratio`), so ``exp`` in k3 stays
    finite; ``low_var_kl`` is k3 clamped to [-10, 10] as the anchor's recipe uses it. (B, T) -> (B, T).
    """
    log_r = clamped_log_ratio(ref_logprobs, logprobs)  # (B, T)
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r.pow(2)
    if kind in ("k3", "low_var_kl"):
        kl = torch.exp(log_r) - 1.0 - log_r
        return torch.clamp(kl, -10.0, 10.0) if kind == "low_var_kl" else kl
    raise ValueError(f"unknown KL estimator {kind!r}; expected k1, k2, k3 or low_var_kl")


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float | None = 0.2,
    agg: Aggregation = "token_mean",
    **agg_kwargs: float | None,
) -> torch.Tensor:
    """The critic's clipped squared error to the GAE returns (PPO); all (B, T) -> scalar.

    ``0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2)``; ``clip=None`` disables clipping.
    """
    err = (values - returns).pow(2)  # (B, T)
    if clip is not None:
        v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)  # (B, T)
        err = torch.maximum(err, (v_clipped - returns).pow(2))
    return 0.5 * aggregate(err, mask, agg, **agg_kwargs)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the mask (for metrics)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)



