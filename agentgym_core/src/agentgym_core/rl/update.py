"""The policy (and critic) update of one training step: PPO epochs over mini-batches.

Each mini-batch is one optimizer step; it is cut into micro-batches of at most
``micro_batch_tokens`` tokens whose gradients are accumulated, with the loss normalised by the
whole mini-batch's token/sequence counts so accumulation equals one large step.

On N learner ranks (FSDP2) each rank takes every N-th row of each mini-batch (the permutation is
the same on every rank), with the same global normalisation; FSDP averages gradients over ranks,
so each rank's loss is scaled by N and the average is the one-process sum. Every rank runs the
same number of forward/backward passes (FSDP's collectives must pair up): a rank with fewer
micro-batches runs empty ones that contribute zero.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, cast

import torch

from agentgym_core.rl.config import AlgorithmConfig
from agentgym_core.rl.critic import SeparateCritic, ValueHead
from agentgym_core.rl.distributed import DistContext, all_reduce_max, all_reduce_stats, shard_rows
from agentgym_core.rl.forward import forward_tokens
from agentgym_core.rl.losses import aggregate, kl_penalty, policy_loss, value_loss
from agentgym_core.rl.off_policy import (
    behaviour_weights,
    mismatch_alarm,
    mismatch_by_label,
    mismatch_stats,
    mismatch_sums,
)

__all__ = ["UpdateInputs", "ppo_update"]


@dataclass
class UpdateInputs:
    """Everything fixed during the update, as (B, T) tensors (rows align with ``sequences``)."""

    sequences: list[list[int]]
    mask: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    old_logprobs: torch.Tensor | None  # None: the update's own log-probs, detached (one optimizer step per batch)
    ref_logprobs: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    rollout_logprobs: torch.Tensor | None = None  # the sampler's (behaviour policy): correction weights, metrics
    row_labels: list[tuple[str, ...]] | None = None  # each row's groups (env, worker): the mismatch per group
    # SFT replay (``warm_start.replay``): sequences whose masked tokens' NLL, times replay_coef, joins the loss
    replay_sequences: list[list[int]] | None = None
    replay_mask: torch.Tensor | None = None  # (R, T_r)
    replay_coef: float = 0.0


def _micro_batches(rows: list[int], lengths: list[int], budget: int) -> list[list[int]]:
    out: list[list[int]] = [[]]
    used = 0
    for r in rows:
        if out[-1] and used + lengths[r] > budget:
            out.append([])
            used = 0
        out[-1].append(r)
        used += lengths[r]
    return out


def _rank_micro_batches(rows: list[int], lengths: list[int], budget: int, ctx: DistContext) -> list[list[int]]:
    """This rank's micro-batches of a mini-batch, padded with empty ones to the busiest rank's count."""
    def count(rank: int) -> int:
        mine = shard_rows(rows, DistContext(rank=rank, world_size=ctx.world_size))
        return len(_micro_batches(mine, lengths, budget)) if mine else 0

    mine = shard_rows(rows, ctx)
    micros = _micro_batches(mine, lengths, budget) if mine else []
    busiest = max(count(r) for r in range(ctx.world_size)) if ctx.distributed else len(micros)
    return micros + [[]] * (busiest - len(micros))


def ppo_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: UpdateInputs,
    config: AlgorithmConfig,
    *,
    temperature: float,
    generator: torch.Generator,
    value_head: ValueHead | SeparateCritic | None = None,
    norm_length: int | None = None,
    pad_token_id: int = 0,
    ctx: DistContext | None = None,
    correction: Literal["none", "tis", "decoupled"] = "none",
    stop_kl: float | None = None,
) -> dict[str, float]:
    """Run ``ppo_epochs`` x ``mini_batches`` optimizer steps; return averaged metrics.

    Without ``inputs.old_logprobs`` (one optimizer step per batch, ``algorithm.old_logprobs``), the
    ratio's denominator is the forward's own log-probs, detached, and the metrics gain ``entropy``
    and ``rollout_logprob_gap`` over the trained tokens (the scoring pass reports them otherwise), and
    the sampler-mismatch metrics (``sampler_*``, :func:`agentgym_core.rl.off_policy.mismatch_stats`).

    With ``inputs.replay_sequences``, each mini-batch also takes its share of them (every
    ``mini_batches``-th) and adds ``replay_coef`` times their mean NLL over masked tokens, at
    temperature 1 as in SFT (``sft_replay_loss``, the NLL before the coefficient).

    ``correction`` (``none``, ``tis``, ``decoupled``) weighs each token's loss by its behaviour weight
    against ``inputs.rollout_logprobs``; ``is_weight_mean`` reports the mean weight applied.

    Without old log-probs the mismatch is known only here, so it is also checked here, per group of
    ``inputs.row_labels`` (``sampler_kl/{label}``, ``sampler_kl_worst``): past ``stop_kl`` the optimizer
    step is skipped (``mismatch_skipped_update`` 1) and the caller stops the run.
    """
    ctx = ctx or DistContext()
    current_old = inputs.old_logprobs is None
    if current_old and config.ppo_epochs * config.mini_batches != 1:
        raise ValueError("ppo_update without old log-probs needs exactly one optimizer step per batch "
                         f"(ppo_epochs={config.ppo_epochs}, mini_batches={config.mini_batches})")
    B = len(inputs.sequences)
    lengths = [len(s) for s in inputs.sequences]
    replay = inputs.replay_sequences or []
    replay_lengths = [len(s) for s in replay]
    replay_chunks = [list(range(len(replay)))[i :: config.mini_batches] for i in range(config.mini_batches)]
    # A separate critic's gradients are clipped on their own (its value loss is not the policy's step);
    # a shared-trunk head's share the policy's norm, as its loss flows through the same trunk.
    critic_params = list(value_head.parameters()) if isinstance(value_head, SeparateCritic) else []
    critic_ids = {id(p) for p in critic_params}
    # The optimizer's parameters, not model.parameters(): under FSDP2 the module may hold its
    # gathered (unsharded) parameters between passes, while gradients land on the sharded ones.
    params = [p for group in optimizer.param_groups for p in group["params"] if id(p) not in critic_ids]
    sums: dict[str, float] = {}
    ratio_max = 0.0  # over the tokens this process trained (a max does not add up across ranks)
    cap = config.off_policy.cap
    n_steps = 0
    tokens = 0
    t0 = time.perf_counter()
    model.train()
    for _epoch in range(config.ppo_epochs):
        order = torch.randperm(B, generator=generator).tolist()
        chunks = [order[i :: config.mini_batches] for i in range(config.mini_batches)]
        for rows, replay_rows in ((c, r) for c, r in zip(chunks, replay_chunks, strict=True) if c):
            m_all = inputs.mask[rows]
            num_tokens = float(m_all.sum().clamp(min=1.0))
            agg_kw = {"num_tokens": num_tokens, "num_seqs": float(len(rows)), "norm_length": norm_length}
            stats: dict[str, float] = {}
            for micro in _rank_micro_batches(rows, lengths, config.micro_batch_tokens, ctx):
                if not micro:
                    _empty_pass(model, pad_token_id)
                    continue
                seqs = [inputs.sequences[r] for r in micro]
                mask = inputs.mask[micro]
                out = forward_tokens(
                    model, seqs, mask, temperature=temperature, packing=config.packing,
                    max_tokens=config.micro_batch_tokens, with_entropy=config.entropy_coef > 0 or current_old,
                    entropy_grad=config.entropy_coef > 0, value_head=value_head, pad_token_id=pad_token_id,
                )
                logp = out.logprobs[:, : mask.shape[1]]
                old_logp = logp.detach() if current_old else cast(torch.Tensor, inputs.old_logprobs)[micro]
                if current_old:  # what the scoring pass would have reported, over these tokens
                    with torch.no_grad():
                        if out.entropy is not None:
                            ent_sum = float((out.entropy[:, : mask.shape[1]] * mask).sum())
                            stats["entropy"] = stats.get("entropy", 0.0) + ent_sum / num_tokens
                        if inputs.rollout_logprobs is not None:
                            gap = ((old_logp - inputs.rollout_logprobs[micro]).abs() * mask).sum()
                            stats["rollout_logprob_gap"] = stats.get("rollout_logprob_gap", 0.0) + float(gap) / num_tokens
                share = float(mask.sum()) / num_tokens  # this micro-batch's share of the metrics
                weights = None
                if inputs.rollout_logprobs is not None:
                    behaviour = inputs.rollout_logprobs[micro]  # (b, T)
                    weights = behaviour_weights(old_logp, behaviour, mask, correction=correction, cap=cap)
                    if weights is not None:
                        stats["is_weight_mean"] = stats.get("is_weight_mean", 0.0) + float((weights * mask).sum()) / num_tokens
                    if current_old:  # no scoring pass: the sampler/learner mismatch is measured here
                        mismatch = mismatch_stats(old_logp, behaviour, mask, cap=cap)
                        ratio_max = max(ratio_max, mismatch.pop("sampler_ratio_max"))
                        for k, v in mismatch.items():
                            stats[k] = stats.get(k, 0.0) + v * share
                        if inputs.row_labels is not None:
                            labels = [inputs.row_labels[r] for r in micro]
                            for k, v in mismatch_sums(old_logp, behaviour, mask, labels).items():
                                stats[k] = stats.get(k, 0.0) + v
                pg, pg_stats = policy_loss(
                    logp, old_logp, inputs.advantages[micro], mask,
                    clip_low=config.clip_low, clip_high=config.clip_high, clip_ratio_c=config.clip_ratio_c,
                    agg=config.loss_agg, weights=weights, **agg_kw,
                )
                loss = pg
                if inputs.ref_logprobs is not None and not config.kl.in_reward:
                    kl = aggregate(kl_penalty(logp, inputs.ref_logprobs[micro], config.kl.estimator), mask,
                                   config.loss_agg, **agg_kw)
                    loss = loss + config.kl.coef * kl
                    stats["kl_loss"] = stats.get("kl_loss", 0.0) + float(kl.detach())
                if config.entropy_coef > 0 and out.entropy is not None:
                    ent = aggregate(out.entropy, mask, config.loss_agg, **agg_kw)
                    loss = loss - config.entropy_coef * ent
                if value_head is not None and out.values is not None and inputs.old_values is not None:
                    vl = value_loss(out.values, inputs.old_values[micro], inputs.returns[micro], mask,
                                    clip=config.critic.value_clip, agg=config.loss_agg, **agg_kw)
                    loss = loss + config.critic.vf_coef * vl
                    stats["value_loss"] = stats.get("value_loss", 0.0) + float(vl.detach())
                (loss * ctx.world_size).backward()
                stats["pg_loss"] = stats.get("pg_loss", 0.0) + float(pg.detach())
                for k, v in pg_stats.items():
                    stats[k] = stats.get(k, 0.0) + v * share
                tokens += sum(len(s) for s in seqs)
            if replay_rows and inputs.replay_coef > 0:
                stats["sft_replay_loss"] = _replay_passes(model, inputs, replay_rows, replay_lengths, config, ctx,
                                                          pad_token_id)
                tokens += sum(replay_lengths[r] for r in replay_rows)
            stats = all_reduce_stats(stats, ctx)
            if any(k.startswith("sampler_kl_sum/") for k in stats):  # before the (only) optimizer step
                by_label = mismatch_by_label(stats)
                stats = {k: v for k, v in stats.items() if not k.startswith(("sampler_kl_sum/", "sampler_kl_tokens/"))}
                stats.update(by_label)
                if mismatch_alarm(by_label["sampler_kl_worst"], warn=None, stop=stop_kl) == "stop":
                    optimizer.zero_grad(set_to_none=True)  # the sampler is too far off to train on
                    stats["mismatch_skipped_update"] = 1.0
                    for k, v in stats.items():
                        sums[k] = sums.get(k, 0.0) + v
                    continue
            if config.max_grad_norm is not None:
                grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            else:
                grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
            if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP2: the norm over every rank's shard
                grad_norm = grad_norm.full_tensor()
            stats["grad_norm"] = float(grad_norm)
            if critic_params and config.max_grad_norm is not None:
                stats["critic_grad_norm"] = float(torch.nn.utils.clip_grad_norm_(critic_params, config.max_grad_norm))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + v
            n_steps += 1
    model.eval()
    tokens = int(all_reduce_stats({"tokens": float(tokens)}, ctx)["tokens"])
    seconds = time.perf_counter() - t0
    metrics = {k: v / max(n_steps, 1) for k, v in sums.items()}
    if current_old and inputs.rollout_logprobs is not None:
        metrics["sampler_ratio_max"] = all_reduce_max(ratio_max, ctx)  # every rank takes this branch
    metrics.update(update_seconds=seconds, update_tokens=float(tokens),
                   update_tokens_per_s=tokens / seconds if seconds > 0 else 0.0, optimizer_steps=float(n_steps))
    return metrics


def _replay_passes(model: torch.nn.Module, inputs: UpdateInputs, rows: list[int], lengths: list[int],
                   config: AlgorithmConfig, ctx: DistContext, pad_token_id: int) -> float:
    """Backward ``replay_coef`` x the mean NLL of the replay ``rows``' masked tokens; return this rank's share of it."""
    sequences, replay_mask = cast(list[list[int]], inputs.replay_sequences), cast(torch.Tensor, inputs.replay_mask)
    num_tokens = float(replay_mask[rows].sum().clamp(min=1.0))  # over every rank's rows: the global mean
    nll_share = 0.0
    for micro in _rank_micro_batches(rows, lengths, config.micro_batch_tokens, ctx):
        if not micro:
            _empty_pass(model, pad_token_id)
            continue
        mask = replay_mask[micro]  # (b, T_r)
        out = forward_tokens(model, [sequences[r] for r in micro], mask, temperature=1.0, packing=config.packing,
                             max_tokens=config.micro_batch_tokens, pad_token_id=pad_token_id)
        nll = aggregate(-out.logprobs[:, : mask.shape[1]], mask, "token_mean", num_tokens=num_tokens)
        (inputs.replay_coef * nll * ctx.world_size).backward()
        nll_share += float(nll.detach())
    return nll_share


def _empty_pass(model: torch.nn.Module, pad_token_id: int) -> None:
    """A forward/backward that changes no gradient, so this rank joins FSDP's collectives of the pass."""
    device = next(model.parameters()).device
    out = model(input_ids=torch.full((1, 1), pad_token_id, device=device), use_cache=False)
    (out.logits.float().sum() * 0.0).backward()

