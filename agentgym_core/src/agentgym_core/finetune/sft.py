"""Supervised fine-tuning on trajectories: cross-entropy on the policy's own tokens only.

    from agentgym_core.finetune import load_finetune_config, run_sft
    result = run_sft(load_finetune_config("examples/babyai_sft_cpu.yaml"))
    result.model_path  # HF directory: `model.path` of an RL run that starts from it

The mask is the trajectory record's ``loss_mask`` (1 on the assistant's tokens including its
end-of-turn token, 0 on prompt, template and observations), so SFT trains exactly the positions
RL trains. Sequences go through the RL update's forward (:func:`agentgym_core.rl.forward.forward_tokens`,
padding-free packing). The loss is the mean negative log-likelihood over the trained tokens of an
optimizer step (``token_mean``) or the mean over sequences of their per-token mean (``seq_mean``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from agentgym_core.finetune.common import (
    FinetuneResult,
    padded_mask,
    select_examples,
    sequence_batches,
    start_run,
    token_budget_chunks,
)
from agentgym_core.finetune.config import FinetuneConfig, SFTOptions
from agentgym_core.finetune.data import Example, TokenizerChat, load_examples
from agentgym_core.finetune.loop import train_steps
from agentgym_core.plugins import PluginManager, get_plugin_manager
from agentgym_core.rl.forward import forward_tokens
from agentgym_core.rollout.chat import ChatFormat

__all__ = ["run_sft", "sft_loss", "sft_update"]


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor, *, agg: str = "token_mean",
             num_tokens: float | None = None, num_seqs: float | None = None) -> torch.Tensor:
    """Negative log-likelihood of the masked tokens.

    ``logprobs``, ``mask``: (B, T). ``num_tokens`` / ``num_seqs`` normalise over a whole optimizer
    step when it is split into micro-batches (default: this batch's own counts).
    """
    if agg == "token_mean":
        denom = num_tokens if num_tokens is not None else float(mask.sum().clamp(min=1.0))
        return -(logprobs * mask).sum() / denom
    if agg == "seq_mean":
        per_seq = (logprobs * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # (B,)
        return -per_seq.sum() / (num_seqs if num_seqs is not None else max(len(per_seq), 1))
    raise ValueError(f"unknown loss_agg {agg!r}; expected token_mean or seq_mean")


def sft_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, examples: Sequence[Example],
               options: SFTOptions, *, pad_token_id: int = 0) -> dict[str, float]:
    """One optimizer step on ``examples`` (micro-batches of ``micro_batch_tokens``, gradients accumulated)."""
    device = next(model.parameters()).device
    lengths = [len(e.token_ids) for e in examples]
    mask = padded_mask(examples).to(device)  # (B, T)
    num_tokens = float(mask.sum().clamp(min=1.0))
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    total = 0.0
    for rows in token_budget_chunks(range(len(examples)), lengths, options.micro_batch_tokens):
        stats = forward_tokens(model, [examples[r].token_ids for r in rows], mask[rows], packing=options.packing,
                               max_tokens=options.micro_batch_tokens, pad_token_id=pad_token_id)
        loss = sft_loss(stats.logprobs, mask[rows], agg=options.loss_agg, num_tokens=num_tokens,
                        num_seqs=float(len(examples)))
        loss.backward()
        total += float(loss.detach())
    if options.max_grad_norm is not None:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, options.max_grad_norm))
    else:
        grad_norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    return {"loss": total, "grad_norm": grad_norm, "trained_tokens": num_tokens, "sequences": float(len(examples)),
            "tokens": float(sum(lengths))}


def run_sft(
    config: FinetuneConfig,
    *,
    model: Any = None,
    tokenizer: Any = None,
    examples: Sequence[Example] | None = None,
    resume: bool = False,
    plugin_manager: PluginManager | None = None,
    stop_after: int | None = None,
    options: SFTOptions | None = None,
    run_dir: str | Path | None = None,
    evaluate: bool = True,
    checkpoint: bool = True,
    label: str = "sft",
) -> FinetuneResult:
    """Fine-tune on ``config.data`` (or ``examples``); evaluate before/after; return the checkpoint.

    ``model``/``tokenizer`` replace loading ``config.model`` (tests, warm starts, later rounds).
    ``options``/``run_dir`` override ``config.sft``/``config.trainer.run_dir`` (rejection sampling
    runs one SFT per round in a subdirectory, ``checkpoint=False``: it saves per round itself). ``stop_after`` ends after that many optimizer steps
    of this call, as a kill would (tests).
    """
    from agentgym_core.rl.policy import load_policy

    pm = plugin_manager or get_plugin_manager()
    opts = options or config.sft
    run_dir = start_run(config, run_dir)

    # ---- setup: policy, data -------------------------------------------------------------------------
    if model is None:
        model, tokenizer = load_policy(config.model, runtime=config.runtime)
    pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0)
    if examples is None:
        chat = ChatFormat(TokenizerChat.for_model(model, tokenizer))
        examples = select_examples(load_examples(config.data.paths, chat), config.data)
    examples = list(examples)
    if not examples:
        raise ValueError(f"SFT has no examples: {config.data.paths} hold no trajectory that passes the filters "
                         f"(only_successful={config.data.only_successful}, max_tokens={config.data.max_tokens}, "
                         f"env={config.data.env})")

    # ---- one optimizer step: a seeded per-epoch shuffle's slice of the examples ----------------------
    def train_step(step: int, optimizer: torch.optim.Optimizer) -> dict[str, float]:
        rows = sequence_batches(len(examples), opts.batch_size, step, config.trainer.seed, label)
        metrics = sft_update(model, optimizer, [examples[r] for r in rows], opts, pad_token_id=pad_id)
        return {**metrics, "epoch": (step + 1) * opts.batch_size / len(examples)}

    result = train_steps(pm, config, model=model, tokenizer=tokenizer, run_dir=run_dir,
                         total_steps=math.ceil(len(examples) * opts.epochs / opts.batch_size), train_step=train_step,
                         label=label, resume=resume, stop_after=stop_after, evaluate=evaluate, checkpoint=checkpoint)
    if result.checkpoint is None:
        from agentgym_core.training.checkpoint import latest_checkpoint

        result.checkpoint = latest_checkpoint(run_dir)
    return result
