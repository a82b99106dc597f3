"""Checks that stop a training run loudly instead of letting it train on something broken.

* :func:`check_env_failures`, the environment failure budget: when more than
  ``rollout.max_env_failure_rate`` of a step's episodes broke by an env error or a timeout
  (``Trajectory.failed``) in every attempt (``rollout.rerun_failed`` re-runs), the run stops with one line naming the environment, the server and the
  error. A crashed server otherwise turns into a step of zero-signal groups, and the next, and the next.
* :class:`WeightSyncProbe`, the check after every weight sync: the learner scores one short fixed
  sequence as the weights are published, the rollout backend scores it again once it has loaded them;
  a mean per-token log-prob gap above ``rollout.sync_check_tolerance`` stops the run (a sync that
  silently did not take, wrong parameter names, a backend that kept its old weights).

The fixed evaluation panels (the task ids each evaluation plays, and their hash, logged at the start of
every run) are :mod:`agentgym_core.evaluation.panel`'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_core.rollout.trajectory import Trajectory

__all__ = [
    "PROBE_TEXT",
    "PROBE_TOKENS",
    "STALE_MOVE",
    "EnvFailureBudgetExceeded",
    "RunStopped",
    "SyncExpectation",
    "WeightSyncError",
    "WeightSyncProbe",
    "check_env_failures",
]


class RunStopped(RuntimeError):
    """A check found the run unsound and stopped it; the message is one line that says why."""


class EnvFailureBudgetExceeded(RunStopped):
    """Too many of a step's episodes broke by infrastructure (see :func:`check_env_failures`)."""


class WeightSyncError(RunStopped):
    """The rollout backend does not hold the weights the learner published (see :class:`WeightSyncProbe`)."""


# ---- the environment failure budget -------------------------------------------------------------------
def check_env_failures(trajectories: Sequence[Trajectory], max_rate: float, *, step: int) -> None:
    """Raise :class:`EnvFailureBudgetExceeded` when more than ``max_rate`` of a step's episodes broke in every
    attempt (``trajectories`` holds every attempt: an episode is an (env, task, sample), re-runs of it follow
    its first attempt); the message names the most frequent (env, server, error) among their attempts."""
    attempts: dict[tuple[str, int, int], list[Trajectory]] = {}
    for t in trajectories:
        attempts.setdefault((t.env, t.task_id, t.sample_index), []).append(t)
    lost = [tries for tries in attempts.values() if all(t.failed for t in tries)]
    if not attempts or len(lost) / len(attempts) <= max_rate:
        return
    causes = Counter((t.env, t.failed_server or "in-process", _first_line(t.failure_reason))
                     for tries in lost for t in tries)
    (env, server, reason), count = causes.most_common(1)[0]
    raise EnvFailureBudgetExceeded(
        f"step {step}: {len(lost)} of {len(attempts)} episodes broke by env errors or timeouts in every attempt, "
        f"more than rollout.max_env_failure_rate={max_rate:g}; env {env!r}, server {server} "
        f"({count} failed attempts): {reason}")


def _first_line(text: str | None) -> str:
    lines = (text or "unknown failure").strip().splitlines()
    return lines[0] if lines else "unknown failure"


# ---- the check after each weight sync --------------------------------------------------------------------
PROBE_TEXT = ("The agent reads the observation, thinks about the goal, and answers with one action.\n"
              "Action: go to the red ball 1")
"""The probe's text: short, so the check costs one forward of a few dozen tokens on each side."""

PROBE_TOKENS = 32


@dataclass
class SyncExpectation:
    """What the backend must reproduce once it has loaded one published set of weights."""

    token_ids: list[int]
    logprobs: list[float]  # the learner's: entry i is log p(token i | tokens before it); entry 0 unused
    tolerance: float
    version: int  # training steps the published weights have taken
    learner_moved: float = 0.0  # mean absolute change of the learner's log-probs since the last sync
    gap: float | None = None  # the mean absolute gap, once checked

    def check(self, backend: Any, previous: Sequence[float] | None = None) -> list[float]:
        """Score the probe with ``backend`` and compare; raise :class:`WeightSyncError` when it does not hold the
        published weights. ``previous`` is its score after the last sync. Returns its score."""
        theirs = [float(x) for x in backend.score([self.token_ids], temperature=1.0)[0]]
        self.gap = _mean_gap(self.logprobs, theirs)
        if previous is not None and self.learner_moved > STALE_MOVE and theirs == list(previous):
            raise WeightSyncError(
                f"weights after step {self.version}: the rollout backend scores a fixed probe exactly as before the "
                f"sync while the learner's log-probs moved by {self.learner_moved:.4f} nats per token; the backend "
                "did not load the weights it was sent (a sync that did not take)")
        if not self.gap <= self.tolerance:  # also NaN
            raise WeightSyncError(
                f"weights after step {self.version}: the rollout backend's log-probs of a fixed probe differ from "
                f"the learner's by {self.gap:.4f} nats per token on average, more than "
                f"rollout.sync_check_tolerance={self.tolerance:g}; the backend does not hold the weights it was "
                "sent (a sync that did not take, parameter names it ignored) or samples in another precision "
                "(raise the tolerance)")
        return theirs


STALE_MOVE = 0.01
"""Learner movement (mean nats per token) past which a backend score identical to the last one means a stale
backend; below it a low-precision sampler may round a small update away."""


def _mean_gap(a: Sequence[float], b: Sequence[float]) -> float:
    """Mean absolute difference of two per-token log-prob lists, entry 0 (no prediction) left out."""
    pairs = list(zip(a[1:], b[1:], strict=True))
    return sum(abs(x - y) for x, y in pairs) / max(len(pairs), 1)


class WeightSyncProbe:
    """The learner's side of the check: one fixed sequence, scored as each set of weights is published."""

    def __init__(self, token_ids: Sequence[int], tolerance: float) -> None:
        if len(token_ids) < 2:
            raise ValueError("the weight-sync probe needs at least 2 tokens")
        self.token_ids, self.tolerance = list(token_ids), tolerance
        self._last: list[float] | None = None  # the learner's log-probs at the last sync

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, tolerance: float) -> WeightSyncProbe:
        """The probe text's first :data:`PROBE_TOKENS` tokens under the policy's tokenizer."""
        ids = tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
        return cls(ids[:PROBE_TOKENS], tolerance)

    def expect(self, learner: Any, version: int) -> SyncExpectation:
        """The learner's log-probs of the probe under its current weights (collective on several ranks)."""
        mine = [float(x) for x in learner.probe_logprobs(self.token_ids)]
        moved = _mean_gap(self._last, mine) if self._last is not None else 0.0
        self._last = mine
        return SyncExpectation(self.token_ids, mine, self.tolerance, version, learner_moved=moved)
