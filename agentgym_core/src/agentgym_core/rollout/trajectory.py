"""The trajectory record: one multi-turn episode, exactly as the trainer must see it.

Layout of one trajectory (``T = len(token_ids)``)::

    token_ids  [ prompt ........ | reply 0 | obs 1 + gen prompt | reply 1 | ... | reply K-1 ]
    loss_mask  [ 0 0 0 ......... | 1 1 1 1 | 0 0 0 0 0 0 0 0 0 | 1 1 1 1 | ... | 1 1 1 1   ]
    logprobs   [ 0 0 0 ......... | sampled | 0 ................ | sampled | ... | sampled   ]

* ``token_ids`` are the ids the backend sampled, never decoded and re-encoded; the tokens between
  replies are the chat template's rendering of the environment's observation plus the generation
  prompt (and whatever the template closes a reply with after the end-of-turn token the model
  produced, e.g. ChatML's newline).
* ``loss_mask`` is 1 exactly on sampled tokens, including the end-of-turn token the model
  produced, and 0 on prompt, template and environment tokens.
* ``logprobs[i]`` is the log-probability under which token ``i`` was sampled
  (``log_softmax(logits / temperature)``, before top-k/top-p truncation, so a forward pass of the
  same weights at the same temperature reproduces it); 0.0 where the mask is 0.
* The trajectory ends with the last sampled token: the final observation is kept in ``turns`` and
  ``messages`` (for logs) but not tokenised, because nothing after it is trained.
* Each turn's reward sits on the last sampled token of that turn (``Turn.reward_index``), so
  token-level estimators (GAE, REINFORCE++) never drop it on a masked position.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["Span", "Trajectory", "Turn", "invalid_action_rate"]

FinishReason = Literal["eos", "stop_string", "length", "token_budget"]
TruncationReason = Literal["max_turns", "token_budget", "env_step_limit", "invalid_action"]


class Span(BaseModel):
    """A half-open token range ``[start, end)`` in ``Trajectory.token_ids``."""

    start: int = Field(description="First token index (inclusive).")
    end: int = Field(description="One past the last token index.")

    def __len__(self) -> int:
        return self.end - self.start


class Turn(BaseModel):
    """One agent turn: the tokens appended before the reply, the reply, and the env's answer."""

    index: int = Field(description="0-based turn number.")
    context_span: Span = Field(
        description="Non-trainable tokens appended before this reply: the whole prompt for turn 0, "
        "else the template's closing of the previous reply + the observation + generation prompt."
    )
    action_span: Span = Field(description="The sampled tokens of this reply (loss_mask 1).")
    text: str = Field(description="The reply decoded for display (never re-encoded).")
    action: str = Field(description="The action the environment parsed from the reply.")
    finish_reason: FinishReason = Field(description="Why sampling of this reply stopped.")
    observation: str | None = Field(
        default=None, description="The environment's answer to the action; None if it never answered."
    )
    reward: float = Field(default=0.0, description="The environment's raw reward for this step.")
    reward_index: int = Field(description="Token index the reward sits on: action_span.end - 1.")
    success: bool | None = Field(default=None, description="The environment's success flag after the step.")
    invalid_action: bool | None = Field(
        default=None, description="The environment refused the action (StepResult.invalid_action); None: it did "
        "not say, or never answered.")
    gen_seconds: float = Field(default=0.0, description="Wall time this reply's generation call took.")
    env_seconds: float = Field(default=0.0, description="Wall time of the environment step.")
    info: dict[str, Any] = Field(default_factory=dict, description="The environment's step info.")


class Trajectory(BaseModel):
    """One episode of agent/environment interaction, ready to train on (see the module docstring)."""

    env: str = Field(description="Environment name.")
    task_id: int = Field(description="Task id within the environment's catalog.")
    seed: int | None = Field(default=None, description="Seed passed to reset.")
    sample_index: int = Field(default=0, description="Which of the K samples of this task (GRPO group member).")
    category: str | None = Field(default=None, description="Task category from the catalog, if any.")
    messages: list[dict[str, str]] = Field(
        default_factory=list, description="The chat as messages (system/user/assistant), for logs and the auditor."
    )
    tools: list[dict[str, Any]] | None = Field(
        default=None, description="Tool schemas the chat template rendered the prompt with (native tool calls); None "
        "when there were none or they were described in the system message.",
    )
    token_ids: list[int] = Field(default_factory=list, description="Prompt + all turns, as sampled.")
    loss_mask: list[int] = Field(default_factory=list, description="1 on sampled tokens, else 0.")
    logprobs: list[float] = Field(default_factory=list, description="Sampling log-prob per token (0 where masked).")
    prompt_length: int = Field(default=0, description="Number of tokens before the first sampled token.")
    start_state: str | None = Field(
        default=None, description="The environment's name for the state reset put it in (info['state_key']), if any."
    )
    turns: list[Turn] = Field(default_factory=list, description="Per-turn spans, actions, rewards, timings.")
    outcome_reward: float = Field(default=0.0, description="Sum of the environment's rewards (the 'score').")
    success: bool = Field(default=False, description="The environment's success flag at the end.")
    terminated: bool = Field(default=False, description="The environment reached an end state.")
    truncated: bool = Field(default=False, description="Cut short: turn budget, token budget or env step limit.")
    truncation_reason: TruncationReason | None = Field(default=None, description="Why it was truncated.")
    failed: bool = Field(default=False, description="The environment (or a timeout) broke the episode.")
    failure_reason: str | None = Field(default=None, description="What failed, for reports and logs.")
    failed_server: str | None = Field(
        default=None, description="URL of the environment server whose call failed, when the environment is remote.")
    max_turns: int | None = Field(default=None, description="Turn budget this trajectory ran under.")
    temperature: float = Field(default=1.0, description="Sampling temperature the log-probs refer to.")
    gen_seconds: float = Field(default=0.0, description="Total wall time in generation calls.")
    env_seconds: float = Field(default=0.0, description="Total wall time in env create/reset/step.")
    wall_seconds: float = Field(default=0.0, description="Start of reset to end of the episode.")
    policy_version: int | None = Field(
        default=None, description="Training steps (updates) the sampling weights had taken; the trainer sets it. "
        "A trajectory trained at step s lags s - policy_version versions (0 when rollouts are synchronous).")

    # -- derived views ---------------------------------------------------------------------
    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_sampled_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def turn_rewards(self) -> list[float]:
        return [turn.reward for turn in self.turns]

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated or self.failed

    @property
    def invalid_actions(self) -> int:
        """Turns whose action the environment refused."""
        return sum(turn.invalid_action is True for turn in self.turns)

    def turn_states(self) -> list[str | None]:
        """The environment's name (``info['state_key']``) for the state each turn acted in: the reset's
        for turn 0, the previous step's for later turns; None where the environment named none."""
        states = [self.start_state]
        states += [turn.info.get("state_key") for turn in self.turns[:-1]]
        return [None if s is None else str(s) for s in states[: len(self.turns)]]

    def mask_summary(self) -> dict[str, int]:
        """Token counts for logs: total, sampled (mask 1), context (mask 0)."""
        sampled = self.num_sampled_tokens
        return {"total": len(self.token_ids), "sampled": sampled, "context": len(self.token_ids) - sampled}


def invalid_action_rate(trajectories: list[Trajectory]) -> float | None:
    """The share of turns whose action the environment refused, over the turns it gave a verdict on
    (``Turn.invalid_action`` not None); None when it gave none (an environment that does not say)."""
    judged = [turn.invalid_action for t in trajectories for turn in t.turns if turn.invalid_action is not None]
    return sum(judged) / len(judged) if judged else None
