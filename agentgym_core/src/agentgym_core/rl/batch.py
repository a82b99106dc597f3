"""From trajectories to padded (B, T) training tensors, and which tasks each step trains on."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentgym_core.rl.rewards import place_rewards
from agentgym_core.rollout.trajectory import Trajectory

__all__ = ["RLBatch", "allocate_tasks", "build_batch", "shuffled_slice", "step_seed", "tasks_for_step",
           "trainable_trajectories"]


@dataclass
class RLBatch:
    """The trajectories of one step as tensors; row i is ``trajectories[i]``."""

    trajectories: list[Trajectory]
    sequences: list[list[int]]
    mask: torch.Tensor  # (B, T) float: 1 on sampled tokens
    token_rewards: torch.Tensor  # (B, T): each turn's reward on its last sampled token
    rollout_logprobs: torch.Tensor  # (B, T): log-probs recorded at sampling time
    group_ids: torch.Tensor  # (B,): rows of the same (env, task) share an id
    turn_spans: list[list[tuple[int, int]]]  # per row: each policy turn's [start, end) token range
    turn_states: list[list[str | None]]  # per row and turn: the env's name for the state the turn acted in

    @property
    def num_tokens(self) -> int:
        return int(sum(len(s) for s in self.sequences))


def trainable_trajectories(trajectories: Sequence[Trajectory]) -> tuple[list[Trajectory], int]:
    """The trajectories the loss may see, and how many were left out for an infrastructure failure.

    A trajectory the environment broke (``failed``: an env error or a timeout in create/reset/step)
    says nothing about the policy: training on it as a zero-reward episode would punish the
    actions that happened to precede a server crash. Those are left out and counted. Trajectories
    with no sampled token (cut before the model spoke) are left out too, uncounted: there is
    nothing in them to train. Order is kept, so groups stay where they were.
    """
    kept = [t for t in trajectories if not t.failed and t.num_sampled_tokens > 0]
    infra_failed = sum(1 for t in trajectories if t.failed)
    return kept, infra_failed


def apply_truncation_policy(trajectories: Sequence[Trajectory], policy: str | float) -> list[Trajectory]:
    """The trajectories to train on under ``algorithm.truncated_episodes`` (order kept).

    An episode cut by the turn or token budget ended without an outcome; its zero reward says the
    budget ran out, not that the policy failed. ``"train"`` keeps it as it is; ``"drop"`` leaves it
    out of the batch (its group's baseline comes from the episodes that ended); a number replaces its
    last turn's reward, so the budget running out has a price of its own.

    An episode ended at a refused action (``rollout.end_on_invalid_action``) is a failure, not a
    budget cut: every policy keeps it as it is.
    """
    if policy == "train":
        return list(trajectories)
    cut = [t.truncated and t.truncation_reason != "invalid_action" for t in trajectories]
    if policy == "drop":
        return [t for t, was_cut in zip(trajectories, cut, strict=True) if not was_cut]
    out = []
    for t, was_cut in zip(trajectories, cut, strict=True):
        if was_cut and t.turns:
            last = t.turns[-1].model_copy(update={"reward": float(policy)})
            # the outcome too: dynamic sampling tells groups with signal from tied ones by it
            outcome = t.outcome_reward - t.turns[-1].reward + float(policy)
            t = t.model_copy(update={"turns": [*t.turns[:-1], last], "outcome_reward": outcome})
        out.append(t)
    return out


def build_batch(trajectories: Sequence[Trajectory], *, invalid_action_penalty: float = 0.0) -> RLBatch:
    """Pad the trajectories' token ids, masks, rewards and log-probs to (B, T).

    ``invalid_action_penalty`` is subtracted from the reward of every turn whose action the environment
    refused (``Turn.invalid_action``); the trajectories keep the environment's own rewards.
    """
    trajs = list(trajectories)
    T = max((len(t.token_ids) for t in trajs), default=1) or 1
    B = len(trajs)
    mask = torch.zeros(B, T)
    logprobs = torch.zeros(B, T)
    groups: dict[tuple[str, int], int] = {}
    group_ids = torch.zeros(B, dtype=torch.long)
    for i, t in enumerate(trajs):
        n = len(t.token_ids)
        mask[i, :n] = torch.tensor(t.loss_mask, dtype=torch.float32)
        logprobs[i, :n] = torch.tensor(t.logprobs, dtype=torch.float32)
        group_ids[i] = groups.setdefault((t.env, t.task_id), len(groups))
    # Each turn's reward on the turn's last sampled token (its reward_index): the one placement function.
    turn_rewards = [[turn.reward - invalid_action_penalty * (turn.invalid_action is True) for turn in t.turns]
                    for t in trajs]
    rewards = place_rewards(mask, [0.0] * B, turn_rewards,
                            turn_ends=[[turn.reward_index for turn in t.turns] for t in trajs])  # (B, T)
    spans = [[(turn.action_span.start, turn.action_span.end) for turn in t.turns] for t in trajs]
    return RLBatch(trajs, [list(t.token_ids) for t in trajs], mask, rewards * mask, logprobs * mask, group_ids,
                   turn_spans=spans, turn_states=[t.turn_states() for t in trajs])


def step_seed(seed: int, *parts: object) -> int:
    """A 63-bit seed derived from the run seed and labels (step, env, ...): stable across resumes."""
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def tasks_for_step(task_ids: Sequence[int], n: int, step: int, seed: int, label: str = "") -> list[int]:
    """The ``n`` tasks of training step ``step``: consecutive slices of per-epoch shuffles.

    Each epoch is a fresh permutation of ``task_ids`` seeded by (seed, label, epoch), so every task
    is seen once per epoch, and the tasks of step k depend only on (seed, k): a resumed run draws
    exactly the tasks an uninterrupted one would.
    """
    if not task_ids:
        raise ValueError(f"no training tasks for {label or 'the environment'}; check its train split/train_tasks")
    return shuffled_slice(task_ids, step * n, n, seed, label)


def shuffled_slice(task_ids: Sequence[int], start: int, count: int, seed: int, label: object) -> list[int]:
    """Positions ``[start, start + count)`` of the endless stream of per-epoch shuffles of ``task_ids``.

    Epoch e of the stream is a permutation of ``task_ids`` seeded by (seed, label, "epoch", e); position
    p lies in epoch ``p // len(task_ids)``. A pure function of its arguments.
    """
    ids = list(task_ids)
    out: list[int] = []
    position = start
    while len(out) < count:
        epoch, offset = divmod(position, len(ids))
        g = torch.Generator().manual_seed(step_seed(seed, label, "epoch", epoch))
        perm = torch.randperm(len(ids), generator=g).tolist()
        take = min(count - len(out), len(ids) - offset)
        out.extend(ids[j] for j in perm[offset: offset + take])
        position += take
    return out


def allocate_tasks(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` tasks over environments by weight (largest remainder; every env gets >= 1)."""
    if total < len(weights):
        raise ValueError(f"rollout.tasks_per_step={total} is smaller than the number of environments ({len(weights)})")
    raw = [total * w / sum(weights) for w in weights]
    counts = [max(1, int(r)) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - int(raw[i]), reverse=True)
    k = 0
    while sum(counts) < total:
        counts[order[k % len(order)]] += 1
        k += 1
    while sum(counts) > total:
        j = max(range(len(counts)), key=lambda i: counts[i])
        counts[j] -= 1
    return counts
