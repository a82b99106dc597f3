"""DPO on multi-turn trajectories: a successful and a failed trajectory of the same task.

Loss (Rafailov et al. 2023, eq. 7), per pair (chosen ``w``, rejected ``l``)::

    h = beta * [(log pi(w) - log ref(w)) - (log pi(l) - log ref(l))]
    loss = -(1 - eps) * log sigmoid(h) - eps * log sigmoid(-h)       (eps: label smoothing, cDPO)

Multi-turn: ``log pi(y)`` is the sum of the token log-probs over the policy's own tokens only
(``loss_mask`` 1: every assistant turn, end-of-turn token included), conditioned on everything
before them, environment observations included; observations are never scored (ETO/IPR-style
trajectory preference, not per-turn). Departures from the paper: the frozen reference is the
initial policy, whose sequence log-probs are computed once before training (so no second model
is held in memory, and a resumed run uses the same reference); ``sft_coef`` optionally adds the
chosen trajectory's token-mean NLL (RPO, Pang et al. 2024).

Pairs: per (env, task), successful trajectories (fewest turns first) against failed ones (lowest
reward first), up to ``pairs_per_task``. Trajectories broken by an environment error are never
used as rejected: their failure says nothing about the policy.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from itertools import product
from typing import Any

import torch
import torch.nn.functional as F

from agentgym_core.finetune.common import (
    FinetuneResult,
    padded_mask,
    sequence_batches,
    start_run,
    token_budget_chunks,
)
from agentgym_core.finetune.config import DPOOptions, FinetuneConfig
from agentgym_core.finetune.data import Example, TokenizerChat, load_examples
from agentgym_core.finetune.loop import train_steps
from agentgym_core.plugins import PluginManager, get_plugin_manager
from agentgym_core.rl.forward import forward_tokens, mixed_precision
from agentgym_core.rollout.chat import ChatFormat

__all__ = ["dpo_loss", "make_pairs", "run_dpo", "sequence_logprobs"]


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, *, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """Per-pair DPO loss (P,) from sequence log-probs (P,) each (see the module docstring)."""
    h = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))  # (P,)
    return -(1 - label_smoothing) * F.logsigmoid(h) - label_smoothing * F.logsigmoid(-h)


def sequence_logprobs(model: torch.nn.Module, examples: Sequence[Example], *, packing: bool = True,
                      max_tokens: int = 4096, pad_token_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of log-probs over each example's trained tokens (N,), the token log-probs (N, T))."""
    mask = padded_mask(examples).to(next(model.parameters()).device)  # (N, T)
    stats = forward_tokens(model, [e.token_ids for e in examples], mask, packing=packing, max_tokens=max_tokens,
                           pad_token_id=pad_token_id)
    return (stats.logprobs * mask).sum(-1), stats.logprobs


