"""`check_estimator`: the conformance checker every advantage-estimator plugin must pass."""

from __future__ import annotations

import copy

import torch

from agentgym_core.rl.estimator_api import (
    AdvantageBatch,
    AdvantageConfig,
    AdvantageOutput,
    Estimator,
    min_group_size,
)
from agentgym_core.rl.rewards import place_rewards

__all__ = ["EstimatorCheckError", "check_estimator"]


class EstimatorCheckError(AssertionError):
    """An estimator broke the contract; the message says which rule and how to fix it."""


def _example(with_env_tokens: bool, device: torch.device) -> AdvantageBatch:
    """Two tasks x two samples, 2-3 policy turns each; env spans optional (same policy tokens)."""
    rows = [  # per row: lengths of policy turns
        [3, 2], [2, 4, 1], [1, 2], [3, 3, 2],
    ]
    env_len = 3 if with_env_tokens else 0
    T = 2 + max(sum(r) + env_len * (len(r) - 1) for r in rows) + 2
    mask = torch.zeros(len(rows), T)
    outcome = [1.0, 0.0, 0.5, 0.0]
    turn_rewards = [[0.1, 0.0], [0.0, 0.2, 0.0], [0.0, 0.0], [0.3, 0.0, 0.0]]
    turn_ends: list[list[int]] = []
    for i, turns in enumerate(rows):
        pos, ends = 2, []  # a 2-token prompt
        for k, n in enumerate(turns):
            mask[i, pos:pos + n] = 1
            ends.append(pos + n - 1)
            pos += n + (env_len if k < len(turns) - 1 else 0)
        turn_ends.append(ends)
    rewards = place_rewards(mask, outcome, turn_rewards, turn_ends=turn_ends)
    # Values must follow the policy tokens, not positions, so both layouts see the same critic.
    flat = torch.rand(int(mask.sum().item()), generator=torch.Generator().manual_seed(1))
    values = torch.zeros_like(mask)
    values[mask > 0] = flat
    # Turn spans and the states turns acted in: each task's samples start in the same state, and the
    # two samples of task 1 meet again in state "b" (so step-level estimators have groups to compare).
    spans = [[(end - n + 1, end + 1) for end, n in zip(ends, turns, strict=True)]
             for ends, turns in zip(turn_ends, rows, strict=True)]
    states: list[list[str | None]] = [["s0", "a"], ["s0", "c", None], ["s1", "b"], ["s1", "b", "d"]]
    return AdvantageBatch(token_rewards=rewards.to(device), response_mask=mask.bool().to(device),
                          group_ids=torch.tensor([0, 0, 1, 1], device=device), values=values.to(device),
                          turn_spans=spans, turn_states=states)


def check_estimator(estimate: Estimator, config: AdvantageConfig | None = None, *,
                    device: str | torch.device = "cpu", declared_min_group_size: int | None = None) -> None:
    """Raise :class:`EstimatorCheckError` unless ``estimate`` honours the estimator contract.

    ``device``: where the example batch lives (the trainer's batches live on the learner's device:
    check with ``device="cuda"`` on a GPU machine). An estimator registered with options of its own
    (``register(name, estimate, options=MyOptions)``) is checked with ``config=MyOptions()``, and one that
    declares ``min_group_size`` with ``declared_min_group_size=`` that value.

    Rules: returns an :class:`AdvantageOutput` of (B, T) finite tensors on the batch's device; zero off the policy mask;
    inputs are not mutated; deterministic; inserting environment tokens between turns does not
    change any policy token's advantage (environment tokens are not steps); the outcome reward on
    the last policy token changes the advantages (it is not masked away); ``min_group_size``,
    when declared, is 1 or 2 (the example's groups have 2 samples; an
    estimator that needs more cannot be checked on it).
    """
    config = config or AdvantageConfig()
    name = getattr(estimate, "__name__", repr(estimate))

    def fail(rule: str, fix: str) -> None:
        raise EstimatorCheckError(f"estimator {name!r}: {rule}. {fix}")

    try:
        needed = min_group_size(estimate, declared_min_group_size)
    except TypeError as exc:
        raise EstimatorCheckError(str(exc)) from None
    if needed > 2:
        fail(f"declares min_group_size={needed}, but the conformance example has groups of 2 samples",
             "Declare the smallest group the estimator gives non-zero advantages for (2 for a leave-one-out baseline).")

    device = torch.device(device)
    batch = _example(with_env_tokens=True, device=device)
    before = {k: (v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)) for k, v in vars(batch).items()}
    out = estimate(batch, config)
    if not isinstance(out, AdvantageOutput):
        fail(f"returned {type(out).__name__}, not AdvantageOutput", "Return AdvantageOutput(advantages, returns).")
    for field in ("advantages", "returns"):
        t = getattr(out, field)
        if not isinstance(t, torch.Tensor) or t.shape != batch.token_rewards.shape:
            fail(f"{field} has shape {getattr(t, 'shape', None)}, expected {tuple(batch.token_rewards.shape)}",
                 "Return one value per token of the padded (B, T) batch.")
        if t.device != batch.token_rewards.device:
            fail(f"{field} is on {t.device}, the batch on {batch.token_rewards.device}",
                 "Create tensors with device=batch.token_rewards.device (or *_like of an input).")
        if not torch.isfinite(t).all():
            fail(f"{field} contains NaN or inf", "Guard divisions by a std or a count with eps / clamp.")
        if (t[~batch.response_mask] != 0).any():
            fail(f"{field} is non-zero on prompt/environment/padding tokens",
                 "Multiply by batch.mask: only tokens the policy sampled carry advantages.")
    for k, v in before.items():
        now = getattr(batch, k)
        if not (torch.equal(v, now) if isinstance(v, torch.Tensor) else v == now):
            fail(f"mutated its input batch.{k}", "Estimators are pure functions; clone before editing.")
    again = estimate(batch, config)
    if not torch.equal(again.advantages, out.advantages):
        fail("is not deterministic", "Do not sample or keep state between calls.")

    compact = _example(with_env_tokens=False, device=device)
    out_compact = estimate(compact, config)
    a_env = [out.advantages[i][batch.response_mask[i]] for i in range(4)]
    a_cmp = [out_compact.advantages[i][compact.response_mask[i]] for i in range(4)]
    if not all(torch.allclose(x, y, atol=1e-5) for x, y in zip(a_env, a_cmp, strict=True)):
        fail("advantages on policy tokens change when environment tokens are inserted between turns",
             "Treat environment tokens as non-steps: carry values/returns across them to the next policy token.")

    changed = AdvantageBatch(token_rewards=batch.token_rewards.clone(), response_mask=batch.response_mask,
                             group_ids=batch.group_ids, values=batch.values, turn_spans=batch.turn_spans,
                             turn_states=batch.turn_states)
    last = int(torch.nonzero(batch.response_mask[0]).max())
    changed.token_rewards[0, last] -= 1.0  # row 0 loses its outcome reward
    out_changed = estimate(changed, config)
    if torch.allclose(out_changed.advantages[0], out.advantages[0]):
        fail("ignores the outcome reward on the last policy token",
             "Read token_rewards on policy tokens; the outcome reward sits on the last one.")
