"""GiGPO: group-in-group credit, per episode and per step (Feng et al. 2025, "Group-in-Group Policy
Optimization for LLM Agent Training", arXiv:2505.10978).

GRPO compares whole episodes of a task, so every turn of an episode gets the same advantage: a
wasted move in a successful episode is reinforced like the move that solved it. GiGPO adds a
second, finer comparison at no extra rollout cost. Samples of one task often pass through the same
environment state (the start state always, and often later ones: the same room after the same
moves); the turns taken *in the same state* form a step group, and each is compared with the
others of its group by the discounted return that followed it::

    A^E_i      = GRPO advantage of episode i over its task's group        (episode level)
    R_{i,t}    = sum_{k >= t} gamma^(k - t) r_{i,k}                       (turns k of episode i)
    A^S_{i,t}  = (R_{i,t} - mean_{g}(R)) / (std_{g}(R) + eps),  g = {(j, u): group(j) = group(i),
                                                                       state(j, u) = state(i, t)}
    A_{i,t}    = A^E_i + step_weight * A^S_{i,t}    on every token of turn t

``gamma`` here is ``step_gamma``, a discount per *turn* (the paper uses 0.95), so of two
successful continuations from the same state the shorter one gets the higher return. A step group
of one turn (a state no other sample reached), or turns whose environment names no state (no
``info['state_key']``, see :data:`agentgym_core.env.STATE_KEY`), get ``A^S = 0``: GiGPO then
reduces to GRPO. ``norm_by_std`` applies to both levels (False: mean-centred only, as Dr. GRPO).

Departures from the paper: states are matched by the environment's exact key (the paper hashes the
observation text); a turn's rewards are read from the policy token the trainer put them on.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from pydantic import Field

from agentgym_core.rl.estimator_api import AdvantageBatch, AdvantageConfig, AdvantageOutput
from agentgym_estimators.grpo import grpo

__all__ = ["GiGPOOptions", "gigpo", "step_advantages"]


class GiGPOOptions(AdvantageConfig):
    """``algorithm.advantage`` when ``algorithm.estimator: gigpo``."""

    step_weight: float = Field(1.0, ge=0.0, description="Weight of the step-level advantage (the paper's omega).")
    step_gamma: float = Field(0.95, ge=0.0, le=1.0, description="Discount per turn of the step-level return.")


def turn_returns(rewards: list[float], gamma: float) -> list[float]:
    """R_t = sum_{k >= t} gamma^(k - t) r_k for one episode's per-turn rewards."""
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def step_advantages(returns: list[list[float]], states: list[list[str | None]], group_ids: list[int], *,
                    norm_by_std: bool, eps: float) -> list[list[float]]:
    """A^S per (row, turn): the return after a turn against the others taken in the same state of the same task.

    ``returns``/``states``: per row, per turn. Turns without a state name, and step groups of one,
    get 0.
    """
    groups: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for row, row_states in enumerate(states):
        for turn, state in enumerate(row_states):
            if state is not None:
                groups[(group_ids[row], state)].append((row, turn))
    out = [[0.0] * len(r) for r in returns]
    for members in groups.values():
        if len(members) < 2:
            continue
        values = torch.tensor([returns[r][t] for r, t in members], dtype=torch.float64)  # (n,)
        centred = values - values.mean()
        if norm_by_std:
            centred = centred / (values.std(unbiased=True) + eps)
        for (r, t), a in zip(members, centred.tolist(), strict=True):
            out[r][t] = a
    return out


def gigpo(batch: AdvantageBatch, config: AdvantageConfig) -> AdvantageOutput:
    """Episode-level GRPO advantages plus ``step_weight`` times step-level ones, per turn's tokens."""
    options = config if isinstance(config, GiGPOOptions) else GiGPOOptions(**config.model_dump())
    episode = grpo(batch, options).advantages  # (B, T)
    if batch.turn_spans is None or batch.turn_states is None or options.step_weight == 0.0:
        return AdvantageOutput(advantages=episode, returns=episode.clone())
    mask = batch.mask  # (B, T)
    rewards = batch.token_rewards * mask  # (B, T)
    # Every reward the trainer placed lies inside some turn's span; sum each turn's.
    per_turn = [[float(rewards[row, start:end].sum()) for start, end in spans]
                for row, spans in enumerate(batch.turn_spans)]
    returns = [turn_returns(r, options.step_gamma) for r in per_turn]
    step = step_advantages(returns, batch.turn_states, batch.group_ids.tolist(),
                           norm_by_std=options.norm_by_std, eps=options.eps)
    step_tokens = torch.zeros_like(episode)  # (B, T)
    for row, spans in enumerate(batch.turn_spans):
        for (start, end), a in zip(spans, step[row], strict=True):
            step_tokens[row, start:end] = a
    advantages = (episode + options.step_weight * step_tokens) * mask  # (B, T)
    return AdvantageOutput(advantages=advantages, returns=advantages.clone())