def make_pairs(examples: Sequence[Example], pairs_per_task: int) -> list[tuple[int, int]]:
    """(chosen, rejected) index pairs of successful vs failed trajectories of the same task."""
    by_task: dict[tuple[str, Any], list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        by_task[(e.env, e.task_id)].append(i)
    pairs: list[tuple[int, int]] = []
    for (_, task), rows in by_task.items():
        if task is None:
            continue
        won = sorted((i for i in rows if examples[i].success), key=lambda i: (examples[i].num_turns, -examples[i].reward))
        lost = sorted((i for i in rows if not examples[i].success and not examples[i].meta.get("env_failure")),
                      key=lambda i: examples[i].reward)
        # Best chosen with worst rejected first, then spread over both lists (no pair twice).
        combos = sorted(product(range(len(won)), range(len(lost))), key=lambda ab: (max(ab), ab))
        pairs += [(won[a], lost[b]) for a, b in combos[:pairs_per_task]]
    return pairs


def _dpo_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, examples: Sequence[Example],
                pairs: Sequence[tuple[int, int]], ref: torch.Tensor, opts: DPOOptions, pad_token_id: int) -> dict[str, float]:
    """One optimizer step on ``pairs``; ``ref`` holds the reference sequence log-probs of every example."""
    device = next(model.parameters()).device
    pair_len = [len(examples[c].token_ids) + len(examples[r].token_ids) for c, r in pairs]
    chosen_tokens = float(sum(examples[c].num_trained_tokens for c, _ in pairs)) or 1.0
    params = [p for p in model.parameters() if p.requires_grad]
    sums = {"loss": 0.0, "accuracy": 0.0, "margin": 0.0, "reward_chosen": 0.0, "reward_rejected": 0.0, "sft_nll": 0.0}
    model.train()
    for chunk in token_budget_chunks(range(len(pairs)), pair_len, opts.micro_batch_tokens):
        rows = [pairs[k][0] for k in chunk] + [pairs[k][1] for k in chunk]  # chosen first, then rejected
        logp, token_lp = sequence_logprobs(model, [examples[r] for r in rows], packing=opts.packing,
                                           max_tokens=opts.micro_batch_tokens, pad_token_id=pad_token_id)
        n = len(chunk)
        ref_rows = ref.to(device)[torch.tensor(rows, device=device)]
        losses = dpo_loss(logp[:n], logp[n:], ref_rows[:n], ref_rows[n:], beta=opts.beta,
                          label_smoothing=opts.label_smoothing)  # (n,)
        loss = losses.sum() / len(pairs)
        nll = -logp[:n].sum() / chosen_tokens
        if opts.sft_coef > 0:
            loss = loss + opts.sft_coef * nll
        loss.backward()
        with torch.no_grad():
            reward_c = opts.beta * (logp[:n] - ref_rows[:n])
            reward_r = opts.beta * (logp[n:] - ref_rows[n:])
            sums["loss"] += float(losses.sum()) / len(pairs)
            sums["accuracy"] += float((reward_c > reward_r).float().sum()) / len(pairs)
            sums["margin"] += float((reward_c - reward_r).sum()) / len(pairs)
            sums["reward_chosen"] += float(reward_c.sum()) / len(pairs)
            sums["reward_rejected"] += float(reward_r.sum()) / len(pairs)
            sums["sft_nll"] += float(nll)
    if opts.max_grad_norm is not None:
        sums["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, opts.max_grad_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    sums["pairs"] = float(len(pairs))
    return sums


def _show_loss_and_accuracy(metrics: dict[str, float]) -> dict[str, str]:
    return {"loss": f"{metrics['loss']:.3f}", "acc": f"{metrics['accuracy']:.2f}"}


@torch.no_grad()
def _reference_logprobs(model: Any, examples: Sequence[Example], opts: DPOOptions, pad_token_id: int) -> torch.Tensor:
    """Sequence log-probs of every example under the initial policy (LoRA: adapters off)."""
    out = torch.zeros(len(examples))
    lengths = [len(e.token_ids) for e in examples]
    adapters_off = model.disable_adapter() if hasattr(model, "peft_config") else None
    if adapters_off is not None:
        adapters_off.__enter__()
    try:
        for rows in token_budget_chunks(range(len(examples)), lengths, opts.micro_batch_tokens):
            logp, _ = sequence_logprobs(model, [examples[r] for r in rows], packing=opts.packing,
                                        max_tokens=opts.micro_batch_tokens, pad_token_id=pad_token_id)
            out[rows] = logp.float().cpu()
    finally:
        if adapters_off is not None:
            adapters_off.__exit__(None, None, None)
    return out


def run_dpo(
    config: FinetuneConfig,
    *,
    model: Any = None,
    tokenizer: Any = None,
    examples: Sequence[Example] | None = None,
    resume: bool = False,
    plugin_manager: PluginManager | None = None,
    stop_after: int | None = None,
    evaluate: bool = True,
) -> FinetuneResult:
    """DPO on ``config.data`` (successful and failed trajectories); evaluate before/after; checkpoint.

    ``model`` must hold the *initial* weights even with ``resume``: the reference log-probs are
    taken from it before the checkpoint's weights are loaded.
    """
    from agentgym_core.rl.policy import load_policy

    pm = plugin_manager or get_plugin_manager()
    opts = config.dpo
    run_dir = start_run(config)

    # ---- setup: policy, pairs, frozen reference ------------------------------------------------------
    if model is None:
        model, tokenizer = load_policy(config.model, runtime=config.runtime)
    pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0)
    if examples is None:
        chat = ChatFormat(TokenizerChat.for_model(model, tokenizer))
        examples = [e for e in load_examples(config.data.paths, chat)
                    if (config.data.env is None or e.env == config.data.env)
                    and (config.data.max_tokens is None or len(e.token_ids) <= config.data.max_tokens)]
    examples = list(examples)
    pairs = make_pairs(examples, opts.pairs_per_task)
    if config.data.max_examples:
        pairs = pairs[: config.data.max_examples]
    if not pairs:
        raise ValueError("DPO found no (successful, failed) pair of the same task in "
                         f"{config.data.paths or 'the examples'}: sample several trajectories per task "
                         "(`agentgym collect --policy MODEL --samples 4`) so that some succeed and some fail")
    used = sorted({i for pair in pairs for i in pair})
    ref = torch.zeros(len(examples))
    with mixed_precision(config.model.mixed_precision, model, cache=config.runtime.autocast_cache):  # the reference as the policy will be computed
        ref[used] = _reference_logprobs(model, [examples[i] for i in used], opts, pad_id)

    # ---- one optimizer step: a seeded per-epoch shuffle's slice of the pairs -------------------------
    def train_step(step: int, optimizer: torch.optim.Optimizer) -> dict[str, float]:
        batch = [pairs[k] for k in sequence_batches(len(pairs), opts.batch_pairs, step, config.trainer.seed, "dpo")]
        return _dpo_update(model, optimizer, examples, batch, ref, opts, pad_id)

    return train_steps(pm, config, model=model, tokenizer=tokenizer, run_dir=run_dir,
                       total_steps=math.ceil(len(pairs) * opts.epochs / opts.batch_pairs), train_step=train_step,
                       label="dpo", resume=resume, stop_after=stop_after, evaluate=evaluate,
                       postfix=_show_loss_and_accuracy)
