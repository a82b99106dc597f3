"""SFT replay in the RL update (``warm_start.replay``; PPO-ptx in Ouyang et al. 2022, "Training
language models to follow instructions with human feedback").

RL from a warm start can unlearn what SFT taught: a task whose GRPO group all succeeds (or all
fails) carries no advantage, so nothing holds its behaviour while updates elsewhere move the shared
weights. Replay keeps a few of the warm start's own examples in every update: the loss gains
``coef`` times their mean negative log-likelihood (:func:`agentgym_core.rl.update.ppo_update`).

``rl`` does not read fine-tuning data: the pipeline that ran the warm start hands its examples to
:func:`agentgym_core.rl.trainer.train` as a pool of ``(token_ids, loss_mask)`` pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentgym_core.rl.batch import tasks_for_step

__all__ = ["ReplayPool", "check_replay_pool", "replay_fields"]

ReplayPool = Sequence[tuple[Sequence[int], Sequence[int]]]  # (token_ids, loss_mask) per warm-start example


def check_replay_pool(config: Any, pool: ReplayPool | None) -> ReplayPool | None:
    """The pool the run replays (None: replay is off); a clear error before any work when it can't."""
    replay = config.warm_start.replay if config.warm_start is not None else None
    if replay is None or replay.coef == 0:
        return None
    if not pool:
        raise ValueError("warm_start.replay.coef > 0 replays the warm start's SFT examples, but none were passed: run "
                         "the recipe with `agentgym train` (agentgym_core.pipeline.run_rl_recipe), which hands them "
                         "over, or pass train(..., replay=[(token_ids, loss_mask), ...])")
    for i, (ids, mask) in enumerate(pool):
        if len(ids) != len(mask) or not any(mask):
            raise ValueError(f"replay example {i}: token_ids ({len(ids)}) and loss_mask ({len(mask)}) must have the "
                             "same length, with at least one trained token")
    return pool


def replay_fields(pool: ReplayPool, config: Any, step: int, device: torch.device) -> dict[str, Any]:
    """``UpdateInputs`` fields for step ``step``: a seeded draw of ``warm_start.replay.examples`` from ``pool``
    (the same on every rank and after a resume), its (R, T_r) mask right-padded with zeros, and the weight."""
    replay = config.warm_start.replay
    rows = tasks_for_step(list(range(len(pool))), min(replay.examples, len(pool)), step, config.trainer.seed,
                          "sft_replay")
    sequences = [list(pool[r][0]) for r in rows]
    mask = torch.zeros(len(rows), max(len(s) for s in sequences), device=device)
    for i, r in enumerate(rows):
        mask[i, : len(pool[r][1])] = torch.tensor(pool[r][1], dtype=torch.float32)
    return {"replay_sequences": sequences, "replay_mask": mask, "replay_coef": float(replay.coef)}
