"""AdamW and its learning-rate schedule, built the same way for RL and fine-tuning."""

from __future__ import annotations

import math
from typing import Any, Literal, Protocol

import torch

__all__ = ["OptimizerSettings", "build_optimizer"]


class OptimizerSettings(Protocol):
    """What :func:`build_optimizer` reads: a recipe's ``optim`` section (:class:`agentgym_core.rl.config.OptimConfig`)."""

    lr: float
    critic_lr: float | None
    betas: tuple[float, float]
    weight_decay: float
    warmup_steps: int
    schedule: Literal["constant", "cosine"]


def build_optimizer(params: list[torch.nn.Parameter], critic_params: list[torch.nn.Parameter],
                    config: OptimizerSettings, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW (the value head in its own group) and a per-training-step LR schedule."""
    groups = [{"params": params, "lr": config.lr}]
    if critic_params:
        groups.append({"params": critic_params, "lr": config.critic_lr or 10 * config.lr})
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)

    def factor(step: int) -> float:
        if config.warmup_steps and step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        if config.schedule == "cosine":
            progress = (step - config.warmup_steps) / max(1, total_steps - config.warmup_steps)
            return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
