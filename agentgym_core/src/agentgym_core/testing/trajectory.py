"""The trajectory auditor: is a trajectory exactly right to train on?

:func:`check_trajectory` checks one :class:`agentgym_core.rollout.Trajectory` against the backend
that produced it:

1. Layout: ``token_ids``, ``loss_mask`` and ``logprobs`` have one entry per token; the turn spans
   tile the sequence (context, reply, context, reply, ...) and end with the last reply.
2. Mask: 1 exactly on the sampled reply tokens (end-of-turn token included), 0 elsewhere; log-probs
   are 0 where the mask is 0 and <= 0 where it is 1; an end-of-turn token only ends a reply.
3. Rewards: each turn's reward sits on its last sampled token; they add up to the outcome reward;
   every ending has its flag and reason.
4. Template: the tokens (plus the template's closing of the last reply) equal the model's chat
   template rendered over the same messages, or the difference is explained (the model sampled a
   non-canonical tokenisation of the same text; the template drops reasoning of earlier turns).
5. Log-probs: a forward pass over the sequence reproduces the sampling log-probs within ``atol``.

It raises :class:`TrajectoryCheckError` (an ``AssertionError``) listing every problem, and
returns a :class:`TrajectoryReport` (with the explanations) when the trajectory passes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agentgym_core.rollout.backend import RolloutBackend
from agentgym_core.rollout.chat import ChatFormat
from agentgym_core.rollout.trajectory import Trajectory

__all__ = ["TrajectoryCheckError", "TrajectoryReport", "check_trajectory"]

_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


class TrajectoryCheckError(AssertionError):
    """The trajectory is not exactly right to train on; the message lists why."""


@dataclass
class TrajectoryReport:
    """What :func:`check_trajectory` found on a passing trajectory."""

    tokens_match_template: bool = False
    text_matches_template: bool = False
    explanations: list[str] = field(default_factory=list)
    max_logprob_error: float | None = None


def _check_layout(traj: Trajectory, eos: frozenset[int], problems: list[str]) -> None:
    n = len(traj.token_ids)
    if not (len(traj.loss_mask) == n == len(traj.logprobs)):
        problems.append(f"lengths differ: token_ids {n}, loss_mask {len(traj.loss_mask)}, logprobs {len(traj.logprobs)}")
        return
    expected_mask = [0] * n
    cursor = 0
    for turn in traj.turns:
        ctx, act = turn.context_span, turn.action_span
        if ctx.start != cursor or ctx.end != act.start or act.end <= act.start:
            problems.append(f"turn {turn.index}: spans {ctx}/{act} do not continue at token {cursor}")
            return
        cursor = act.end
        expected_mask[act.start:act.end] = [1] * len(act)
        if turn.reward_index != act.end - 1:
            problems.append(f"turn {turn.index}: reward_index {turn.reward_index} is not its last sampled token {act.end - 1}")
        reply = traj.token_ids[act.start:act.end]
        if any(t in eos for t in reply[:-1]):
            problems.append(f"turn {turn.index}: an end-of-turn token inside the reply (sampling went on after it)")
        if turn.finish_reason == "eos" and reply[-1] not in eos:
            problems.append(f"turn {turn.index}: finish_reason 'eos' but the reply ends with token {reply[-1]}")
    if cursor != n:
        problems.append(f"the spans cover {cursor} tokens but the trajectory has {n} (it must end with a reply)")
    if traj.turns and traj.prompt_length != traj.turns[0].action_span.start:
        problems.append(f"prompt_length {traj.prompt_length} != first reply start {traj.turns[0].action_span.start}")
    if traj.loss_mask != expected_mask:
        bad = next(i for i, (a, b) in enumerate(zip(traj.loss_mask, expected_mask, strict=True)) if a != b)
        problems.append(f"loss_mask differs from the sampled spans first at token {bad} (mask {traj.loss_mask[bad]})")
    for i, (m, lp) in enumerate(zip(traj.loss_mask, traj.logprobs, strict=True)):
        if (m == 0 and lp != 0.0) or (m == 1 and not lp <= 0.0):
            problems.append(f"token {i}: logprob {lp} with mask {m}")
            break


def _check_outcome(traj: Trajectory, problems: list[str]) -> None:
    total = sum(traj.turn_rewards)
    if abs(total - traj.outcome_reward) > 1e-6:
        problems.append(f"outcome_reward {traj.outcome_reward} != sum of turn rewards {total}")
    if any(not 0 <= turn.reward_index < len(traj.token_ids) for turn in traj.turns):
        problems.append("a turn's reward_index lies outside the token ids")
    if traj.truncated and traj.truncation_reason is None:
        problems.append("truncated without a truncation_reason")
    if traj.failed and not traj.failure_reason:
        problems.append("failed without a failure_reason")
    if not (traj.terminated or traj.truncated or traj.failed):
        problems.append("the trajectory ended with no flag (terminated / truncated / failed)")
    if traj.max_turns is not None and traj.num_turns > traj.max_turns:
        problems.append(f"{traj.num_turns} turns exceed the turn budget {traj.max_turns}")


def _check_template(traj: Trajectory, chat: ChatFormat, report: TrajectoryReport, problems: list[str]) -> None:
    backend = chat.backend
    last_reply = max(i for i, m in enumerate(traj.messages) if m["role"] == "assistant")
    messages = traj.messages[: last_reply + 1]
    with_system = messages[0]["role"] == "system"
    last = traj.turns[-1].action_span
    closing = chat.closing_text(traj.token_ids[last.start:last.end], with_system=with_system, tools=traj.tools)
    rendered = chat.render(messages, add_generation_prompt=False, tools=traj.tools)
    ours = backend.decode(traj.token_ids) + closing
    report.text_matches_template = ours == rendered
    if report.text_matches_template:
        canonical = backend.encode(rendered)
        report.tokens_match_template = canonical == traj.token_ids + backend.encode(closing)
        if not report.tokens_match_template:
            first = next((i for i, (a, b) in enumerate(zip(canonical, traj.token_ids, strict=False)) if a != b), len(traj.token_ids))
            where = next((f"reply of turn {t.index}" for t in traj.turns
                          if t.action_span.start <= first < t.action_span.end), f"context token {first}")
            report.explanations.append(
                "same text as the template render, different token split (first at token "
                f"{first}, in the {where}): the model sampled a non-canonical tokenisation; the sampled ids are kept"
            )
        return
    # The template may drop the reasoning of earlier replies (Qwen3-style): render with it stripped.
    stripped = [
        {**m, "content": _THINK.sub("", m["content"])} if m["role"] == "assistant" and i < last_reply else m
        for i, m in enumerate(messages)
    ]
    if stripped != messages and chat.render(stripped, add_generation_prompt=False, tools=traj.tools) == rendered:
        report.explanations.append(
            "the chat template drops <think> reasoning of earlier replies; the trajectory keeps the tokens "
            "the model actually saw while sampling"
        )
        return
    first = next((i for i, (a, b) in enumerate(zip(ours, rendered, strict=False)) if a != b), min(len(ours), len(rendered)))
    problems.append(
        f"tokens do not match the chat template render from character {first}: "
        f"ours ...{ours[max(0, first - 40):first + 40]!r} vs template ...{rendered[max(0, first - 40):first + 40]!r}"
    )


def check_trajectory(
    traj: Trajectory,
    backend: RolloutBackend,
    *,
    atol: float = 1e-3,
    recompute_logprobs: bool = True,
) -> TrajectoryReport:
    """Audit one trajectory (see the module docstring); raises :class:`TrajectoryCheckError`."""
    problems: list[str] = []
    report = TrajectoryReport()
    _check_layout(traj, backend.eos_token_ids, problems)
    _check_outcome(traj, problems)
    if not traj.turns:
        if traj.token_ids:
            problems.append("tokens without any turn")
    elif not problems:
        _check_template(traj, ChatFormat(backend), report, problems)
        if recompute_logprobs:
            try:
                scored = backend.score([traj.token_ids], temperature=traj.temperature)[0]
            except NotImplementedError:
                report.explanations.append(f"backend {backend.name!r} cannot score; log-probs not recomputed")
            else:
                errors = [abs(s - lp) for s, lp, m in zip(scored, traj.logprobs, traj.loss_mask, strict=True) if m]
                report.max_logprob_error = max(errors, default=0.0)
                if report.max_logprob_error > atol:
                    problems.append(
                        f"recomputed log-probs differ from the sampling log-probs by up to {report.max_logprob_error:.3g} "
                        f"(> atol {atol:g}): the sampled tokens or their log-probs do not belong to these weights"
                    )
    if problems:
        head = f"trajectory env={traj.env!r} task={traj.task_id} sample={traj.sample_index} fails the audit:"
        raise TrajectoryCheckError("\n  - ".join([head, *problems]))
    return report
